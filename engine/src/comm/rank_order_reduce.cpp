#include "rank_order_reduce.hpp"

#include <vector>

#include "zoe/kernels/cast.hpp"

namespace zoe::engine::detail {

void reduce_in_rank_order(std::span<const void* const> blocks, void* out, std::size_t count, kernels::dtype type,
                          reduce_op op) {
  if (blocks.empty() || count == 0) return;
  std::vector<float> sum(count);
  kernels::cast({type, blocks[0], count}, kernels::view(std::span<float>(sum)));
  for (std::size_t q = 1; q < blocks.size(); ++q) kernels::accumulate({type, blocks[q], count}, sum);
  if (op == reduce_op::mean) {
    const auto n = static_cast<float>(blocks.size());
    for (float& x : sum) x /= n;
  }
  kernels::cast(kernels::view(std::span<const float>(sum)), {type, out, count});
}

}  // namespace zoe::engine::detail
