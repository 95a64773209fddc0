#pragma once
// The parameter path wired together: a shard's way from its tier to a gathered parameter and back,
// built from a model, a configuration and a device exactly as the footprint plan sizes it — the
// layout, the placement, the plan, pinned memory, the swap store on the configured paths, the tier
// manager, the parameter swapper, the communicator and the coordinator. zoe-bench params and the
// engine tests use it; the engine object will hold one.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/config/config.hpp"
#include "zoe/engine/coordinator/coordinator.hpp"
#include "zoe/engine/model/layout.hpp"
#include "zoe/engine/swap/parameter_swapper.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/engine/tiers/placement.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::engine {

struct parameter_path_options {
  /// Overrides the plan's arena size (tests of back-pressure); unset: the plan's.
  std::optional<std::uint64_t> arena_bytes;
  /// Passed to swap_store_options::wrap_backend (fault injection in tests).
  std::function<std::unique_ptr<io::io_backend>(std::unique_ptr<io::io_backend>)> wrap_backend;
};

/// Owns every stage of the path; destroyed in reverse order of construction. Not copyable.
class parameter_path {
 public:
  /// Lays out `modules` at world size 1 and builds every stage for `config` on `dev` (which must
  /// outlive it). Before allocating anything, throws config_error naming the keys to change when
  /// the footprint plan does not fit this machine with `dev`'s budget (check_plan_fits), and
  /// naming the key and the path when a swap path the plan needs is not an existing folder. Pinned
  /// memory is limited to the plan's pinned_bytes (0: nothing is pinned, and the resource has no
  /// limit). Otherwise throws what the stages throw: config_error for a plan that cannot work,
  /// io_error naming a swap path that cannot hold the store, memory_error when memory is refused.
  parameter_path(std::vector<module_spec> modules, const engine_config& config, device& dev,
                 parameter_path_options options = {});
  ~parameter_path();
  parameter_path(const parameter_path&) = delete;
  parameter_path& operator=(const parameter_path&) = delete;

  [[nodiscard]] const model_layout& layout() const noexcept { return *layout_; }
  [[nodiscard]] const placement& where() const noexcept { return *placement_; }
  [[nodiscard]] const footprint_plan& plan() const noexcept { return plan_; }
  [[nodiscard]] allocators::pinned_host_resource& pinned() noexcept { return *pinned_; }
  [[nodiscard]] io::swap_store* store() noexcept { return store_.get(); }
  [[nodiscard]] tier_manager& tiers() noexcept { return *tiers_; }
  [[nodiscard]] parameter_swapper& swapper() noexcept { return *swapper_; }
  [[nodiscard]] communicator& comm() noexcept { return *comm_; }
  [[nodiscard]] coordinator& coord() noexcept { return *coordinator_; }

 private:
  std::unique_ptr<model_layout> layout_;
  std::unique_ptr<placement> placement_;
  footprint_plan plan_;
  std::unique_ptr<allocators::pinned_host_resource> pinned_;
  std::unique_ptr<io::swap_store> store_;
  std::unique_ptr<tier_manager> tiers_;
  std::unique_ptr<parameter_swapper> swapper_;
  std::unique_ptr<communicator> comm_;
  std::unique_ptr<coordinator> coordinator_;
};

}  // namespace zoe::engine
