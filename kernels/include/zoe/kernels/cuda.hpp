#pragma once
// CUDA launchers for the kernels, running the same arithmetic as the CPU paths (one definition,
// instantiated on float) on device memory, ordered on a stream. Declared only in builds with CUDA.
// Every pointer inside the views is a device pointer. Launch errors throw device_error naming the
// kernel; argument errors throw usage_error before anything is launched. The calls return once the
// work is queued: thread-safe as far as the stream is.

#include "zoe/core/stream_view.hpp"
#include "zoe/kernels/adam.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::kernels::cuda {

/// Whether this build has the CUDA launchers (false: every launcher throws device_error).
[[nodiscard]] bool available() noexcept;

/// adam_step on the device.
void adam_step(const adam_config& config, const adam_shard& shard, stream_view stream);

/// cast on the device.
void cast(const_tensor_view src, tensor_view dst, stream_view stream);

/// quantize on the device.
void quantize(const_tensor_view in, const quant_config& config, quantized_span out, stream_view stream);

/// dequantize on the device.
void dequantize(const_quantized_span in, const quant_config& config, tensor_view out, stream_view stream);

/// Sets *flag (device memory) to 1 if `x` holds an infinity or NaN; never clears it, so one flag
/// can collect the checks of many tensors.
void has_inf_nan(const_tensor_view x, std::uint32_t* flag, stream_view stream);

}  // namespace zoe::kernels::cuda
