#pragma once
// The engine's shared resources: what every stage of the engine builds on, made once from a model,
// a configuration and a device exactly as the footprint plan sizes it — the layout, the placement,
// the plan, pinned memory, the swap store on the configured paths, the tier manager, the parameter
// swapper, the two communicators and the coordinator. Not a path of its own: it owns the stages up
// to the coordinator and lends them out. The engine object (offload_engine) holds one and builds its
// state I/O, gradient path, optimizer step and activation store on it; zoe-bench's params and
// optimizer runs and the engine tests use it alone.

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

struct engine_resources_options {
  /// Overrides the plan's arena size (tests of back-pressure); unset: the plan's.
  std::optional<std::uint64_t> arena_bytes;
  /// Passed to swap_store_options::wrap_backend (fault injection in tests).
  std::function<std::unique_ptr<io::io_backend>(std::unique_ptr<io::io_backend>)> wrap_backend;
  /// The worlds to use instead of making them from the configuration (tests: a fake, or worlds
  /// made once for several engines). Both or neither; they must outlive the resources, be distinct
  /// objects of the same ranks, and be of one size.
  communicator* comm = nullptr;           ///< the coordinator's gathers
  communicator* gradient_comm = nullptr;  ///< the gradient path's reductions and the step's collectives
};

/// The communicator settings of `config`: zoe.comm.backend, zoe.comm.timeout_s, zoe.ranks_per_node
/// and zero_optimization.zero_hpz_partition_size. Never throws but std::bad_alloc.
[[nodiscard]] comm_options comm_options_of(const engine_config& config);

/// Owns every resource above; destroyed in reverse order of construction. Not copyable.
class engine_resources {
 public:
  /// The worlds come first (the layout's size is theirs); a struct so both are made before the
  /// members that depend on them.
  struct worlds {
    std::unique_ptr<communicator> owned_comm;
    std::unique_ptr<communicator> owned_gradient_comm;
    communicator* comm = nullptr;
    communicator* gradient_comm = nullptr;
  };

  /// Makes the two worlds (make_communicator(comm_options_of(config)) twice, collective: every
  /// rank constructs its resources in the same order) unless options passes them in, lays `modules` out
  /// at the world's size, this rank holding shard rank() of every parameter, and builds every
  /// stage for `config` on `dev` (which must outlive it). Each rank's swap files live in its own
  /// folder, zoe-swap-rank-<r>-<pid>-<random>, under each swap path (one shared path for all).
  /// Below stage 3 the 16-bit parameters are replicated, as DeepSpeed's stages 1 and 2 keep them:
  /// every parameter is persistent (stage3_param/model_persistence_threshold taken as unlimited),
  /// so its first fetch after a step all-gathers the owners' new values and every later fetch
  /// finds it on the device (persistent_parameters() says so below stage 3, so zoe-plan plans the
  /// same). Stage 0 lays the states out whole on every rank (stage_layout: a full replica each, so
  /// the coordinator gathers nothing and runs on a world of this rank alone; the gradient path
  /// all-reduces); on several ranks it refuses what needs partitions (check_stage_fits_world:
  /// config_error naming the key).
  /// Before allocating anything, throws config_error naming the keys to change when the footprint
  /// plan does not fit this machine with `dev`'s budget (check_plan_fits), and
  /// naming the key and the path when a swap path the plan needs is not an existing folder. Pinned
  /// memory is limited to the plan's pinned_bytes (0: nothing is pinned, and the resource has no
  /// limit). Otherwise throws what the stages throw: config_error for a plan that cannot work,
  /// io_error naming a swap path that cannot hold the store, memory_error when memory is refused.
  engine_resources(std::vector<module_spec> modules, const engine_config& config, device& dev,
                   engine_resources_options options = {});
  ~engine_resources();
  engine_resources(const engine_resources&) = delete;
  engine_resources& operator=(const engine_resources&) = delete;

  [[nodiscard]] const engine_config& config() const noexcept { return config_; }
  [[nodiscard]] const model_layout& layout() const noexcept { return *layout_; }
  [[nodiscard]] const placement& where() const noexcept { return *placement_; }
  [[nodiscard]] const footprint_plan& plan() const noexcept { return plan_; }
  [[nodiscard]] allocators::pinned_host_resource& pinned() noexcept { return *pinned_; }
  [[nodiscard]] io::swap_store* store() noexcept { return store_.get(); }
  [[nodiscard]] tier_manager& tiers() noexcept { return *tiers_; }
  /// The rank's mover: every client that moves bytes to or from NVMe submits its pieces here.
  [[nodiscard]] mover& movers() noexcept { return *mover_; }
  [[nodiscard]] parameter_swapper& swapper() noexcept { return *swapper_; }
  /// The coordinator's world: its gathers, and nothing else, so their order is the coordinator's
  /// (at stage 0 on several ranks it carries nothing: every rank holds whole parameters, and the
  /// coordinator gathers from its own copy on a world of this rank alone).
  [[nodiscard]] communicator& comm() noexcept { return *comm_; }
  /// A second, independent world of the same ranks: the gradient path's reductions and the
  /// engine's collectives between steps (the step's norm and overflow, read_state's gathers).
  [[nodiscard]] communicator& gradient_comm() noexcept { return *gradient_comm_; }
  [[nodiscard]] coordinator& coord() noexcept { return *coordinator_; }

 private:
  worlds worlds_;
  communicator* comm_;
  communicator* gradient_comm_;
  /// The configuration as the resources run it (stages 0-2: every parameter persistent; the batch
  /// sizes resolved for the world's size, which is known only once the worlds exist).
  engine_config config_;
  std::unique_ptr<model_layout> layout_;
  std::unique_ptr<communicator>
      replica_world_;  ///< the coordinator's world of this rank alone (stage 0, several ranks)
  std::unique_ptr<placement> placement_;
  footprint_plan plan_;
  std::unique_ptr<allocators::pinned_host_resource> pinned_;
  std::unique_ptr<io::swap_store> store_;
  std::unique_ptr<tier_manager> tiers_;
  std::unique_ptr<mover> mover_;
  std::unique_ptr<parameter_swapper> swapper_;
  std::unique_ptr<coordinator> coordinator_;
};

}  // namespace zoe::engine
