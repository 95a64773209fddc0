#pragma once
// The tier manager: the only owner of every state's location and status. It allocates each
// state's home in its placed tier up front (device memory, pinned or pageable host memory, an
// extent of the swap store) and records, for each, whether its home holds its data (resident),
// a swapper is moving bytes to or from the home (in flight), or the home holds nothing valid
// (released: no data yet, dropped, or a write to it failed). Swappers move bytes; only the tier
// manager changes a status, through the transitions below, which check that the state is in a
// status the transition starts from (usage_error naming the parameter, the state and both
// statuses otherwise).
//
// Homes never move, with one exception: an NVMe state the optimizer step rewrites (master,
// exp_avg, exp_avg_sq, and the working copy on nvme) has a second, shadow extent; the step writes
// there and commit_shadow() swaps the two once the whole step is known good. Otherwise a location is
// fixed from construction to destruction; location() may be read without a lock while no
// commit_shadow() of that state runs (the engine commits only between steps, with no move in flight).

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/model/layout.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/engine/tiers/placement.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::engine {

enum class state_status : std::uint8_t { released = 0, resident = 1, in_flight = 2 };
/// "released", "resident", "in flight". Never throws.
[[nodiscard]] std::string_view state_status_name(state_status s) noexcept;

/// Which way a move goes, relative to the home.
enum class move_kind : std::uint8_t {
  read = 0,   ///< bytes leave the home (the home must hold data: resident)
  write = 1,  ///< bytes arrive at the home (from resident or released)
  /// The optimizer step: the home is read, and its new contents go to the shadow (NVMe) or into the
  /// home in place with an undo copy kept (memory). Starts from resident; however it ends, the
  /// state is resident again with its dirty flag as it was: a failed step leaves the old home good
  /// (the shadow held the new bytes, or the undo copy was put back).
  rewrite = 2,
};

/// Where one state lives. Exactly one of device / host / extent is set, per `where`; a state of
/// 0 bytes (the working copy of an fp32 parameter) has none.
struct state_location {
  tier where = tier::device;
  std::uint64_t bytes = 0;
  void* device = nullptr;     ///< tier::device
  std::span<std::byte> host;  ///< tier::host (pinned or pageable, see pinned); 4 KiB-aligned
  io::swap_extent extent;     ///< tier::nvme
  bool pinned = false;        ///< host memory locked/registered with the device
};

/// What the tier manager allocates homes from. All must outlive it.
struct tier_resources {
  device& dev;
  allocators::pinned_host_resource& pinned;
  io::swap_store* store = nullptr;  ///< required when any state is placed on nvme
};

/// Thread-safe: any thread may read locations and run transitions.
class tier_manager {
 public:
  /// Allocates every state's home as `where` says. Every state starts released.
  /// Throws usage_error when `plan` was made for another placement (its state_bytes differ) or a
  /// state is on nvme and resources.store is null; memory_error (what the device, the pinned
  /// resource or the store throws, with the parameter, state and tier added) when an allocation
  /// is refused. Nothing stays allocated when it throws.
  /// NVMe extents are taken largest first, which is what makes the plan's store capacity enough
  /// (footprint_plan.cpp explains the bound).
  tier_manager(const model_layout& layout, const placement& where, const footprint_plan& plan,
               tier_resources resources);
  /// Frees every home. Never throws (a refused free is logged).
  ~tier_manager();
  tier_manager(const tier_manager&) = delete;
  tier_manager& operator=(const tier_manager&) = delete;

  [[nodiscard]] const model_layout& layout() const noexcept { return *layout_; }
  /// usage_error for a parameter the layout does not have.
  [[nodiscard]] const state_location& location(parameter_id p, state_kind s) const;
  [[nodiscard]] state_status status(parameter_id p, state_kind s) const;
  /// Whether the home copy is older than a copy elsewhere (a gathered parameter that was written,
  /// or a write to the home that failed).
  [[nodiscard]] bool dirty(parameter_id p, state_kind s) const;
  /// Bytes of homes this manager holds in each memory (indexed by memory_kind). Never throws.
  [[nodiscard]] std::uint64_t home_bytes(memory_kind m) const noexcept;

  // ---- transitions (swappers and the coordinator call these) ----------------------------------
  /// Starts a move: resident (read, rewrite) or resident/released (write) -> in_flight. Returns
  /// false, changing nothing, when the state is already in flight (another mover has it). Throws
  /// usage_error for a read or rewrite of a released state.
  bool begin_move(parameter_id p, state_kind s, move_kind kind = move_kind::read);
  /// in_flight -> resident (the move succeeded). After a write the home is current: dirty clears,
  /// unless set_dirty(true) came while the write ran (the source changed after the write took it).
  void finish_move(parameter_id p, state_kind s);
  /// The move failed. After a read or a rewrite: back to resident (the home copy is intact, or was
  /// put back). After a write: released and dirty (the home may hold part of the write; the source
  /// is the only good copy).
  void abort_move(parameter_id p, state_kind s);
  /// released or resident -> resident: the home was written in place (initialization, or an
  /// update of a device or host home). usage_error while in flight.
  void mark_written(parameter_id p, state_kind s);
  /// resident or released -> released: the data is dropped. usage_error while in flight.
  void mark_released(parameter_id p, state_kind s);
  /// Sets the dirty flag. While a write is in flight, the last value set also decides what
  /// finish_move leaves (see there).
  void set_dirty(parameter_id p, state_kind s, bool dirty);

  // ---- the optimizer step's shadow extents (see the header comment) ---------------------------
  /// The shadow extent of (p, s): an extent of the same size as the home's, allocated with it, for
  /// the NVMe states the optimizer step rewrites (master, exp_avg, exp_avg_sq, and the working copy
  /// when it has bytes) when the plan has shadow extents (footprint_plan::shadow_extents); a zero
  /// extent (bytes 0) for every other state. Both extents are freed
  /// with the tier manager.
  [[nodiscard]] io::swap_extent shadow(parameter_id p, state_kind s) const;
  /// The shadow now holds the state's data: it becomes the home's extent and the old extent the
  /// shadow. The state must be resident (usage_error otherwise, or when it has no shadow). The
  /// status and dirty flag stay as they are.
  void commit_shadow(parameter_id p, state_kind s);

 private:
  struct impl;
  /// The index of (p, s); usage_error naming p when the layout has no such parameter.
  [[nodiscard]] std::size_t slot(parameter_id p, state_kind s) const;
  /// Throws usage_error naming the parameter, the state, the transition and the status it found.
  [[noreturn]] void refuse(parameter_id p, state_kind s, std::string_view transition, state_status from) const;
  const model_layout* layout_;
  std::unique_ptr<impl> impl_;
};

}  // namespace zoe::engine
