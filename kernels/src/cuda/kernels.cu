// The CUDA launchers: the shared arithmetic instantiated on float (scalar_lanes, whose operations
// are the explicitly rounded intrinsics on the device), one thread per element or one thread block
// per quantization block. Compiled with --fmad=false so nothing is contracted into an FMA.
#include <cuda_runtime.h>

#include <utility>

#include "arith/prelude.hpp"
#include "dispatch.hpp"
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

using detail::with_dtype;
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
  ZOE_CHECK(e == cudaSuccess, ::zoe::device_error, "kernels::cuda::", kernel,
            ": launch failed: ", cudaGetErrorString(e));
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

// dst (fp32) + src widened, the CPU's one addition per element.
template <dtype S>
__global__ void accumulate_kernel(detail::cast_args a, std::size_t n) {
  float* const dst = static_cast<float*>(a.dst);
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    dst[i] = dst[i] + arith::load_as_float<scalar_lanes, S>(a.src, i);
  }
}

template <dtype T>
__global__ void nonfinite_kernel(const void* src, std::size_t n, std::uint32_t* flag) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float x = arith::load_as_float<scalar_lanes, T>(src, i);
    if ((scalar_lanes::bits(x) & 0x7f800000u) == 0x7f800000u) atomicOr(flag, 1u);
  }
}

// A same-type cast between overlapping ranges, as the CPU's memmove does it (cudaMemcpyAsync
// leaves overlap undefined): one thread block walks the range in tiles, away from the side being
// overwritten (forward when dst lies below src, backward otherwise), reading each tile whole into
// registers before writing any of it. A tile's writes then land only on source bytes already read.
// One block is slow, but overlapping casts are rare; disjoint ones take the copy engine.
constexpr unsigned move_bytes_per_thread = 16;

__global__ void overlapping_move_kernel(std::byte* dst, const std::byte* src, std::size_t bytes) {
  const std::size_t tile = static_cast<std::size_t>(blockDim.x) * move_bytes_per_thread;
  const std::size_t tiles = (bytes + tile - 1) / tile;
  const bool forward = dst < src;
  for (std::size_t t = 0; t < tiles; ++t) {
    const std::size_t base = (forward ? t : tiles - 1 - t) * tile;
    std::byte held[move_bytes_per_thread];
    for (unsigned k = 0; k < move_bytes_per_thread; ++k) {
      const std::size_t i = base + static_cast<std::size_t>(k) * blockDim.x + threadIdx.x;
      if (i < bytes) held[k] = src[i];
    }
    __syncthreads();
    for (unsigned k = 0; k < move_bytes_per_thread; ++k) {
      const std::size_t i = base + static_cast<std::size_t>(k) * blockDim.x + threadIdx.x;
      if (i < bytes) dst[i] = held[k];
    }
    __syncthreads();
  }
}

// One thread block per quantization block: a shared-memory reduction of the block's extreme keys
// (integers: exact in any order, see quant.inl), the block parameters from the shared function,
// then the codes.
template <dtype T, bool symmetric>
__global__ void quantize_kernel(detail::quant_args a) {
  using K = arith::scalar_keys<std::conditional_t<T == dtype::fp32, std::int32_t, std::int16_t>>;
  __shared__ std::int32_t lo_part[threads_per_block];
  __shared__ std::int32_t hi_part[threads_per_block];
  const std::size_t blk = blockIdx.x;
  const std::size_t begin = blk * a.layout.block;
  const std::size_t valid = a.count - begin < a.layout.block ? a.count - begin : a.layout.block;
  const auto key = [&](std::size_t i) { return arith::key_of<K, T, symmetric>(K::load(a.in, begin + i)); };
  std::int32_t lo = key(0);
  std::int32_t hi = lo;
  for (std::size_t i = threadIdx.x; i < valid; i += blockDim.x) {
    const std::int32_t k = key(i);
    lo = K::min(lo, k);
    hi = K::max(hi, k);
  }
  lo_part[threadIdx.x] = lo;
  hi_part[threadIdx.x] = hi;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      lo_part[threadIdx.x] = K::min(lo_part[threadIdx.x], lo_part[threadIdx.x + half]);
      hi_part[threadIdx.x] = K::max(hi_part[threadIdx.x], hi_part[threadIdx.x + half]);
    }
    __syncthreads();
  }
  const arith::block_params params = arith::params_of_keys<T>(a.layout, {lo_part[0], hi_part[0]});
  if (threadIdx.x == 0) {
    a.scales[blk] = params.scale;
    if (a.zero_points != nullptr) a.zero_points[blk] = params.offset;
  }
  const arith::block_lanes<scalar_lanes> b(params);
  const auto code = [&](std::size_t i) -> std::int32_t {
    if (i >= valid) return 0;  // padding
    const float x = arith::load_as_float<scalar_lanes, T>(a.in, begin + i);
    return params.prescaled ? arith::quantize_value<scalar_lanes, symmetric, true>(x, b)
                            : arith::quantize_value<scalar_lanes, symmetric, false>(x, b);
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

// The dequantized value of element i of a quantized buffer: the CPU's decoding (int8 / uint8 byte
// or int4 nibble) and the shared dequantize_value.
__device__ float element_value(const std::byte* code_bytes, const float* scales, const float* zero_points,
                               const detail::quant_layout& l, std::size_t i) {
  const auto* codes = reinterpret_cast<const std::uint8_t*>(code_bytes);
  const std::size_t blk = i / l.block;
  const arith::block_params params =
      arith::stored_block_params(scales[blk], zero_points != nullptr ? zero_points[blk] : 0.0f);
  std::int32_t q = 0;
  if (l.bits == 8) {
    q = l.symmetric ? static_cast<std::int32_t>(static_cast<std::int8_t>(codes[i])) : codes[i];
  } else {
    q = arith::unpack_nibble(codes[i / 2], (i & 1u) != 0, l.symmetric);
  }
  return arith::dequantize_value<scalar_lanes>(q, arith::block_lanes<scalar_lanes>(params));
}

// With `accumulate` (fp32 only) the value is added to what `out` holds, in the CPU's order.
template <dtype T, bool accumulate>
__global__ void dequantize_kernel(detail::dequant_args a) {
  for (std::size_t i = first_index(); i < a.count; i += grid_stride()) {
    float x = element_value(a.codes, a.scales, a.zero_points, a.layout, i);
    if constexpr (accumulate) x = static_cast<const float*>(a.out)[i] + x;
    arith::store_from_float<scalar_lanes, T>(x, a.out, i);
  }
}

// The qgZ reduction, up to reduce_batch_max inputs per launch (they travel in the kernel
// parameters). Per element, the CPU's order: input 0's value, then sum = sum + value of input k for
// k = 1..n-1 in order, then sum * post_scale. A sum carried from one batch to the next is stored
// as fp32, as the CPU keeps it, so batching does not change a bit.
using detail::reduce_batch_max;

struct quant_input {
  const std::byte* codes;
  const float* scales;
  const float* zero_points;  // nullptr when symmetric
};

struct reduce_batch {
  quant_input in[reduce_batch_max];
  unsigned n;
  bool first;  // in[0] starts the sum; otherwise the sum so far is read from `partial`
  bool last;   // scale by post_scale and store as T to `out`; otherwise store the sum to `partial`
  detail::quant_layout layout;
  std::size_t count;
  float post_scale;
  float* partial;
  void* out;
};

template <dtype T>
__global__ void reduce_kernel(reduce_batch b) {
  for (std::size_t i = first_index(); i < b.count; i += grid_stride()) {
    unsigned k = 0;
    float sum = 0.0f;
    if (b.first) {
      sum = element_value(b.in[0].codes, b.in[0].scales, b.in[0].zero_points, b.layout, i);
      k = 1;
    } else {
      sum = b.partial[i];
    }
    for (; k < b.n; ++k) sum = sum + element_value(b.in[k].codes, b.in[k].scales, b.in[k].zero_points, b.layout, i);
    if (b.last) {
      arith::store_from_float<scalar_lanes, T>(sum * b.post_scale, b.out, i);
    } else {
      b.partial[i] = sum;
    }
  }
}

// sum_of_squares, in the CPU's order (detail::sum_chunk, sum_lanes, combine_sum_lanes): each
// thread runs one lane of one chunk as one sequential fp64 chain, so a thread block of 256 covers
// 32 chunks; the lanes of a chunk are combined in shared memory and the chunk's partial written.
constexpr unsigned sum_chunks_per_block = threads_per_block / static_cast<unsigned>(detail::sum_lanes);

template <dtype T>
__global__ void sum_chunks_kernel(const void* x, std::size_t count, std::size_t chunks, double* partials) {
  __shared__ double lanes[threads_per_block];
  const std::size_t chunk =
      static_cast<std::size_t>(blockIdx.x) * sum_chunks_per_block + threadIdx.x / detail::sum_lanes;
  const std::size_t lane = threadIdx.x % detail::sum_lanes;
  double acc = 0.0;
  if (chunk < chunks) {
    const std::size_t begin = chunk * detail::sum_chunk;
    const std::size_t end = count - begin < detail::sum_chunk ? count : begin + detail::sum_chunk;
    for (std::size_t i = begin + lane; i < end; i += detail::sum_lanes) {
      const double v = static_cast<double>(arith::load_as_float<scalar_lanes, T>(x, i));
      acc = __dadd_rn(acc, __dmul_rn(v, v));
    }
  }
  lanes[threadIdx.x] = acc;
  __syncthreads();
  if (chunk < chunks && lane == 0) partials[chunk] = detail::combine_sum_lanes(&lanes[threadIdx.x]);
}

// The chunk partials added in chunk order from 0.0, as the CPU does: one thread.
__global__ void sum_partials_kernel(const double* partials, std::size_t chunks, double* result) {
  double total = 0.0;
  for (std::size_t c = 0; c < chunks; ++c) total = __dadd_rn(total, partials[c]);
  *result = total;
}

void copy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream, const char* kernel) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
  ZOE_CHECK(e == cudaSuccess, ::zoe::device_error, "kernels::cuda::", kernel, ": copy failed: ", cudaGetErrorString(e));
}

// Calls fn.template operator()<T>() with the run-time dtype as a constant.
// One thread block per quantization block of `a`.
void launch_quantize(const detail::quant_args& a, std::size_t blocks, cudaStream_t stream) {
  with_dtype(a.in_type, [&]<dtype T>() {
    if (a.layout.symmetric) {
      quantize_kernel<T, true><<<static_cast<unsigned>(blocks), threads_per_block, 0, stream>>>(a);
    } else {
      quantize_kernel<T, false><<<static_cast<unsigned>(blocks), threads_per_block, 0, stream>>>(a);
    }
  });
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
    if (src.data == dst.data) return;
    if (!detail::ranges_overlap(src.data, src.bytes(), dst.data, dst.bytes())) {
      copy_async(dst.data, src.data, src.bytes(), native(stream), "cast");
      return;
    }
    overlapping_move_kernel<<<1, threads_per_block, 0, native(stream)>>>(
        static_cast<std::byte*>(dst.data), static_cast<const std::byte*>(src.data), src.bytes());
    check_launch("cast");
    return;
  }
  with_dtype(src.type, [&]<dtype S>() {
    with_dtype(dst.type, [&]<dtype D>() {
      cast_kernel<S, D><<<grid_for(src.count), threads_per_block, 0, native(stream)>>>(a, src.count);
    });
  });
  check_launch("cast");
}

void accumulate(const_tensor_view src, std::span<float> dst, stream_view stream) {
  const detail::cast_args a = detail::make_accumulate_args(src, dst);
  if (src.count == 0) return;
  with_dtype(src.type, [&]<dtype S>() {
    accumulate_kernel<S><<<grid_for(src.count), threads_per_block, 0, native(stream)>>>(a, src.count);
  });
  check_launch("accumulate");
}

void quantize(const_tensor_view in, const quant_config& config, quantized_span out, stream_view stream) {
  const detail::quant_args a = detail::make_quant_args(in, config, out);
  const std::size_t blocks = config.blocks(in.count);
  if (blocks == 0) return;
  ZOE_EXPECTS(blocks <= 0x7fffffffu, "kernels::cuda::quantize: ", blocks, " blocks exceed the grid limit");
  launch_quantize(a, blocks, native(stream));
  check_launch("quantize");
}

void dequantize(const_quantized_span in, const quant_config& config, tensor_view out, stream_view stream) {
  const detail::dequant_args a = detail::make_dequant_args(in, config, out);
  if (out.count == 0) return;
  with_dtype(out.type, [&]<dtype T>() {
    dequantize_kernel<T, false><<<grid_for(out.count), threads_per_block, 0, native(stream)>>>(a);
  });
  check_launch("dequantize");
}

void dequantize_accumulate(const_quantized_span in, const quant_config& config, std::span<float> out,
                           stream_view stream) {
  const detail::dequant_args a = detail::make_dequant_accumulate_args(in, config, out);
  if (out.empty()) return;
  dequantize_kernel<dtype::fp32, true><<<grid_for(out.size()), threads_per_block, 0, native(stream)>>>(a);
  check_launch("dequantize_accumulate");
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

namespace {

// Launches the reduction of `inputs` over `count` elements in batches, ending with the scaled sum
// stored as `out_type` to `out`; `partial` (fp32, count elements) carries sums between batches and
// may be null when there is one batch.
void launch_reduce(std::span<const const_quantized_span> inputs, const quant_config& config, std::size_t count,
                   float post_scale, dtype out_type, void* out, float* partial, cudaStream_t stream,
                   const char* kernel) {
  for (std::size_t first = 0; first < inputs.size(); first += reduce_batch_max) {
    const std::size_t n = inputs.size() - first < reduce_batch_max ? inputs.size() - first : reduce_batch_max;
    reduce_batch b{};
    for (std::size_t k = 0; k < n; ++k) {
      const const_quantized_span& q = inputs[first + k];
      b.in[k] = {q.codes.data(), q.scales.data(), config.symmetric ? nullptr : q.zero_points.data()};
    }
    b.n = static_cast<unsigned>(n);
    b.first = first == 0;
    b.last = first + n == inputs.size();
    b.layout = {config.bits, config.block, config.symmetric};
    b.count = count;
    b.post_scale = post_scale;
    b.partial = partial;
    b.out = b.last ? out : partial;
    if (b.last) {
      with_dtype(out_type, [&]<dtype T>() { reduce_kernel<T><<<grid_for(count), threads_per_block, 0, stream>>>(b); });
    } else {
      reduce_kernel<dtype::fp32><<<grid_for(count), threads_per_block, 0, stream>>>(b);
    }
    check_launch(kernel);
  }
}

void permute(const_quantized_span in, const quant_config& config, topology topo, quantized_span out, stream_view stream,
             bool inverse, const char* kernel) {
  const std::size_t part_blocks = detail::expect_permute_args(in, config, topo, out);
  const std::size_t part_bytes = part_blocks * config.block * static_cast<std::size_t>(config.bits) / 8;
  if (part_blocks == 0) return;
  for (std::size_t from = 0; from < topo.world(); ++from) {
    const std::size_t to = inverse ? detail::unswizzle_target(topo, from) : detail::swizzle_target(topo, from);
    copy_async(out.codes.data() + to * part_bytes, in.codes.data() + from * part_bytes, part_bytes, native(stream),
               kernel);
    copy_async(out.scales.data() + to * part_blocks, in.scales.data() + from * part_blocks, part_blocks * sizeof(float),
               native(stream), kernel);
    if (!config.symmetric) {
      copy_async(out.zero_points.data() + to * part_blocks, in.zero_points.data() + from * part_blocks,
                 part_blocks * sizeof(float), native(stream), kernel);
    }
  }
}

}  // namespace

void reduce_requantize(std::span<const const_quantized_span> inputs, const quant_config& config, std::size_t count,
                       float post_scale, const quant_config& out_config, quantized_span out,
                       std::span<std::byte> workspace, stream_view stream) {
  detail::expect_reduce_requantize_args(inputs, config, count, out_config, out);
  float* const sum =
      detail::workspace_as<float>(workspace, reduce_requantize_workspace(count), "kernels::cuda::reduce_requantize");
  if (count == 0) return;
  const std::size_t blocks = out_config.blocks(count);
  ZOE_EXPECTS(blocks <= 0x7fffffffu, "kernels::cuda::reduce_requantize: ", blocks, " blocks exceed the grid limit");
  launch_reduce(inputs, config, count, post_scale, dtype::fp32, sum, sum, native(stream), "reduce_requantize");
  const detail::quant_args a{sum,
                             dtype::fp32,
                             count,
                             0,
                             {out_config.bits, out_config.block, out_config.symmetric},
                             out.codes.data(),
                             out.scales.data(),
                             out_config.symmetric ? nullptr : out.zero_points.data()};
  launch_quantize(a, blocks, native(stream));
  check_launch("reduce_requantize");
}

void reduce_dequantize(std::span<const const_quantized_span> inputs, const quant_config& config, float post_scale,
                       tensor_view out, std::span<std::byte> workspace, stream_view stream) {
  detail::expect_reduce_dequantize_args(inputs, config, out);
  float* const partial = detail::workspace_as<float>(workspace, reduce_dequantize_workspace(inputs.size(), out.count),
                                                     "kernels::cuda::reduce_dequantize");
  if (out.count == 0) return;
  launch_reduce(inputs, config, out.count, post_scale, out.type, out.data, partial, native(stream),
                "reduce_dequantize");
}

void swizzle(const_quantized_span in, const quant_config& config, topology topo, quantized_span out,
             stream_view stream) {
  permute(in, config, topo, out, stream, false, "swizzle");
}

void unswizzle(const_quantized_span in, const quant_config& config, topology topo, quantized_span out,
               stream_view stream) {
  permute(in, config, topo, out, stream, true, "unswizzle");
}

void sum_of_squares(const_tensor_view x, double* result, std::span<std::byte> workspace, stream_view stream) {
  detail::expect_data(x, "kernels::cuda::sum_of_squares");
  ZOE_EXPECTS(result != nullptr, "kernels::cuda::sum_of_squares: result is null");
  double* const partials =
      detail::workspace_as<double>(workspace, sum_of_squares_workspace(x.count), "kernels::cuda::sum_of_squares");
  if (x.count == 0) {
    const cudaError_t e = cudaMemsetAsync(result, 0, sizeof(double), native(stream));  // +0.0, as on the CPU
    ZOE_CHECK(e == cudaSuccess, ::zoe::device_error,
              "kernels::cuda::sum_of_squares: memset failed: ", cudaGetErrorString(e));
    return;
  }
  const std::size_t chunks = (x.count + detail::sum_chunk - 1) / detail::sum_chunk;
  const std::size_t grid = (chunks + sum_chunks_per_block - 1) / sum_chunks_per_block;
  ZOE_EXPECTS(grid <= 0x7fffffffu, "kernels::cuda::sum_of_squares: ", grid, " blocks exceed the grid limit");
  with_dtype(x.type, [&]<dtype T>() {
    sum_chunks_kernel<T>
        <<<static_cast<unsigned>(grid), threads_per_block, 0, native(stream)>>>(x.data, x.count, chunks, partials);
  });
  check_launch("sum_of_squares");
  sum_partials_kernel<<<1, 1, 0, native(stream)>>>(partials, chunks, result);
  check_launch("sum_of_squares");
}

}  // namespace zoe::kernels::cuda
