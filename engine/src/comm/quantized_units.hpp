#pragma once
// What qwZ and qgZ share: the layout of a unit (one quantized run: codes, scales, zero points,
// padded so the next unit stays aligned) inside caller-lent scratch, and the checks of that scratch.

#include <cstddef>
#include <span>
#include <string_view>

#include "zoe/kernels/dtype.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::engine::detail {

/// How one run of `count` elements is quantized and how many bytes its unit takes. A run shorter
/// than the configured block is one block of its own length rounded up to 8: the same codes and
/// scale as the padded long block would hold (the scale comes from the run's elements alone), in
/// a fraction of the bytes.
struct unit_shape {
  kernels::quant_config config;
  std::size_t count = 0;
  std::size_t bytes = 0;  ///< codes, scales, zero points, padded to quantized_scratch_alignment
};
/// The unit of `count` elements in `config` (validated by the caller). Never throws.
[[nodiscard]] unit_shape shape_of(std::size_t count, const kernels::quant_config& config) noexcept;

/// The unit of `shape` starting at `base` (aligned to quantized_scratch_alignment).
[[nodiscard]] kernels::quantized_span unit_at(std::byte* base, const unit_shape& shape);
[[nodiscard]] kernels::const_quantized_span unit_at(const std::byte* base, const unit_shape& shape);

/// Throws usage_error naming `what` when `scratch` holds fewer than `need` bytes or does not start
/// at a multiple of quantized_scratch_alignment.
void check_scratch(std::string_view what, std::span<std::byte> scratch, std::size_t need);

/// Throws usage_error naming `what` for an element type the kernels do not know.
void check_dtype(std::string_view what, kernels::dtype type);

/// `size` rounded up to quantized_scratch_alignment. Never throws.
[[nodiscard]] std::size_t align_scratch(std::size_t size) noexcept;

}  // namespace zoe::engine::detail
