#pragma once
// Conversions between fp32 and the 16-bit float types, overflow checks and the gradient norm.
// Every CPU function here is parallel (TBB, on the calling thread's arena) and gives the same bits
// on every CPU path.

#include <cstddef>
#include <cstdint>
#include <span>

#include "zoe/kernels/dtype.hpp"

namespace zoe::kernels {

/// fp32 -> bf16 bits: IEEE round to nearest even, subnormals kept, overflow to infinity, NaN stays
/// a quiet NaN with its sign and upper payload. Never throws.
[[nodiscard]] std::uint16_t bf16_from_float(float x) noexcept;
/// bf16 bits -> fp32, exact (NaN payloads kept as they are). Never throws.
[[nodiscard]] float float_from_bf16(std::uint16_t h) noexcept;
/// fp32 -> IEEE binary16 bits: round to nearest even, subnormals kept, overflow to infinity, NaN
/// stays a quiet NaN. Never throws.
[[nodiscard]] std::uint16_t fp16_from_float(float x) noexcept;
/// binary16 bits -> fp32, exact; a NaN comes back quiet. Never throws.
[[nodiscard]] float float_from_fp16(std::uint16_t h) noexcept;

/// Converts `src` into `dst` element by element. Throws usage_error when the counts differ or the
/// views overlap while their types differ (same types: a copy).
void cast(const_tensor_view src, tensor_view dst);

/// Adds `src` (fp32, fp16 or bf16), widened to fp32, to `dst` element by element: dst[i] =
/// dst[i] + float(src[i]), one fp32 addition per element, so every path gives the same bits (the
/// gradient accumulation of micro-batches). Throws usage_error when the counts differ or the two
/// overlap.
void accumulate(const_tensor_view src, std::span<float> dst);

/// True when any element of `x` is an infinity or a NaN (the fused overflow check of mixed
/// precision training). Throws usage_error on a null view with a nonzero count.
[[nodiscard]] bool has_inf_nan(const_tensor_view x);

/// The sum of squares of `x`, accumulated in fp64 in one fixed order (eight interleaved lanes per
/// chunk of 64 Ki elements, chunks added in order), so the result depends neither on the thread
/// count nor on the CPU path. Throws usage_error on a null view with a nonzero count.
[[nodiscard]] double sum_of_squares(const_tensor_view x);
/// sum_of_squares keeping its per-chunk partials in `workspace`, at least
/// sum_of_squares_workspace(x.count) bytes, 8-byte aligned (the CUDA launcher takes the same);
/// throws usage_error when it is too small or misaligned.
[[nodiscard]] double sum_of_squares(const_tensor_view x, std::span<std::byte> workspace);
/// Bytes of workspace sum_of_squares needs for `count` elements: one fp64 per 64 Ki elements.
/// Never throws.
[[nodiscard]] std::size_t sum_of_squares_workspace(std::size_t count) noexcept;

}  // namespace zoe::kernels
