// The optimizer step's pieces and slots.
#include "step_pieces.hpp"

#include <algorithm>

#include "zoe/core/units.hpp"

namespace zoe::engine::detail {
namespace {
constexpr std::uint64_t page = 4096;
}  // namespace

bool has_nvme_state(const parameter_layout& p, const tier_of& where) {
  if (p.frozen) return false;  // never stepped: it takes no slot and no undo
  return std::any_of(all_states.begin(), all_states.end(),
                     [&](state_kind s) { return state_bytes(p, s) > 0 && where(p.id, s) == tier::nvme; });
}

bool takes_slot(const parameter_layout& p, state_kind s, const tier_of& where) {
  if (state_bytes(p, s) == 0) return false;
  const tier t = where(p.id, s);
  return t == tier::nvme || (t == tier::device && has_nvme_state(p, where));
}

bool staged_in_memory(const parameter_layout& p, const tier_of& where) {
  if (p.frozen || has_nvme_state(p, where)) return false;
  const auto in = [&](tier t) {
    return std::any_of(all_states.begin(), all_states.end(),
                       [&](state_kind s) { return state_bytes(p, s) > 0 && where(p.id, s) == t; });
  };
  return in(tier::device) && in(tier::host);
}

bool working_alone_on_device(const parameter_layout& p, const tier_of& where) {
  return staged_in_memory(p, where) && std::all_of(all_states.begin(), all_states.end(), [&](state_kind s) {
           return state_bytes(p, s) == 0 || s == state_kind::working || where(p.id, s) == tier::host;
         });
}

bool logs_undo(const parameter_layout& p, state_kind s, const tier_of& where) {
  if (p.frozen || s == state_kind::gradient || state_bytes(p, s) == 0 || where(p.id, s) == tier::nvme) return false;
  if (has_nvme_state(p, where)) return true;
  return staged_in_memory(p, where) && !working_alone_on_device(p, where);
}

bool speculates(const parameter_layout& p, const tier_of& where) {
  return !p.frozen && std::none_of(all_states.begin(), all_states.end(), [&](state_kind s) {
    return state_bytes(p, s) > 0 && where(p.id, s) == tier::device;
  });
}

std::uint64_t pending_bytes(const parameter_layout& p, const tier_of& where) {
  std::uint64_t bytes = 0;
  for (const state_kind s : all_states) {
    if (s != state_kind::gradient && state_bytes(p, s) > 0 && where(p.id, s) == tier::host) {
      bytes += round_up(state_bytes(p, s), pending_alignment);
    }
  }
  return bytes;
}

std::uint64_t fetched_master_bytes(const parameter_layout& p, const tier_of& where) {
  if (!speculates(p, where) || state_bytes(p, state_kind::working) > 0 ||
      where(p.id, state_kind::master) != tier::nvme) {
    return 0;
  }
  return round_up(state_bytes(p, state_kind::master), pending_alignment);
}

std::uint64_t staging_slot_bytes(const model_layout& layout, const tier_of& where, const piece_geometry& geometry) {
  std::uint64_t largest = 0;
  for (const parameter_layout& p : layout.parameters()) {
    if (staged_in_memory(p, where)) largest = std::max(largest, p.shard_numel);
  }
  return std::min(geometry.slot_bytes, round_up(largest * kernels::dtype_size(kernels::dtype::fp32), page));
}

std::uint64_t scratch_bytes(const model_layout& layout, const tier_of& where, const piece_geometry& geometry) {
  return state_kind_count * staging_slot_bytes(layout, where, geometry);
}

piece_geometry make_piece_geometry(const model_layout& layout, const tier_of& where, std::uint64_t chunk) {
  std::uint64_t narrowest = kernels::dtype_size(kernels::dtype::fp32);
  std::uint64_t largest_nvme_shard = 0;
  std::size_t slots = 0;
  for (const parameter_layout& p : layout.parameters()) {
    if (!has_nvme_state(p, where)) continue;
    largest_nvme_shard = std::max(largest_nvme_shard, p.shard_numel);
    std::size_t n = 0;
    for (const state_kind s : all_states) {
      if (!takes_slot(p, s, where)) continue;
      ++n;
      if (where(p.id, s) == tier::nvme) {
        narrowest = std::min<std::uint64_t>(narrowest, kernels::dtype_size(state_dtype(p, s)));
      }
    }
    slots = std::max(slots, n);
  }
  piece_geometry g;
  g.piece_numel = std::max<std::uint64_t>(chunk / narrowest, 1);
  const std::uint64_t widest = kernels::dtype_size(kernels::dtype::fp32);
  const std::uint64_t slot_numel = slots == 0 ? g.piece_numel : std::min(g.piece_numel, largest_nvme_shard);
  g.slot_bytes = round_up(slot_numel * widest, page);
  g.slots_per_piece = slots;
  return g;
}

std::vector<piece> cut_pieces(const model_layout& layout, std::uint64_t sub_group_size, std::uint64_t piece_numel,
                              const std::function<bool(const parameter_layout&)>& select) {
  std::vector<piece> out;
  for (const sub_group& g : sub_groups(layout, sub_group_size)) {
    for (parameter_id id = g.first; id < g.last; ++id) {
      const parameter_layout& p = layout.parameter(id);
      if (!select(p)) continue;
      for (std::uint64_t first = 0; first < p.shard_numel; first += piece_numel) {
        out.push_back({.param = id, .first = first, .count = std::min(piece_numel, p.shard_numel - first)});
      }
    }
  }
  return out;
}

}  // namespace zoe::engine::detail
