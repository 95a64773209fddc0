#pragma once
// The reduction of the mpi backend: every rank's block added in rank order 0..n-1, whatever order
// they arrived in, so every rank and every run gets the same bits. fp16 and bf16 accumulate in
// fp32 and round once at the end; mean is the fp32 sum divided by n.

#include <cstddef>
#include <span>

#include "zoe/engine/comm/communicator.hpp"
#include "zoe/kernels/dtype.hpp"

namespace zoe::engine::detail {

/// out = op(blocks[0], ..., blocks[n-1]), each `count` elements of `type`. `out` may be one of the
/// blocks. Throws only std::bad_alloc.
void reduce_in_rank_order(std::span<const void* const> blocks, void* out, std::size_t count, kernels::dtype type,
                          reduce_op op);

}  // namespace zoe::engine::detail
