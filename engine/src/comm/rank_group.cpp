// Group membership and per-node traffic of one collective (see rank_group.hpp).
#include "rank_group.hpp"

#include <algorithm>

#include "zoe/core/str.hpp"

namespace zoe::engine::detail {

const char* group_kind_name(group_kind k) noexcept {
  switch (k) {
    case group_kind::world: return "world";
    case group_kind::node_local: return "node-local";
    case group_kind::cross_node: return "cross-node";
    case group_kind::hpz: return "hpz";
  }
  return "unknown group";
}

bool rank_group::within(const rank_group& other) const noexcept {
  return std::includes(other.world_ranks.begin(), other.world_ranks.end(), world_ranks.begin(), world_ranks.end());
}

traffic rank_group::sent(collective c, std::uint64_t payload, std::size_t root, std::size_t element) const noexcept {
  traffic t;
  const std::size_t my_node = world_rank() / ranks_per_node;
  for (std::size_t dest = 0; dest < size(); ++dest) {
    const std::uint64_t bytes = bytes_to(c, size(), rank, dest, payload, root, element);
    if (world_ranks[dest] / ranks_per_node == my_node) {
      t.intra_node += bytes;
    } else {
      t.inter_node += bytes;
    }
  }
  return t;
}

std::string rank_group::describe_members() const {
  if (world_ranks.empty()) return "no ranks";
  const bool consecutive = world_ranks.back() - world_ranks.front() + 1 == world_ranks.size();
  if (consecutive) {
    if (size() == 1) return str("world rank ", world_ranks.front());
    return str("world ranks ", world_ranks.front(), "-", world_ranks.back());
  }
  std::string out = "world ranks ";
  for (std::size_t i = 0; i < size(); ++i) out += str(i == 0 ? "" : ", ", world_ranks[i]);
  return out;
}

rank_group make_rank_group(group_kind kind, std::size_t world_size, std::size_t world_rank, std::size_t ranks_per_node,
                           std::size_t hpz_size) {
  rank_group g;
  g.kind = kind;
  g.ranks_per_node = ranks_per_node;
  for (std::size_t w = 0; w < world_size; ++w) {
    bool member = true;
    switch (kind) {
      case group_kind::world: break;
      case group_kind::node_local: member = w / ranks_per_node == world_rank / ranks_per_node; break;
      case group_kind::cross_node: member = w % ranks_per_node == world_rank % ranks_per_node; break;
      case group_kind::hpz: member = w / hpz_size == world_rank / hpz_size; break;
    }
    if (!member) continue;
    if (w == world_rank) g.rank = g.world_ranks.size();
    g.world_ranks.push_back(w);
  }
  return g;
}

}  // namespace zoe::engine::detail
