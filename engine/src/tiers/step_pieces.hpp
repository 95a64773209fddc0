#pragma once
// The optimizer step's pieces (optim/optimizer_step.hpp): how many elements one piece holds, how
// large a pinned slot is, which states of a shard go through a slot, and the pieces of the shards
// with a state on nvme in sub-group order. The footprint plan sizes the optimizer's pinned buffers
// with the same geometry, so the step can always cut them into enough slots. It lives in tiers/,
// below optim/, because the plan is its lowest user; it knows layouts and placements, nothing of
// optim/.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "zoe/engine/model/layout.hpp"
#include "zoe/engine/tiers/placement.hpp"

namespace zoe::engine::detail {

/// Where state `s` of parameter `p` lives (a placement's or a tier manager's view).
using tier_of = std::function<tier(parameter_id, state_kind)>;

/// Without a swap store, the chunk pieces are cut from (for staging only; nothing must align).
inline constexpr std::uint64_t default_piece_chunk = std::uint64_t{1} << 20;

struct piece_geometry {
  /// Elements per piece: one `chunk` of the narrowest state on nvme, so a piece of any state on
  /// nvme covers whole chunks of its extent (or ends at the extent's end).
  std::uint64_t piece_numel = 0;
  /// Bytes of one slot: a piece of an fp32 state (or the largest shard on nvme in fp32, when that
  /// is smaller), in whole 4 KiB pages.
  std::uint64_t slot_bytes = 0;
  /// The most slots one piece takes (0 when nothing is on nvme).
  std::size_t slots_per_piece = 0;
};

/// Whether any state of `p` with bytes lies on nvme.
[[nodiscard]] bool has_nvme_state(const parameter_layout& p, const tier_of& where);
/// Whether the step moves state `s` of `p` through a slot: a state with bytes on nvme, or in device
/// memory in a shard with a state on nvme (the CPU kernel steps such pieces).
[[nodiscard]] bool takes_slot(const parameter_layout& p, state_kind s, const tier_of& where);
/// Whether the step stages `p` piece by piece through its host scratch memory: nothing on nvme,
/// states in both device and host memory.
[[nodiscard]] bool staged_in_memory(const parameter_layout& p, const tier_of& where);
/// Whether `p` is staged in memory with only its working copy in device memory (ZeRO-Offload's
/// layout): the step runs Adam in place on its host states and copies the new working copy to the
/// device, logging nothing (optimizer_step.hpp: what a device failure then means).
[[nodiscard]] bool working_alone_on_device(const parameter_layout& p, const tier_of& where);
/// Whether the step copies state `s` of `p` (one it rewrites, with bytes, in memory) to its undo
/// log before changing it: every such state of a shard with a state on nvme (its I/O can fail after
/// they changed), and of a shard split between device and host memory other than one whose working
/// copy alone is on the device (a device copy or sync can fail after they changed). Shards all in
/// host memory need none (stepped last, once nothing can fail), nor do shards whose rewritten
/// device states are written in place on the device: a device that fails there loses them with it.
[[nodiscard]] bool logs_undo(const parameter_layout& p, state_kind s, const tier_of& where);
/// Whether the step may run `p` speculatively inside backward (optimizer_step.hpp): a stepped shard
/// with no state in device memory, so that its commit is a switch of shadow extents and host memcpys,
/// which cannot fail.
[[nodiscard]] bool speculates(const parameter_layout& p, const tier_of& where);
/// Pending bytes a speculation of `p` takes: each state it rewrites in host memory, in whole
/// pending_alignment units (0 when every rewritten state is on nvme).
inline constexpr std::uint64_t pending_alignment = 64;
[[nodiscard]] std::uint64_t pending_bytes(const parameter_layout& p, const tier_of& where);
/// Pending bytes of `p`'s master as backward's fetch brings it, which its speculation reads instead
/// of the NVMe home: an fp32 parameter (its working copy is its master) that speculates, with its
/// master on nvme; 0 for any other.
[[nodiscard]] std::uint64_t fetched_master_bytes(const parameter_layout& p, const tier_of& where);
/// `chunk` is aio.block_size (default_piece_chunk without a store).
[[nodiscard]] piece_geometry make_piece_geometry(const model_layout& layout, const tier_of& where, std::uint64_t chunk);

/// Bytes per state of the scratch that stages the shards staged in memory: a slot, or the largest
/// such shard in fp32 (whole pages) when that is smaller; 0 when none is staged.
[[nodiscard]] std::uint64_t staging_slot_bytes(const model_layout& layout, const tier_of& where,
                                               const piece_geometry& geometry);
/// Pageable bytes of the step's scratch memory, taken when the step is made: one staging slot per
/// state (a stage run alone takes what it needs when first needed).
[[nodiscard]] std::uint64_t scratch_bytes(const model_layout& layout, const tier_of& where,
                                          const piece_geometry& geometry);

struct piece {
  parameter_id param = 0;
  std::uint64_t first = 0;  ///< first element within the shard
  std::uint64_t count = 0;
};
/// The pieces of the shards `select` accepts, sub-group by sub-group in layout order, each shard
/// cut into pieces of `piece_numel` elements (the last may be shorter).
[[nodiscard]] std::vector<piece> cut_pieces(const model_layout& layout, std::uint64_t sub_group_size,
                                            std::uint64_t piece_numel,
                                            const std::function<bool(const parameter_layout&)>& select);

}  // namespace zoe::engine::detail
