// The unit layout of the quantized collectives: [codes][scales][zero points][padding], one
// contiguous message so one collective carries a run's codes and scales together.
#include "quantized_units.hpp"

#include <algorithm>
#include <cstdint>

#include "zoe/core/check.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"

namespace zoe::engine {
namespace detail {

std::size_t align_scratch(std::size_t size) noexcept {
  return (size + quantized_scratch_alignment - 1) / quantized_scratch_alignment * quantized_scratch_alignment;
}

unit_shape shape_of(std::size_t count, const kernels::quant_config& config) noexcept {
  unit_shape s{config, count, 0};
  // Blocks are multiples of 8 elements (the kernels' rule): a short run rounds up to one.
  const std::size_t run_block = std::max<std::size_t>(8, (count + 7) / 8 * 8);
  s.config.block = std::min(config.block, run_block);
  const std::size_t blocks = s.config.blocks(count);
  const std::size_t floats = s.config.symmetric ? blocks : 2 * blocks;
  // Scales follow the codes: code bytes are whole blocks of a multiple of 8 elements, at least 4
  // bytes per block even in int4, so the floats after them are aligned.
  s.bytes = align_scratch(s.config.code_bytes(count) + floats * sizeof(float));
  return s;
}

kernels::quantized_span unit_at(std::byte* base, const unit_shape& shape) {
  const std::size_t code_bytes = shape.config.code_bytes(shape.count);
  const std::size_t blocks = shape.config.blocks(shape.count);
  auto* const scales = reinterpret_cast<float*>(base + code_bytes);
  return {std::span<std::byte>(base, code_bytes), std::span<float>(scales, blocks),
          std::span<float>(scales + blocks, shape.config.symmetric ? 0 : blocks)};
}

kernels::const_quantized_span unit_at(const std::byte* base, const unit_shape& shape) {
  const std::size_t code_bytes = shape.config.code_bytes(shape.count);
  const std::size_t blocks = shape.config.blocks(shape.count);
  const auto* const scales = reinterpret_cast<const float*>(base + code_bytes);
  return {std::span<const std::byte>(base, code_bytes), std::span<const float>(scales, blocks),
          std::span<const float>(scales + blocks, shape.config.symmetric ? 0 : blocks)};
}

void check_scratch(std::string_view what, std::span<std::byte> scratch, std::size_t need) {
  ZOE_EXPECTS(scratch.size() >= need, what, ": scratch holds ", scratch.size(), " bytes, the call needs ", need);
  ZOE_EXPECTS(need == 0 || reinterpret_cast<std::uintptr_t>(scratch.data()) % quantized_scratch_alignment == 0, what,
              ": scratch at ", static_cast<const void*>(scratch.data()), " is not aligned to ",
              quantized_scratch_alignment, " bytes");
}

void check_dtype(std::string_view what, kernels::dtype type) {
  ZOE_EXPECTS(type == kernels::dtype::fp32 || type == kernels::dtype::fp16 || type == kernels::dtype::bf16, what,
              ": unknown element type ", static_cast<int>(type), " (fp32, fp16 or bf16)");
}

}  // namespace detail

std::size_t quantized_unit_bytes(std::size_t count, const kernels::quant_config& config) noexcept {
  return detail::shape_of(count, config).bytes;
}

}  // namespace zoe::engine
