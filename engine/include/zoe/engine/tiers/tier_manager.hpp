#pragma once
// The tier manager: the only owner of every state's location and status. It allocates each
// state's home in its placed tier up front (device memory, pinned or pageable host memory, an
// extent of the swap store) and records, for each, whether its data is resident there, in flight
// (a swapper is reading or writing it) or released (no data yet, or dropped). Swappers move bytes;
// only the tier manager changes a location or a status, through the transitions below, which check
// that the state is in the status the transition starts from (usage_error naming the parameter,
// the state and both statuses otherwise).

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/model/layout.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/engine/tiers/placement.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::engine {

enum class state_status : std::uint8_t { released = 0, resident = 1, in_flight = 2 };
[[nodiscard]] std::string_view state_status_name(state_status s) noexcept;

/// Where one state lives. Exactly one of the three is set, per `where`.
struct state_location {
  tier where = tier::device;
  std::uint64_t bytes = 0;
  void* device = nullptr;        ///< tier::device
  std::span<std::byte> host;     ///< tier::host (pinned or pageable, see pinned)
  io::swap_extent extent;        ///< tier::nvme
  bool pinned = false;           ///< host memory locked/registered with the device
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
  /// Allocates every state's home as `where` says, within what `plan` lists. Throws memory_error
  /// naming the state and tier when an allocation is refused (nothing stays allocated then).
  tier_manager(const model_layout& layout, const placement& where, const footprint_plan& plan,
               tier_resources resources);
  ~tier_manager();
  tier_manager(const tier_manager&) = delete;
  tier_manager& operator=(const tier_manager&) = delete;

  [[nodiscard]] const model_layout& layout() const noexcept { return *layout_; }
  [[nodiscard]] const state_location& location(parameter_id p, state_kind s) const;
  [[nodiscard]] state_status status(parameter_id p, state_kind s) const;
  /// Whether the home copy is older than a copy elsewhere (a gathered parameter that was written).
  [[nodiscard]] bool dirty(parameter_id p, state_kind s) const;

  // ---- transitions (swappers and the coordinator call these) ----------------------------------
  /// resident -> in_flight (a read from home or a write to it begins). Returns false, changing
  /// nothing, when the state is already in flight; throws usage_error when released and `require_data`.
  bool begin_move(parameter_id p, state_kind s);
  /// in_flight -> resident (the move succeeded).
  void finish_move(parameter_id p, state_kind s);
  /// in_flight -> the status it had before begin_move (the move failed; the home copy is intact).
  void abort_move(parameter_id p, state_kind s);
  /// released -> resident: the home now holds data (first write, initialization).
  void mark_written(parameter_id p, state_kind s);
  void set_dirty(parameter_id p, state_kind s, bool dirty);

 private:
  struct impl;
  const model_layout* layout_;
  std::unique_ptr<impl> impl_;
};

}  // namespace zoe::engine
