// Group membership and per-node counting for a backend whose transport hides its traffic (nccl):
// 4 ranks as 2 nodes of 2, groups as communicator.hpp defines them, bytes by bytes_to()'s rule.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "rank_group.hpp"

namespace zoe::engine::detail {
namespace {

using ranks = std::vector<std::size_t>;

TEST(rank_group, members_of_each_group_on_two_nodes_of_two) {
  // World rank 3: node 1, local rank 1.
  EXPECT_EQ(make_rank_group(group_kind::world, 4, 3, 2, 2).world_ranks, (ranks{0, 1, 2, 3}));
  EXPECT_EQ(make_rank_group(group_kind::node_local, 4, 3, 2, 2).world_ranks, (ranks{2, 3}));
  EXPECT_EQ(make_rank_group(group_kind::cross_node, 4, 3, 2, 2).world_ranks, (ranks{1, 3}));
  EXPECT_EQ(make_rank_group(group_kind::hpz, 4, 3, 2, 4).world_ranks, (ranks{0, 1, 2, 3}));
  const rank_group cross = make_rank_group(group_kind::cross_node, 4, 3, 2, 2);
  EXPECT_EQ(cross.rank, 1U);
  EXPECT_EQ(cross.world_rank(), 3U);
  EXPECT_EQ(cross.describe_members(), "world ranks 1, 3");
  EXPECT_EQ(make_rank_group(group_kind::node_local, 4, 3, 2, 2).describe_members(), "world ranks 2-3");
  EXPECT_EQ(make_rank_group(group_kind::hpz, 4, 3, 2, 1).describe_members(), "world rank 3");
}

TEST(rank_group, within_says_whether_a_group_lies_inside_another) {
  const rank_group world = make_rank_group(group_kind::world, 4, 0, 2, 2);
  const rank_group node = make_rank_group(group_kind::node_local, 4, 0, 2, 2);
  const rank_group cross = make_rank_group(group_kind::cross_node, 4, 0, 2, 2);
  const rank_group hpz = make_rank_group(group_kind::hpz, 4, 0, 2, 2);
  EXPECT_TRUE(node.within(world));
  EXPECT_TRUE(hpz.within(node));
  EXPECT_TRUE(node.within(hpz));
  EXPECT_FALSE(cross.within(node));
  EXPECT_FALSE(world.within(node));
}

TEST(rank_group, traffic_splits_by_the_node_of_each_destination) {
  // Rank 0 of 2 nodes of 2: rank 1 is on its node, ranks 2 and 3 are not.
  const rank_group world = make_rank_group(group_kind::world, 4, 0, 2, 2);
  const traffic gather = world.sent(collective::all_gather, 100);
  EXPECT_EQ(gather.intra_node, 100U);
  EXPECT_EQ(gather.inter_node, 200U);
  // A broadcast sends only from the root.
  EXPECT_EQ(world.sent(collective::broadcast, 64, 1).total(), 0U);
  EXPECT_EQ(world.sent(collective::broadcast, 64, 0).inter_node, 128U);
  // An all-reduce of 8 fp32 elements over 4 ranks: chunks of 2 elements (8 bytes), so 16 bytes to each.
  const traffic reduce = world.sent(collective::all_reduce, 32, 0, 4);
  EXPECT_EQ(reduce.intra_node, 16U);
  EXPECT_EQ(reduce.inter_node, 32U);
  // The node-local group never leaves the node; the cross-node group always does.
  EXPECT_EQ(make_rank_group(group_kind::node_local, 4, 0, 2, 2).sent(collective::all_to_all, 10).inter_node, 0U);
  EXPECT_EQ(make_rank_group(group_kind::cross_node, 4, 0, 2, 2).sent(collective::all_to_all, 10).intra_node, 0U);
  // One rank sends nothing.
  EXPECT_EQ(make_rank_group(group_kind::world, 1, 0, 1, 1).sent(collective::all_gather, 10).total(), 0U);
}

}  // namespace
}  // namespace zoe::engine::detail
