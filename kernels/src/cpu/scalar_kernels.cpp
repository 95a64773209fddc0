// The scalar path: the shared arithmetic instantiated on plain float, one element at a time. It is
// the reference every SIMD path must match bit for bit.
#include "arith/prelude.hpp"
#include "cpu/kernel_table.hpp"
#include "dispatch.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::kernels::detail::scalar_path {
#include "arith/lanes_scalar.inl"
#include "arith/convert.inl"
#include "arith/adam.inl"
#include "arith/quant.inl"
#include "cpu/loops.inl"
}  // namespace zoe::kernels::detail::scalar_path

namespace zoe::kernels {
namespace detail {

const kernel_table& scalar_table() noexcept {
  using scalar_path::scalar_lanes;
  static const kernel_table table{
      scalar_path::adam_range_of<scalar_lanes>,       scalar_path::cast_range_of<scalar_lanes>,
      scalar_path::accumulate_range_of<scalar_lanes>, scalar_path::scale_f32_of<scalar_lanes>,
      scalar_path::nonfinite_range_of<scalar_lanes>,  scalar_path::sum_squares_of<scalar_lanes>,
      scalar_path::quantize_blocks_of<scalar_lanes>,  scalar_path::dequantize_blocks_of<scalar_lanes>,
  };
  return table;
}

}  // namespace detail

std::uint16_t bf16_from_float(float x) noexcept {
  return static_cast<std::uint16_t>(detail::scalar_path::bf16_from_float<detail::scalar_path::scalar_lanes>(x));
}
float float_from_bf16(std::uint16_t h) noexcept {
  return detail::scalar_path::float_from_bf16<detail::scalar_path::scalar_lanes>(h);
}
std::uint16_t fp16_from_float(float x) noexcept {
  return static_cast<std::uint16_t>(detail::scalar_path::fp16_from_float<detail::scalar_path::scalar_lanes>(x));
}
float float_from_fp16(std::uint16_t h) noexcept {
  return detail::scalar_path::float_from_fp16<detail::scalar_path::scalar_lanes>(h);
}

}  // namespace zoe::kernels
