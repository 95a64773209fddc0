// qgZ: the quantized, hierarchical reduce-scatter of gradients (see quantized_collectives.hpp for
// the stages). Scratch holds two buffers of world-size units, A and B, and the kernels' workspace:
//   A: the swizzled send (unit l * N + n holds block n * R + l)
//   B: the node-local receive (unit j * N + n from local rank j, for the rank (n, my local rank))
//   A again: the node sums to send across nodes (unit n for node n); A was sent already
//   B again: the cross-node receive (unit n: node n's sum of my block); B was reduced already
// Every reuse is safe because the kernels and the collectives run in the order of one stream.
//
// The swizzle is done by where step 1 writes, not by kernels::swizzle: that kernel permutes one
// quantized buffer whose codes and scales are two separate arrays, so each destination's piece would
// be two runs (two all_to_alls), and it needs the blocks padded as a whole buffer, where each
// rank's block must be padded on its own. Quantizing each block into its slot of units (codes and
// scales together) gives the same order, one message per destination, and no extra pass.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "quantized_units.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/stream_launch.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"
#include "zoe/kernels/cuda.hpp"

namespace zoe::engine {
namespace {

constexpr std::string_view call_name = "quantized_reduce_scatter";

// The kernels' workspace on a device of `kind` for the reductions of `inputs` units of `count`.
std::size_t workspace_bytes(device_kind kind, std::size_t inputs, std::size_t count) noexcept {
  if (kind == device_kind::cuda) {
    return std::max(kernels::cuda::reduce_requantize_workspace(count),
                    kernels::cuda::reduce_dequantize_workspace(inputs, count));
  }
  return std::max(kernels::reduce_requantize_workspace(count), kernels::reduce_dequantize_workspace(inputs, count));
}

// One reduction of units of `count` elements: the units at `inputs`, in this order.
struct reduction {
  std::vector<const std::byte*> inputs;
  std::byte* out = nullptr;  // the requantized unit (requantize) or unused (the final dequantize)
};

std::vector<kernels::const_quantized_span> spans_of(const reduction& r, const detail::unit_shape& shape) {
  std::vector<kernels::const_quantized_span> spans;
  spans.reserve(r.inputs.size());
  for (const std::byte* unit : r.inputs) spans.push_back(detail::unit_at(unit, shape));
  return spans;
}

}  // namespace

kernels::topology qgz_topology(communicator& world) {
  communicator& local = world.node_local();
  communicator& cross = world.cross_node();
  const kernels::topology topo{cross.size(), local.size()};
  const std::size_t rank = world.rank();
  ZOE_EXPECTS(topo.ranks_per_node > 0 && topo.world() == world.size() && local.rank() == rank % topo.ranks_per_node &&
                  cross.rank() == rank / topo.ranks_per_node,
              "qgZ: ", world.name(), " (", world.size(), " ranks, this one ", rank, ") is not its ", topo.nodes,
              " nodes (", cross.name(), ", this rank at ", cross.rank(), ") of ", topo.ranks_per_node, " ranks (",
              local.name(), ", this rank at ", local.rank(), ") placed in consecutive blocks");
  return topo;
}

std::size_t quantized_reduce_scatter_scratch(kernels::topology topo, std::size_t count, device_kind kind,
                                             std::size_t block) noexcept {
  const std::size_t unit = quantized_unit_bytes(count, qgz_config(block));
  const std::size_t inputs = std::max(topo.nodes, topo.ranks_per_node);
  return 2 * topo.world() * unit + detail::align_scratch(workspace_bytes(kind, inputs, count));
}

void quantized_reduce_scatter(communicator& world, device& dev, const void* send, void* recv, std::size_t count,
                              kernels::dtype type, reduce_op op, std::span<std::byte> scratch, stream_view stream,
                              std::size_t block) {
  qgz_config(block).validate();
  detail::check_dtype(call_name, type);
  ZOE_EXPECTS(op == reduce_op::sum || op == reduce_op::mean, call_name, ": unknown reduce_op ", static_cast<int>(op));
  ZOE_EXPECTS(count == 0 || (send != nullptr && recv != nullptr), call_name, ": a null ",
              send == nullptr ? "send" : "recv", " buffer for ", count, " elements per rank");
  const kernels::topology topo = qgz_topology(world);
  const std::size_t need = quantized_reduce_scatter_scratch(topo, count, dev.kind(), block);
  detail::check_scratch(call_name, scratch, need);
  if (count == 0) return;  // the same on every rank: nothing to reduce

  const std::size_t ranks = topo.world();
  const std::size_t nodes = topo.nodes;
  const std::size_t per_node = topo.ranks_per_node;
  const detail::unit_shape shape = detail::shape_of(count, qgz_config(block));
  const kernels::quant_config config = shape.config;
  const std::size_t unit = shape.bytes;
  const std::size_t element = kernels::dtype_size(type);
  std::byte* const a = scratch.data();
  std::byte* const b = a + ranks * unit;
  const std::span<std::byte> workspace(b + ranks * unit, need - 2 * ranks * unit);

  // 1. Quantize block d into its swizzled unit of A (see the top of this file).
  {
    const auto* const source = static_cast<const std::byte*>(send);
    const auto each_block = [=](const auto& quantize) {
      for (std::size_t d = 0; d < ranks; ++d) {
        const std::size_t slot = (d % per_node) * nodes + d / per_node;
        quantize(kernels::const_tensor_view{type, source + d * count * element, count}, config,
                 detail::unit_at(a + slot * unit, shape));
      }
    };
    launch_kernel(
        dev, stream,
        [each_block] {
          each_block([](const kernels::const_tensor_view& in, const kernels::quant_config& c,
                        kernels::quantized_span out) { kernels::quantize(in, c, out); });
        },
        [&each_block](stream_view s) {
          each_block([s](const kernels::const_tensor_view& in, const kernels::quant_config& c,
                         kernels::quantized_span out) { kernels::cuda::quantize(in, c, out, s); });
        });
  }

  // The units the final reduction reads: where no exchange runs, those this rank made itself.
  reduction last;
  for (std::size_t n = 0; n < nodes; ++n) last.inputs.push_back(a + n * unit);

  if (per_node > 1) {
    // 2. Within the node: local rank l gets, from each local rank j, the N units of local rank l.
    world.node_local().all_to_all(a, b, nodes * unit, stream);
    std::vector<reduction> sums(nodes);
    for (std::size_t n = 0; n < nodes; ++n) {
      for (std::size_t j = 0; j < per_node; ++j) sums[n].inputs.push_back(b + (j * nodes + n) * unit);
      sums[n].out = a + n * unit;
    }
    if (nodes == 1) {
      // One node: its sum is the result; requantizing it would only lose accuracy.
      last = sums[0];
    } else {
      // 3. Each node's sum of the received units, requantized for the trip across nodes.
      auto shared = std::make_shared<const std::vector<reduction>>(std::move(sums));
      const auto each_node = [shared, shape](const auto& reduce) {
        for (const reduction& r : *shared) {
          const std::vector<kernels::const_quantized_span> in = spans_of(r, shape);
          reduce(std::span<const kernels::const_quantized_span>(in), detail::unit_at(r.out, shape));
        }
      };
      launch_kernel(
          dev, stream,
          [each_node, count, config, workspace] {
            each_node([&](std::span<const kernels::const_quantized_span> in, kernels::quantized_span out) {
              kernels::reduce_requantize(in, config, count, 1.0F, config, out, workspace);
            });
          },
          [&](stream_view s) {
            each_node([&](std::span<const kernels::const_quantized_span> in, kernels::quantized_span out) {
              kernels::cuda::reduce_requantize(in, config, count, 1.0F, config, out, workspace, s);
            });
          });
    }
  }

  if (nodes > 1) {
    // 4. Across nodes: rank (n, l) gets node n' 's sum of its block from rank (n', l).
    world.cross_node().all_to_all(a, b, unit, stream);
    for (std::size_t n = 0; n < nodes; ++n) last.inputs[n] = b + n * unit;
  }

  // 5. Dequantize, sum in order and average, into recv.
  const float post_scale = op == reduce_op::mean ? 1.0F / static_cast<float>(ranks) : 1.0F;
  const kernels::tensor_view out{type, recv, count};
  launch_kernel(
      dev, stream,
      [last, shape, config, post_scale, out, workspace] {
        const std::vector<kernels::const_quantized_span> in = spans_of(last, shape);
        kernels::reduce_dequantize(in, config, post_scale, out, workspace);
      },
      [&](stream_view s) {
        const std::vector<kernels::const_quantized_span> in = spans_of(last, shape);
        kernels::cuda::reduce_dequantize(in, config, post_scale, out, workspace, s);
      });
}

}  // namespace zoe::engine
