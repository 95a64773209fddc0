#pragma once
// CUDA launchers for the kernels, running the same arithmetic as the CPU paths (one definition,
// instantiated on float) on device memory, ordered on a stream. In a build without CUDA each launcher throws
// device_error. Every pointer inside the views is a device pointer. Launch errors throw device_error naming the kernel;
// argument errors throw usage_error before anything is launched. The calls return once the work is queued: thread-safe
// as far as the stream is. No launcher allocates: scratch comes from the caller as a workspace span, sized by the
// launcher's *_workspace function; the workspace sizes are available in every build.

#include <cstddef>
#include <span>

#include "zoe/core/stream_view.hpp"
#include "zoe/kernels/adam.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::kernels::cuda {

/// Whether this build has the CUDA launchers (false: every launcher throws device_error).
[[nodiscard]] bool available() noexcept;

/// adam_step on the device.
void adam_step(const adam_config& config, const adam_shard& shard, stream_view stream);

/// cast on the device. Views of one type may overlap, as on the CPU: they are moved as memmove
/// would (a copy-engine copy when they do not overlap).
void cast(const_tensor_view src, tensor_view dst, stream_view stream);

/// accumulate on the device: `dst` is device fp32 memory, read and written in stream order; the
/// same bits as the CPU.
void accumulate(const_tensor_view src, std::span<float> dst, stream_view stream);

/// quantize on the device.
void quantize(const_tensor_view in, const quant_config& config, quantized_span out, stream_view stream);

/// dequantize on the device.
void dequantize(const_quantized_span in, const quant_config& config, tensor_view out, stream_view stream);

/// dequantize_accumulate on the device: `out` is device fp32 memory, read and written in stream
/// order; the same bits as the CPU. Needs no workspace.
void dequantize_accumulate(const_quantized_span in, const quant_config& config, std::span<float> out,
                           stream_view stream);

/// reduce_requantize on the device: the same sums in the same order, bit-identical to the CPU.
/// `inputs` is a host array of views of device buffers; it is read before the call returns.
/// `workspace` is device memory the caller lends until the stream has run the call, at least
/// reduce_requantize_workspace(count) bytes (the fp32 sums), so every byte of device memory comes
/// through device::allocate and its budget. Throws usage_error when it is too small.
void reduce_requantize(std::span<const const_quantized_span> inputs, const quant_config& config, std::size_t count,
                       float post_scale, const quant_config& out_config, quantized_span out,
                       std::span<std::byte> workspace, stream_view stream);
/// Bytes of device workspace reduce_requantize needs for `count` elements. Never throws.
[[nodiscard]] std::size_t reduce_requantize_workspace(std::size_t count) noexcept;

/// reduce_dequantize on the device (inputs and workspace as for reduce_requantize).
void reduce_dequantize(std::span<const const_quantized_span> inputs, const quant_config& config, float post_scale,
                       tensor_view out, std::span<std::byte> workspace, stream_view stream);
/// Bytes of device workspace reduce_dequantize needs: fp32 sums carried between launches, only
/// beyond 32 inputs (zero otherwise). Never throws.
[[nodiscard]] std::size_t reduce_dequantize_workspace(std::size_t inputs, std::size_t count) noexcept;

/// swizzle on the device: one device-to-device copy per partition and array, the CPU's permutation.
void swizzle(const_quantized_span in, const quant_config& config, topology topo, quantized_span out,
             stream_view stream);

/// unswizzle on the device.
void unswizzle(const_quantized_span in, const quant_config& config, topology topo, quantized_span out,
               stream_view stream);

/// Writes the sum of squares of `x` to *result (device memory), in the CPU's fixed fp64 order, so
/// the value is bit-identical to kernels::sum_of_squares. Does not synchronize: read *result after
/// the stream has run. Keeps its per-chunk partials in `workspace` (device memory, at least
/// sum_of_squares_workspace(x.count) bytes, 8-byte aligned; lent until the stream has run the call).
void sum_of_squares(const_tensor_view x, double* result, std::span<std::byte> workspace, stream_view stream);
/// Bytes of device workspace sum_of_squares needs for `count` elements. Never throws.
[[nodiscard]] std::size_t sum_of_squares_workspace(std::size_t count) noexcept;

/// Sets *flag (device memory) to 1 if `x` holds an infinity or NaN; never clears it, so one flag
/// can collect the checks of many tensors.
void has_inf_nan(const_tensor_view x, std::uint32_t* flag, stream_view stream);

}  // namespace zoe::kernels::cuda
