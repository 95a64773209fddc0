#pragma once
// What qwZ and qgZ share: the layout of a unit (one quantized run: codes, scales, zero points,
// padded so the next unit stays aligned) inside caller-lent scratch, and the checks of that scratch.

#include <cstddef>
#include <span>
#include <string_view>

#include "zoe/kernels/dtype.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::engine::detail {

/// The unit of `count` elements in `config` starting at `base` (aligned to
/// quantized_scratch_alignment; quantized_unit_bytes(count, config) bytes from there).
[[nodiscard]] kernels::quantized_span unit_at(std::byte* base, std::size_t count, const kernels::quant_config& config);
[[nodiscard]] kernels::const_quantized_span unit_at(const std::byte* base, std::size_t count,
                                                    const kernels::quant_config& config);

/// Throws usage_error naming `what` when `scratch` holds fewer than `need` bytes or does not start
/// at a multiple of quantized_scratch_alignment.
void check_scratch(std::string_view what, std::span<std::byte> scratch, std::size_t need);

/// Throws usage_error naming `what` for an element type the kernels do not know.
void check_dtype(std::string_view what, kernels::dtype type);

/// `size` rounded up to quantized_scratch_alignment. Never throws.
[[nodiscard]] std::size_t align_scratch(std::size_t size) noexcept;

}  // namespace zoe::engine::detail
