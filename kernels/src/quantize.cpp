#include "zoe/kernels/quantize.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/kernel_table.hpp"
#include "parallel.hpp"
#include "zoe/core/check.hpp"

namespace zoe::kernels {
namespace {

detail::quant_layout layout_of(const quant_config& c) { return {c.bits, c.block, c.symmetric}; }

// Blocks per task: about one elementwise grain of elements.
std::size_t block_grain(const quant_config& c) { return std::max<std::size_t>(1, detail::elementwise_grain / c.block); }

// Checks that `q` holds exactly `blocks` blocks in `c`; `what` names the buffer in the message.
void expect_layout(const_quantized_span q, const quant_config& c, std::size_t blocks, const char* what) {
  const std::size_t code_bytes = blocks * c.block * static_cast<std::size_t>(c.bits) / 8;
  ZOE_EXPECTS(q.codes.size() == code_bytes, what, ": codes hold ", q.codes.size(), " bytes, ", blocks, " blocks of ",
              c.block, " int", c.bits, " codes need ", code_bytes);
  ZOE_EXPECTS(q.scales.size() == blocks, what, ": ", q.scales.size(), " scales for ", blocks, " blocks");
  const std::size_t zero_points = c.symmetric ? 0 : blocks;
  ZOE_EXPECTS(q.zero_points.size() == zero_points, what, ": ", q.zero_points.size(), " zero points, expected ",
              zero_points, c.symmetric ? " (symmetric has none)" : " (one per block)");
}

detail::dequant_args dequant_args_of(const_quantized_span in, const quant_config& c, void* out, dtype out_type,
                                     std::size_t count, std::size_t out_base, bool accumulate) {
  return {in.codes.data(),
          in.scales.data(),
          c.symmetric ? nullptr : in.zero_points.data(),
          layout_of(c),
          out,
          out_type,
          count,
          out_base,
          accumulate};
}

// Sums the dequantized inputs of each block, scaled, into a per-task fp32 buffer, then hands the
// block to `finish(block index, reduced values, valid count)`.
template <class Finish>
void reduce_blocks(std::span<const const_quantized_span> inputs, const quant_config& c, std::size_t count,
                   float post_scale, const Finish& finish) {
  const detail::kernel_table& k = detail::active_table();
  detail::parallel_ranges(c.blocks(count), block_grain(c), [&](std::size_t first, std::size_t last) {
    std::vector<float> sum(c.block);
    for (std::size_t b = first; b < last; ++b) {
      const std::size_t base = b * c.block;
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        k.dequantize_blocks(dequant_args_of(inputs[i], c, sum.data(), dtype::fp32, count, base, i > 0), b, b + 1);
      }
      const std::size_t valid = std::min(c.block, count - base);
      k.scale_f32(sum.data(), valid, post_scale);
      finish(b, sum.data(), valid);
    }
  });
}

void expect_inputs(std::span<const const_quantized_span> inputs, const quant_config& c, std::size_t count) {
  ZOE_EXPECTS(!inputs.empty(), "reduce: no inputs");
  for (const const_quantized_span& q : inputs) expect_layout(q, c, c.blocks(count), "reduce: input");
}

// Moves partition `from` of `in` to partition `to(from)` of `out`, codes, scales and zero points.
template <class Target>
void permute_partitions(const_quantized_span in, const quant_config& c, topology topo, quantized_span out,
                        const Target& to) {
  const std::size_t part_blocks = detail::expect_permute_args(in, c, topo, out);
  const std::size_t part_bytes = part_blocks * c.block * static_cast<std::size_t>(c.bits) / 8;
  detail::parallel_ranges(topo.world(), 1, [&](std::size_t first, std::size_t last) {
    for (std::size_t from = first; from < last; ++from) {
      const std::size_t dst = to(from);
      std::memcpy(out.codes.data() + dst * part_bytes, in.codes.data() + from * part_bytes, part_bytes);
      std::memcpy(out.scales.data() + dst * part_blocks, in.scales.data() + from * part_blocks,
                  part_blocks * sizeof(float));
      if (!c.symmetric) {
        std::memcpy(out.zero_points.data() + dst * part_blocks, in.zero_points.data() + from * part_blocks,
                    part_blocks * sizeof(float));
      }
    }
  });
}

}  // namespace

void quant_config::validate() const {
  ZOE_EXPECTS(bits == 8 || bits == 4, "quantization: bits must be 8 or 4, got ", bits);
  ZOE_EXPECTS(block >= 8 && block % 8 == 0, "quantization: block must be a positive multiple of 8 elements, got ",
              block);
}

namespace detail {

quant_args make_quant_args(const_tensor_view in, const quant_config& config, quantized_span out) {
  config.validate();
  expect_data(in, "quantize: input");
  expect_layout(out, config, config.blocks(in.count), "quantize: output");
  return {in.data,           in.type,          in.count,          0,
          layout_of(config), out.codes.data(), out.scales.data(), config.symmetric ? nullptr : out.zero_points.data()};
}

dequant_args make_dequant_args(const_quantized_span in, const quant_config& config, tensor_view out) {
  config.validate();
  expect_data(out, "dequantize: output");
  expect_layout(in, config, config.blocks(out.count), "dequantize: input");
  return dequant_args_of(in, config, out.data, out.type, out.count, 0, false);
}

dequant_args make_dequant_accumulate_args(const_quantized_span in, const quant_config& config, std::span<float> out) {
  dequant_args args = make_dequant_args(in, config, view(out));
  args.accumulate = true;
  return args;
}

void expect_reduce_requantize_args(std::span<const const_quantized_span> inputs, const quant_config& config,
                                   std::size_t count, const quant_config& out_config, quantized_span out) {
  config.validate();
  out_config.validate();
  ZOE_EXPECTS(out_config.block == config.block, "reduce_requantize: output block ", out_config.block,
              " differs from input block ", config.block);
  expect_inputs(inputs, config, count);
  expect_layout(out, out_config, out_config.blocks(count), "reduce_requantize: output");
}

void expect_reduce_dequantize_args(std::span<const const_quantized_span> inputs, const quant_config& config,
                                   tensor_view out) {
  config.validate();
  expect_data(out, "reduce_dequantize: output");
  expect_inputs(inputs, config, out.count);
}

std::size_t expect_permute_args(const_quantized_span in, const quant_config& config, topology topo,
                                quantized_span out) {
  config.validate();
  ZOE_EXPECTS(topo.nodes >= 1 && topo.ranks_per_node >= 1,
              "swizzle: topology needs at least one node and one rank "
              "per node, got ",
              topo.nodes, " x ", topo.ranks_per_node);
  const std::size_t blocks = in.scales.size();
  expect_layout(in, config, blocks, "swizzle: input");
  expect_layout(out, config, blocks, "swizzle: output");
  ZOE_EXPECTS(blocks % topo.world() == 0, "swizzle: ", blocks, " blocks do not split into ", topo.world(),
              " equal partitions (", topo.nodes, " nodes x ", topo.ranks_per_node,
              " ranks); pad the buffer to a multiple of world blocks");
  ZOE_EXPECTS(in.codes.data() != out.codes.data(), "swizzle: input and output must be different buffers");
  return blocks / topo.world();
}

}  // namespace detail

void quantize(const_tensor_view in, const quant_config& config, quantized_span out) {
  const detail::quant_args args = detail::make_quant_args(in, config, out);
  const detail::kernel_table& k = detail::active_table();
  detail::parallel_ranges(config.blocks(in.count), block_grain(config),
                          [&](std::size_t b, std::size_t e) { k.quantize_blocks(args, b, e); });
}

namespace {
// dequantize and dequantize_accumulate differ only in their arguments (args.accumulate).
void run_dequantize(const detail::dequant_args& args, const quant_config& config, std::size_t count) {
  const detail::kernel_table& k = detail::active_table();
  detail::parallel_ranges(config.blocks(count), block_grain(config),
                          [&](std::size_t b, std::size_t e) { k.dequantize_blocks(args, b, e); });
}
}  // namespace

void dequantize(const_quantized_span in, const quant_config& config, tensor_view out) {
  run_dequantize(detail::make_dequant_args(in, config, out), config, out.count);
}

void dequantize_accumulate(const_quantized_span in, const quant_config& config, std::span<float> out) {
  run_dequantize(detail::make_dequant_accumulate_args(in, config, out), config, out.size());
}

void reduce_requantize(std::span<const const_quantized_span> inputs, const quant_config& config, std::size_t count,
                       float post_scale, const quant_config& out_config, quantized_span out) {
  reduce_requantize(inputs, config, count, post_scale, out_config, out, {});
}

void reduce_requantize(std::span<const const_quantized_span> inputs, const quant_config& config, std::size_t count,
                       float post_scale, const quant_config& out_config, quantized_span out,
                       std::span<std::byte> workspace) {
  detail::expect_reduce_requantize_args(inputs, config, count, out_config, out);
  (void)detail::expect_workspace(workspace, reduce_requantize_workspace(count), alignof(float), "reduce_requantize");
  const detail::kernel_table& k = detail::active_table();
  reduce_blocks(inputs, config, count, post_scale, [&](std::size_t b, const float* sum, std::size_t) {
    const detail::quant_args args{sum,
                                  dtype::fp32,
                                  count,
                                  b * config.block,
                                  layout_of(out_config),
                                  out.codes.data(),
                                  out.scales.data(),
                                  out_config.symmetric ? nullptr : out.zero_points.data()};
    k.quantize_blocks(args, b, b + 1);
  });
}

void reduce_dequantize(std::span<const const_quantized_span> inputs, const quant_config& config, float post_scale,
                       tensor_view out) {
  reduce_dequantize(inputs, config, post_scale, out, {});
}

void reduce_dequantize(std::span<const const_quantized_span> inputs, const quant_config& config, float post_scale,
                       tensor_view out, std::span<std::byte> workspace) {
  detail::expect_reduce_dequantize_args(inputs, config, out);
  (void)detail::expect_workspace(workspace, reduce_dequantize_workspace(inputs.size(), out.count), alignof(float),
                                 "reduce_dequantize");
  const detail::kernel_table& k = detail::active_table();
  reduce_blocks(inputs, config, out.count, post_scale, [&](std::size_t b, const float* sum, std::size_t valid) {
    const detail::cast_args args{sum, dtype::fp32,
                                 static_cast<std::byte*>(out.data) + b * config.block * dtype_size(out.type), out.type};
    k.cast_range(args, 0, valid);
  });
}

void swizzle(const_quantized_span in, const quant_config& config, topology topo, quantized_span out) {
  permute_partitions(in, config, topo, out, [&](std::size_t from) { return detail::swizzle_target(topo, from); });
}

void unswizzle(const_quantized_span in, const quant_config& config, topology topo, quantized_span out) {
  permute_partitions(in, config, topo, out, [&](std::size_t from) { return detail::unswizzle_target(topo, from); });
}

}  // namespace zoe::kernels
