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
void quantize(const_tensor_view, const quant_config&, quantized_span, stream_view) { unavailable("quantize"); }
void dequantize(const_quantized_span, const quant_config&, tensor_view, stream_view) { unavailable("dequantize"); }
void has_inf_nan(const_tensor_view, std::uint32_t*, stream_view) { unavailable("has_inf_nan"); }

}  // namespace zoe::kernels::cuda
