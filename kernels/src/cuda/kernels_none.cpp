// The CUDA launchers in a build without CUDA: each one says so.
#include "zoe/core/check.hpp"
#include "zoe/kernels/cuda.hpp"

namespace zoe::kernels::cuda {
namespace {
[[noreturn]] void unavailable(const char* what) {
  throw device_error(str("kernels::cuda::", what, ": this build of zoe has no CUDA (ZOE_WITH_CUDA=OFF)"));
}
}  // namespace

bool available() noexcept { return false; }
void adam_step(const adam_config&, const adam_shard&, stream_view) { unavailable("adam_step"); }
void cast(const_tensor_view, tensor_view, stream_view) { unavailable("cast"); }
void accumulate(const_tensor_view, std::span<float>, stream_view) { unavailable("accumulate"); }
void quantize(const_tensor_view, const quant_config&, quantized_span, stream_view) { unavailable("quantize"); }
void dequantize(const_quantized_span, const quant_config&, tensor_view, stream_view) { unavailable("dequantize"); }
void dequantize_accumulate(const_quantized_span, const quant_config&, std::span<float>, stream_view) {
  unavailable("dequantize_accumulate");
}
void reduce_requantize(std::span<const const_quantized_span>, const quant_config&, std::size_t, float,
                       const quant_config&, quantized_span, std::span<std::byte>, stream_view) {
  unavailable("reduce_requantize");
}
void reduce_dequantize(std::span<const const_quantized_span>, const quant_config&, float, tensor_view,
                       std::span<std::byte>, stream_view) {
  unavailable("reduce_dequantize");
}
void swizzle(const_quantized_span, const quant_config&, topology, quantized_span, stream_view) {
  unavailable("swizzle");
}
void unswizzle(const_quantized_span, const quant_config&, topology, quantized_span, stream_view) {
  unavailable("unswizzle");
}
void sum_of_squares(const_tensor_view, double*, std::span<std::byte>, stream_view) { unavailable("sum_of_squares"); }
void has_inf_nan(const_tensor_view, std::uint32_t*, stream_view) { unavailable("has_inf_nan"); }

}  // namespace zoe::kernels::cuda
