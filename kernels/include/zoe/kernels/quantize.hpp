#pragma once
// Block quantization for ZeRO++: qwZ (quantized weight all-gather) and qgZ (quantized gradient
// reduce-scatter by hierarchical all-to-all). Each block of `block` elements gets its own fp32
// scale (and, asymmetric, an fp32 zero point, the block minimum). A ragged tail is padded to a whole
// block: padding codes are zero and never read back as data.

#include <cstddef>
#include <cstdint>
#include <span>

#include "zoe/kernels/dtype.hpp"

namespace zoe::kernels {

/// How values become codes.
///  symmetric int8: code in [-127, 127], x = code * scale.
///  asymmetric int8: code in [0, 255], x = code * scale + zero_point.
///  int4 likewise with [-7, 7] and [0, 15]; two codes per byte, element 2i in the low nibble.
struct quant_config {
  int bits = 8;              ///< 8 or 4
  std::size_t block = 2048;  ///< elements per block: a multiple of 8, at least 8
  bool symmetric = true;

  /// Throws usage_error naming the bad field (bits not 4 or 8, block not a positive multiple of 8).
  void validate() const;
  /// Blocks covering `count` elements (the last one padded).
  [[nodiscard]] std::size_t blocks(std::size_t count) const noexcept { return (count + block - 1) / block; }
  /// Bytes of codes for `count` elements, padding included.
  [[nodiscard]] std::size_t code_bytes(std::size_t count) const noexcept {
    return blocks(count) * block * static_cast<std::size_t>(bits) / 8;
  }
};

/// Caller-owned storage for a quantized tensor: codes, one scale per block, and one zero point per
/// block when asymmetric (empty when symmetric).
struct quantized_span {
  std::span<std::byte> codes;
  std::span<float> scales;
  std::span<float> zero_points;
};

/// Read-only counterpart of quantized_span.
struct const_quantized_span {
  std::span<const std::byte> codes;
  std::span<const float> scales;
  std::span<const float> zero_points;

  constexpr const_quantized_span() noexcept = default;
  constexpr const_quantized_span(std::span<const std::byte> c, std::span<const float> s,
                                 std::span<const float> z) noexcept
      : codes(c), scales(s), zero_points(z) {}
  constexpr const_quantized_span(quantized_span q) noexcept  // NOLINT(google-explicit-constructor)
      : codes(q.codes), scales(q.scales), zero_points(q.zero_points) {}
};

/// Quantizes `in` (fp32, fp16 or bf16; finite values) into `out`. Throws usage_error naming the
/// buffer whose size does not match config.code_bytes / config.blocks(in.count).
void quantize(const_tensor_view in, const quant_config& config, quantized_span out);

/// Dequantizes the first `out.count` elements into `out` (fp32, fp16 or bf16). Throws usage_error
/// on size mismatches.
void dequantize(const_quantized_span in, const quant_config& config, tensor_view out);

/// Adds the dequantized values to `out`: out[i] = out[i] + value of element i, in fp32, for the
/// first out.size() elements (e.g. a quantized gradient into an fp32 accumulator). Each element is
/// rounded once, after the addition, so every CPU path and the CUDA launcher give the same bits.
/// Throws usage_error on size mismatches, as dequantize.
void dequantize_accumulate(const_quantized_span in, const quant_config& config, std::span<float> out);

/// The qgZ reduction: dequantizes each of `inputs` (all holding `count` elements in `config`), sums
/// them in input order in fp32, multiplies by `post_scale` (1/world for a mean) and requantizes into
/// `out` with `out_config` (which may differ, e.g. int4 in, int8 out). Throws usage_error on empty
/// inputs or size mismatches.
///
/// `workspace` is scratch the caller lends for the call, at least reduce_requantize_workspace(count)
/// bytes (the CUDA launcher takes the same parameters and its own cuda::reduce_requantize_workspace,
/// so one call site serves both paths). Throws usage_error when it is too small.
void reduce_requantize(std::span<const const_quantized_span> inputs, const quant_config& config, std::size_t count,
                       float post_scale, const quant_config& out_config, quantized_span out,
                       std::span<std::byte> workspace);
/// reduce_requantize with no workspace: the CPU needs none.
void reduce_requantize(std::span<const const_quantized_span> inputs, const quant_config& config, std::size_t count,
                       float post_scale, const quant_config& out_config, quantized_span out);
/// Bytes of workspace the CPU reduce_requantize needs for `count` elements: none, it reduces one
/// block at a time in a buffer of its own per task. Never throws.
[[nodiscard]] std::size_t reduce_requantize_workspace(std::size_t count) noexcept;

/// Like reduce_requantize, but writes the reduced values to `out` (fp32, fp16 or bf16; out.count
/// elements) instead of requantizing: the last step of the gradient path. `workspace` as for
/// reduce_requantize, at least reduce_dequantize_workspace(inputs.size(), out.count) bytes.
void reduce_dequantize(std::span<const const_quantized_span> inputs, const quant_config& config, float post_scale,
                       tensor_view out, std::span<std::byte> workspace);
/// reduce_dequantize with no workspace: the CPU needs none.
void reduce_dequantize(std::span<const const_quantized_span> inputs, const quant_config& config, float post_scale,
                       tensor_view out);
/// Bytes of workspace the CPU reduce_dequantize needs: none. Never throws.
[[nodiscard]] std::size_t reduce_dequantize_workspace(std::size_t inputs, std::size_t count) noexcept;

/// The shape of a two-level all-to-all: `nodes` machines with `ranks_per_node` ranks each.
struct topology {
  std::size_t nodes = 1;
  std::size_t ranks_per_node = 1;
  [[nodiscard]] std::size_t world() const noexcept { return nodes * ranks_per_node; }
};

/// Reorders the blocks of a quantized buffer for the hierarchical all-to-all of qgZ. The buffer is
/// cut into world() equal partitions, partition d destined for global rank d = node * rpn + local.
/// The first (intra-node) all-to-all sends one contiguous piece to each local rank, so partitions
/// are regrouped by local rank: partition (node, local) moves to position local * nodes + node.
/// `in` and `out` must not overlap. Throws usage_error when the block count is not divisible by
/// world() or sizes differ.
void swizzle(const_quantized_span in, const quant_config& config, topology topo, quantized_span out);

/// The inverse of swizzle: unswizzle(swizzle(x)) == x.
void unswizzle(const_quantized_span in, const quant_config& config, topology topo, quantized_span out);

}  // namespace zoe::kernels
