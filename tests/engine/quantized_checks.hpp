#pragma once
// The checks of ZeRO++'s quantized collectives, written over any world: the process's (one rank, or
// mpirun's) or a thread world. Every rank makes the same inputs for every rank from fixed seeds, so
// each checks its own result against the exact (double) result without further communication.
//
// The bounds are the quantizer's: a symmetric block of scale s = max |x| / levels codes each element
// within s / 2 (half a step), so
//   qwZ (int8, 127 levels): |out - x| <= s / 2 + rounding to the working type;
//   qgZ (int4, 7 levels):   |out - sum| <= sum over ranks of s_rank / 2
//                                         + (two-level worlds) sum over nodes of s_node / 2,
//   where s_node comes from the dequantized node sum, whose magnitude is at most the exact node sum's
//   plus its ranks' errors; then the mean's division, fp32 sums and the rounding to the working type.
// Each check also asserts that quantization lost something where it must (so it did run), and the
// bytes the communicator counted for it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"

namespace zoe::engine::testing {

inline constexpr std::array<kernels::dtype, 3> all_types{kernels::dtype::fp32, kernels::dtype::fp16,
                                                         kernels::dtype::bf16};
/// Sizes that divide nothing, and one of several whole blocks.
inline constexpr std::array<std::size_t, 4> sizes{1, 7, 4097, 4 * qwz_default_block - 3};

/// qwZ's bound per element of one rank's shard `x` (values exact in `type`): half a step of its
/// block of qwz_default_block elements plus the rounding of the result to `type`.
[[nodiscard]] std::vector<double> qwz_bounds(std::span<const float> x, kernels::dtype type);

/// What qgZ's reduce-scatter gives one owner, per element of its block: the exact result and how
/// far the result may be from it. `blocks` holds every rank's values for that block (exact in
/// `type`), ranks in world order, `per_node` to a node: half a step of each rank's block, and on
/// two-level worlds of each node sum's, then the mean's division, fp32 sums and the rounding to `type`.
struct qgz_expectation {
  std::vector<double> want;
  std::vector<double> limit;
};
[[nodiscard]] qgz_expectation qgz_expected(std::span<const std::span<const float>> blocks, std::size_t per_node,
                                           kernels::dtype type, reduce_op op);

/// Every ranks_per_node a world of `ranks` allows (its divisors).
[[nodiscard]] std::vector<std::size_t> topologies(std::size_t ranks);

/// qwZ of `count` elements of `type` per rank: within the bound, lossy from 7 elements, and the
/// counted bytes one message per other rank, split intra/inter by node_local()'s size.
void check_gather(communicator& w, device& dev, stream_view stream, std::uint32_t seed, std::size_t count,
                  kernels::dtype type);
/// In place (send inside recv) gives the same bits as apart.
void check_gather_in_place(communicator& w, device& dev, stream_view stream);
/// Three parts of different types travel as one all_gather and land as three single gathers would.
void check_gather_coalesced(communicator& w, device& dev, stream_view stream);

/// qgZ of `count` elements of `type` per rank on w's topology: within the bound, lossy from 7
/// elements, the counted bytes (R - 1) * N units intra-node and N - 1 inter-node.
void check_reduce_scatter(communicator& w, device& dev, stream_view stream, std::uint32_t seed, std::size_t count,
                          kernels::dtype type, reduce_op op, bool in_place);

/// qwZ and qgZ bytes against the plain all_gather and reduce_scatter counted on the same world;
/// rank 0 prints the figures.
void check_bytes_against_plain(communicator& w, device& dev, stream_view stream);

}  // namespace zoe::engine::testing
