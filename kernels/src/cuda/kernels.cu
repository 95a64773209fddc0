// The CUDA launchers: the shared arithmetic instantiated on float (scalar_lanes, whose operations
// are the explicitly rounded intrinsics on the device), one thread per element or one thread block
// per quantization block. Compiled with --fmad=false so nothing is contracted into an FMA.
#include <cuda_runtime.h>

#include "arith/prelude.hpp"
#include "zoe/core/check.hpp"
#include "zoe/kernels/cuda.hpp"

namespace zoe::kernels::detail::cuda_path {
#include "arith/lanes_scalar.inl"
#include "arith/convert.inl"
#include "arith/adam.inl"
#include "arith/quant.inl"
}  // namespace zoe::kernels::detail::cuda_path

namespace zoe::kernels::cuda {
namespace {

using detail::cuda_path::scalar_lanes;
namespace arith = detail::cuda_path;

constexpr unsigned threads_per_block = 256;

cudaStream_t native(stream_view s) { return static_cast<cudaStream_t>(s.native()); }

unsigned grid_for(std::size_t n) {
  // Grid-stride loops: enough blocks to fill any current GPU, never more than needed.
  const std::size_t blocks = (n + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

// Every launch is checked: a bad configuration or a sticky error surfaces here, naming the kernel.
void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  ZOE_CHECK(e == cudaSuccess, ::zoe::device_error, "kernels::cuda::", kernel, ": launch failed: ",
            cudaGetErrorString(e));
}

__device__ std::size_t first_index() { return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

template <dtype G, dtype W, bool with_working>
__global__ void adam_kernel(detail::adam_args a, std::size_t n) {
  const arith::adam_coeffs<scalar_lanes> c(a.s);
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    float p = a.params[i];
    float m = a.exp_avg[i];
    float v = a.exp_avg_sq[i];
    arith::adam_update<scalar_lanes>(c, p, arith::load_as_float<scalar_lanes, G>(a.grad, i), m, v);
    a.params[i] = p;
    a.exp_avg[i] = m;
    a.exp_avg_sq[i] = v;
    if constexpr (with_working) arith::store_from_float<scalar_lanes, W>(p, a.working, i);
  }
}

template <dtype S, dtype D>
__global__ void cast_kernel(detail::cast_args a, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    arith::store_from_float<scalar_lanes, D>(arith::load_as_float<scalar_lanes, S>(a.src, i), a.dst, i);
  }
}

template <dtype T>
__global__ void nonfinite_kernel(const void* src, std::size_t n, std::uint32_t* flag) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float x = arith::load_as_float<scalar_lanes, T>(src, i);
    if ((scalar_lanes::bits(x) & 0x7f800000u) == 0x7f800000u) atomicOr(flag, 1u);
  }
}

// One thread block per quantization block: a shared-memory min/max reduction (exact in any order),
// the block parameters from the shared function, then the codes.
template <dtype T>
__global__ void quantize_kernel(detail::quant_args a) {
  __shared__ float lo_part[threads_per_block];
  __shared__ float hi_part[threads_per_block];
  const std::size_t blk = blockIdx.x;
  const std::size_t begin = blk * a.layout.block;
  const std::size_t valid = a.count - begin < a.layout.block ? a.count - begin : a.layout.block;
  float lo = arith::load_as_float<scalar_lanes, T>(a.in, begin);
  float hi = lo;
  for (std::size_t i = threadIdx.x; i < valid; i += blockDim.x) {
    const float x = arith::load_as_float<scalar_lanes, T>(a.in, begin + i);
    lo = scalar_lanes::min(lo, x);
    hi = scalar_lanes::max(hi, x);
  }
  lo_part[threadIdx.x] = lo;
  hi_part[threadIdx.x] = hi;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      lo_part[threadIdx.x] = scalar_lanes::min(lo_part[threadIdx.x], lo_part[threadIdx.x + half]);
      hi_part[threadIdx.x] = scalar_lanes::max(hi_part[threadIdx.x], hi_part[threadIdx.x + half]);
    }
    __syncthreads();
  }
  const arith::block_params params = arith::make_block_params(a.layout, lo_part[0], hi_part[0]);
  if (threadIdx.x == 0) {
    a.scales[blk] = params.scale;
    if (a.zero_points != nullptr) a.zero_points[blk] = params.offset;
  }
  const arith::block_lanes<scalar_lanes> b(params);
  const auto code = [&](std::size_t i) -> std::int32_t {
    return i < valid ? arith::quantize_value<scalar_lanes>(arith::load_as_float<scalar_lanes, T>(a.in, begin + i), b)
                     : 0;  // padding
  };
  if (a.layout.bits == 8) {
    for (std::size_t i = threadIdx.x; i < a.layout.block; i += blockDim.x) {
      reinterpret_cast<std::uint8_t*>(a.codes)[begin + i] = static_cast<std::uint8_t>(code(i));
    }
  } else {
    for (std::size_t i = 2 * threadIdx.x; i < a.layout.block; i += 2 * blockDim.x) {
      reinterpret_cast<std::uint8_t*>(a.codes)[(begin + i) / 2] =
          arith::pack_nibbles(static_cast<std::int8_t>(code(i)), static_cast<std::int8_t>(code(i + 1)));
    }
  }
}

template <dtype T>
__global__ void dequantize_kernel(detail::dequant_args a) {
  const auto* codes = reinterpret_cast<const std::uint8_t*>(a.codes);
  for (std::size_t i = first_index(); i < a.count; i += grid_stride()) {
    const std::size_t blk = i / a.layout.block;
    const arith::block_params params{a.scales[blk], 0.0f, a.zero_points != nullptr ? a.zero_points[blk] : 0.0f, 0.0f,
                                     0.0f};
    std::int32_t q = 0;
    if (a.layout.bits == 8) {
      q = a.layout.symmetric ? static_cast<std::int32_t>(static_cast<std::int8_t>(codes[i])) : codes[i];
    } else {
      q = arith::unpack_nibble(codes[i / 2], (i & 1u) != 0, a.layout.symmetric);
    }
    arith::store_from_float<scalar_lanes, T>(
        arith::dequantize_value<scalar_lanes>(q, arith::block_lanes<scalar_lanes>(params)), a.out, i);
  }
}

// Calls fn.template operator()<T>() with the run-time dtype as a constant.
template <class Fn>
void with_dtype(dtype t, const Fn& fn) {
  switch (t) {
    case dtype::fp32: fn.template operator()<dtype::fp32>(); break;
    case dtype::fp16: fn.template operator()<dtype::fp16>(); break;
    case dtype::bf16: fn.template operator()<dtype::bf16>(); break;
  }
}

}  // namespace

bool available() noexcept { return true; }

void adam_step(const adam_config& config, const adam_shard& shard, stream_view stream) {
  const detail::adam_args a = detail::make_adam_args(config, shard);
  const std::size_t n = shard.params.size();
  if (n == 0) return;
  with_dtype(a.grad_type, [&]<dtype G>() {
    if (a.working == nullptr) {
      adam_kernel<G, dtype::fp32, false><<<grid_for(n), threads_per_block, 0, native(stream)>>>(a, n);
    } else if (a.working_type == dtype::bf16) {
      adam_kernel<G, dtype::bf16, true><<<grid_for(n), threads_per_block, 0, native(stream)>>>(a, n);
    } else {
      adam_kernel<G, dtype::fp16, true><<<grid_for(n), threads_per_block, 0, native(stream)>>>(a, n);
    }
  });
  check_launch("adam_step");
}

void cast(const_tensor_view src, tensor_view dst, stream_view stream) {
  const detail::cast_args a = detail::make_cast_args(src, dst);
  if (src.count == 0) return;
  if (src.type == dst.type) {
    const cudaError_t e = cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, native(stream));
    ZOE_CHECK(e == cudaSuccess, ::zoe::device_error, "kernels::cuda::cast: copy failed: ", cudaGetErrorString(e));
    return;
  }
  with_dtype(src.type, [&]<dtype S>() {
    with_dtype(dst.type, [&]<dtype D>() {
      cast_kernel<S, D><<<grid_for(src.count), threads_per_block, 0, native(stream)>>>(a, src.count);
    });
  });
  check_launch("cast");
}

void quantize(const_tensor_view in, const quant_config& config, quantized_span out, stream_view stream) {
  const detail::quant_args a = detail::make_quant_args(in, config, out);
  const std::size_t blocks = config.blocks(in.count);
  if (blocks == 0) return;
  ZOE_EXPECTS(blocks <= 0x7fffffffu, "kernels::cuda::quantize: ", blocks, " blocks exceed the grid limit");
  with_dtype(in.type, [&]<dtype T>() {
    quantize_kernel<T><<<static_cast<unsigned>(blocks), threads_per_block, 0, native(stream)>>>(a);
  });
  check_launch("quantize");
}

void dequantize(const_quantized_span in, const quant_config& config, tensor_view out, stream_view stream) {
  const detail::dequant_args a = detail::make_dequant_args(in, config, out);
  if (out.count == 0) return;
  with_dtype(out.type, [&]<dtype T>() {
    dequantize_kernel<T><<<grid_for(out.count), threads_per_block, 0, native(stream)>>>(a);
  });
  check_launch("dequantize");
}

void has_inf_nan(const_tensor_view x, std::uint32_t* flag, stream_view stream) {
  detail::expect_data(x, "kernels::cuda::has_inf_nan");
  ZOE_EXPECTS(flag != nullptr, "kernels::cuda::has_inf_nan: flag is null");
  if (x.count == 0) return;
  with_dtype(x.type, [&]<dtype T>() {
    nonfinite_kernel<T><<<grid_for(x.count), threads_per_block, 0, native(stream)>>>(x.data, x.count, flag);
  });
  check_launch("has_inf_nan");
}

}  // namespace zoe::kernels::cuda
