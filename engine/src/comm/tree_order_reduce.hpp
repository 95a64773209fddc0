#pragma once
// The reduction of the mpi backend: every rank's block added in zoe's pairwise tree over the ranks
// (zoe/engine/comm/pairwise_tree.hpp: ((r0 + r1) + (r2 + r3)) for 4), whatever order they arrived
// in, so every rank and every run gets the same bits, and a sum split over a power-of-two number of
// ranks in aligned runs adds up as it would on one. fp16 and bf16 accumulate in fp32 and round once
// at the end; mean is the fp32 sum divided by n.

#include <cstddef>
#include <span>

#include "zoe/engine/comm/communicator.hpp"
#include "zoe/kernels/dtype.hpp"

namespace zoe::engine::detail {

/// out = op(blocks[0], ..., blocks[n-1]), each `count` elements of `type`, added in the pairwise
/// tree. `out` may be one of the blocks. Throws only std::bad_alloc.
void reduce_in_tree_order(std::span<const void* const> blocks, void* out, std::size_t count, kernels::dtype type,
                          reduce_op op);

}  // namespace zoe::engine::detail
