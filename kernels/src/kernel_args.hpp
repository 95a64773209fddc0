#pragma once
// The plain argument structs every launcher (scalar, SIMD, CUDA) receives: raw pointers checked
// by the public entry points, and coefficients computed once on the host so every path starts from
// the same float bits.

#include <cstddef>
#include <cstdint>
#include <span>

#include "zoe/kernels/dtype.hpp"

#include "zoe/kernels/adam.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::kernels::detail {

/// The per-step constants of Adam, rounded to float once.
struct adam_scalars {
  float grad_scale;  // 1/loss_scale times the clip factor
  float l2;          // weight decay added to the gradient (Adam), else 0
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float inv_sqrt_bc2;  // 1/sqrt(1 - beta2^t), or 1 without bias correction
  float eps;
  float lr_wd;      // lr * weight decay (AdamW), else 0
  float step_size;  // lr / (1 - beta1^t), or lr
};

/// Computes the constants in double and rounds each to float once. Throws usage_error on bad
/// settings (naming the field).
[[nodiscard]] adam_scalars make_adam_scalars(const adam_config& config);

struct adam_args {
  float* params;
  float* exp_avg;
  float* exp_avg_sq;
  const void* grad;
  dtype grad_type;
  void* working;  // nullptr: no working copy
  dtype working_type;
  adam_scalars s;
};

struct cast_args {
  const void* src;
  dtype src_type;
  void* dst;
  dtype dst_type;
};

/// One quantization layout, flattened.
struct quant_layout {
  int bits;
  std::size_t block;
  bool symmetric;
};

struct quant_args {
  const void* in;
  dtype in_type;
  std::size_t count;    // valid elements, counted from the tensor start; the last block is padded
  std::size_t in_base;  // element index `in` points at (blocks are numbered from the tensor start)
  quant_layout layout;
  std::byte* codes;
  float* scales;
  float* zero_points;  // nullptr when symmetric
};

struct dequant_args {
  const std::byte* codes;
  const float* scales;
  const float* zero_points;  // nullptr when symmetric
  quant_layout layout;
  void* out;
  dtype out_type;
  std::size_t count;     // valid elements, counted from the tensor start
  std::size_t out_base;  // element index `out` points at
  bool accumulate;       // out (fp32) += value instead of out = value
};

/// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte.
[[nodiscard]] inline bool ranges_overlap(const void* a, std::size_t a_bytes, const void* b,
                                         std::size_t b_bytes) noexcept {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// Argument checks shared by the CPU and CUDA entry points: each throws usage_error naming what is
// wrong and otherwise returns the flattened arguments.
[[nodiscard]] adam_args make_adam_args(const adam_config& config, const adam_shard& shard);
/// Also checks that differing types do not overlap; same types are a plain copy for the caller.
[[nodiscard]] cast_args make_cast_args(const_tensor_view src, tensor_view dst);
[[nodiscard]] quant_args make_quant_args(const_tensor_view in, const quant_config& config, quantized_span out);
[[nodiscard]] dequant_args make_dequant_args(const_quantized_span in, const quant_config& config, tensor_view out);
/// The checks of dequantize, for out += value.
[[nodiscard]] dequant_args make_dequant_accumulate_args(const_quantized_span in, const quant_config& config,
                                                        std::span<float> out);
/// The checks of accumulate (counts equal, no overlap); the result's dst is fp32.
[[nodiscard]] cast_args make_accumulate_args(const_tensor_view src, std::span<float> dst);
/// Throws usage_error naming `what` when a view has null data and a nonzero count.
void expect_data(const_tensor_view x, const char* what);
/// The checks of reduce_requantize (both configs, equal blocks, non-empty inputs, every size).
void expect_reduce_requantize_args(std::span<const const_quantized_span> inputs, const quant_config& config,
                                   std::size_t count, const quant_config& out_config, quantized_span out);
/// The checks of reduce_dequantize; the element count is out.count.
void expect_reduce_dequantize_args(std::span<const const_quantized_span> inputs, const quant_config& config,
                                   tensor_view out);
/// The checks of swizzle and unswizzle (config, topology, sizes, divisibility, distinct buffers);
/// returns the blocks per partition.
[[nodiscard]] std::size_t expect_permute_args(const_quantized_span in, const quant_config& config, topology topo,
                                              quantized_span out);

/// Checks that `workspace` holds at least `bytes` aligned to `alignment` and returns its start.
/// Throws usage_error naming `what`, the bytes needed and the bytes given (or the misalignment).
[[nodiscard]] void* expect_workspace(std::span<std::byte> workspace, std::size_t bytes, std::size_t alignment,
                                     const char* what);
template <class T>
[[nodiscard]] T* workspace_as(std::span<std::byte> workspace, std::size_t bytes, const char* what) {
  return static_cast<T*>(expect_workspace(workspace, bytes, alignof(T), what));
}

/// How many quantized inputs the CUDA reduction takes per launch (they travel in the kernel
/// parameters); more need an fp32 sum carried between launches in the workspace.
inline constexpr std::size_t reduce_batch_max = 32;

/// The fixed order of sum_of_squares, shared by the CPU and CUDA paths: chunks of sum_chunk
/// elements; in a chunk, element i is squared in fp64 and added to lane i % sum_lanes, in element
/// order; a chunk's lanes are combined by combine_sum_lanes; the chunk partials are added in chunk
/// order, starting from 0.0.
inline constexpr std::size_t sum_chunk = std::size_t{1} << 16;
inline constexpr std::size_t sum_lanes = 8;
#if defined(__CUDACC__)
__host__ __device__
#endif
    [[nodiscard]] constexpr double
    combine_sum_lanes(const double* l) noexcept {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/// Where swizzle moves partition `from` (global rank node * rpn + local): to local * nodes + node.
/// Shared by the CPU and CUDA swizzles so the permutation is written once.
[[nodiscard]] constexpr std::size_t swizzle_target(topology topo, std::size_t from) noexcept {
  return (from % topo.ranks_per_node) * topo.nodes + from / topo.ranks_per_node;
}
/// Where unswizzle moves partition `from` (local * nodes + node): back to node * rpn + local.
[[nodiscard]] constexpr std::size_t unswizzle_target(topology topo, std::size_t from) noexcept {
  return (from % topo.nodes) * topo.ranks_per_node + from / topo.nodes;
}

}  // namespace zoe::kernels::detail
