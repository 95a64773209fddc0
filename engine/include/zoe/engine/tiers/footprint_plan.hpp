#pragma once
// The footprint plan: before anything is allocated, the device, pinned-host, pageable-host and NVMe
// bytes this configuration and model need (states per tier, the parameter swap buffers, the
// gathered-parameter arena, the swap store), item by item, and the check against this machine.
// The engine allocates exactly what the plan lists; pinned bytes in use never exceed
// plan.pinned_bytes and device bytes never exceed the device budget.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "zoe/engine/config/config.hpp"
#include "zoe/engine/model/layout.hpp"
#include "zoe/engine/tiers/placement.hpp"

namespace zoe::engine {

enum class memory_kind : std::uint8_t { device = 0, pinned = 1, pageable = 2, nvme = 3 };

/// One line of the plan: what, how many bytes of which memory, and the config keys that size it.
struct plan_item {
  std::string what;  ///< "exp_avg_sq on nvme", "parameter swap buffers", "gathered-parameter arena"
  memory_kind memory = memory_kind::device;
  std::uint64_t bytes = 0;
  std::vector<std::string> keys;  ///< full key paths ("zero_optimization.offload_param.buffer_size")
};

struct footprint_plan {
  std::vector<plan_item> items;
  std::uint64_t device_bytes = 0;
  std::uint64_t pinned_bytes = 0;
  std::uint64_t pageable_bytes = 0;
  std::uint64_t nvme_bytes = 0;  ///< swap store capacity over every nvme path
  /// The sizes the engine allocates with (also listed among the items).
  std::uint64_t arena_bytes = 0;         ///< device arena for gathered parameters
  std::uint64_t param_buffer_count = 0;  ///< pinned swap buffers for parameters (0 without nvme)
  std::uint64_t param_buffer_bytes = 0;  ///< bytes per parameter swap buffer
};

/// Computes the plan. Throws config_error naming the keys when the configuration cannot work for
/// this layout at all (e.g. a parameter swap buffer smaller than the largest shard chunk it must hold).
[[nodiscard]] footprint_plan make_footprint_plan(const model_layout& layout, const engine_config& config,
                                                 const placement& where);

/// What this machine offers, measured once (tests pass their own).
struct machine_limits {
  std::uint64_t device_budget = 0;    ///< bytes the device hands out
  std::uint64_t memlock_limit = 0;    ///< RLIMIT_MEMLOCK (UINT64_MAX when unlimited)
  std::uint64_t host_available = 0;   ///< MemAvailable
  /// Free bytes per nvme path (nullopt when the path does not exist here: free space unknown).
  std::vector<std::pair<std::filesystem::path, std::optional<std::uint64_t>>> disk_free;
};

/// Measures this machine for `config` (the device it would select, its nvme paths).
[[nodiscard]] machine_limits measure_machine(const engine_config& config);

/// Why the plan does not fit, one line per shortfall naming the bytes and the keys to change;
/// empty when it fits.
[[nodiscard]] std::vector<std::string> plan_shortfalls(const footprint_plan& plan, const machine_limits& limits);

/// Throws config_error listing plan_shortfalls() when there is any.
void check_plan_fits(const footprint_plan& plan, const machine_limits& limits);

}  // namespace zoe::engine
