#include "tree_order_reduce.hpp"

#include <vector>

#include "zoe/engine/comm/pairwise_tree.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::engine::detail {

void reduce_in_tree_order(std::span<const void* const> blocks, void* out, std::size_t count, kernels::dtype type,
                          reduce_op op) {
  if (blocks.empty() || count == 0) return;
  std::vector<float> sum = pairwise_tree_sum<std::vector<float>>(
      blocks.size(),
      [&](std::size_t q) {
        std::vector<float> block(count);
        kernels::cast({type, blocks[q], count}, kernels::view(std::span<float>(block)));
        return block;
      },
      [](std::vector<float>& left, std::vector<float>&& right) {
        kernels::accumulate(kernels::view(std::span<const float>(right)), left);
      });
  if (op == reduce_op::mean) {
    const auto n = static_cast<float>(blocks.size());
    for (float& x : sum) x /= n;
  }
  kernels::cast(kernels::view(std::span<const float>(sum)), {type, out, count});
}

}  // namespace zoe::engine::detail
