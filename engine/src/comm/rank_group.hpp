#pragma once
// Which world ranks make up a group (the world, node-local, cross-node and hpZ groups of
// communicator.hpp), and what one collective on it sends to each node, by bytes_to()'s rule. A
// backend whose transport hides its traffic (NCCL) counts with it; it needs no transport itself.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine::detail {

/// The kinds of group a world communicator offers.
enum class group_kind : std::uint8_t { world, node_local, cross_node, hpz };
/// "world", "node-local", "cross-node", "hpz". Never throws.
[[nodiscard]] const char* group_kind_name(group_kind k) noexcept;

/// One group as seen from one rank. Immutable after make_rank_group.
struct rank_group {
  group_kind kind = group_kind::world;
  std::vector<std::size_t> world_ranks;  ///< the members' world ranks, ascending; member i is rank i
  std::size_t rank = 0;                  ///< this rank's position in world_ranks
  std::size_t ranks_per_node = 1;        ///< world rank w lives on node w / ranks_per_node

  [[nodiscard]] std::size_t size() const noexcept { return world_ranks.size(); }
  [[nodiscard]] std::size_t world_rank() const noexcept { return world_ranks[rank]; }
  /// Whether every member of this group is a member of `other`. Never throws.
  [[nodiscard]] bool within(const rank_group& other) const noexcept;
  /// What this rank hands the transport in one collective, summed over the members by
  /// bytes_to(c, size(), rank, dest, payload, root, element) and split by whether each member is on
  /// this rank's node. Never throws.
  [[nodiscard]] traffic sent(collective c, std::uint64_t payload, std::size_t root = 0,
                             std::size_t element = 1) const noexcept;
  /// "world ranks 0-3" or "world ranks 1, 3": the members, for messages. Throws only std::bad_alloc.
  [[nodiscard]] std::string describe_members() const;
};

/// The `kind` group of world rank `world_rank` in a world of `world_size` ranks with
/// `ranks_per_node` ranks per node and hpZ groups of `hpz_size` ranks (both dividing world_size:
/// the caller checked). Throws only std::bad_alloc.
[[nodiscard]] rank_group make_rank_group(group_kind kind, std::size_t world_size, std::size_t world_rank,
                                         std::size_t ranks_per_node, std::size_t hpz_size);

}  // namespace zoe::engine::detail
