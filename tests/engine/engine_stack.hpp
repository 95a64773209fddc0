#pragma once
// The engine's lower stages wired together for the swapper and coordinator tests, as the engine
// object will wire them: the layout, placement and footprint plan from a config, the host device,
// pinned memory, a swap store in a scratch folder on a real disk (optionally over the
// fault-injecting backend), the tier manager, the parameter swapper, the single communicator and
// the coordinator. Helpers write a shard's home and read it back, byte for byte.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "fault_injecting_backend.hpp"
#include "io_test_support.hpp"
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

namespace zoe::testing {

/// A stage-3 config with the working copies on nvme (engine_stack points nvme_path at its scratch
/// folder), small aio blocks so shards take several chunks, and `buffer_count` swap buffers of
/// `buffer_elements`.
[[nodiscard]] engine::engine_config nvme_config(std::uint64_t buffer_count = 4,
                                                std::uint64_t buffer_elements = 64 * 1024);

/// `count` modules of `per_module` parameters of `numel` elements each (shapes vary a little, so
/// padding differs), fp16 unless `types` cycles through others.
[[nodiscard]] std::vector<engine::module_spec> layered_model(std::size_t count, std::size_t per_module,
                                                             std::uint64_t numel,
                                                             std::vector<kernels::dtype> types = {
                                                                 kernels::dtype::fp16});

struct stack_options {
  std::vector<engine::module_spec> modules;
  engine::engine_config config;
  std::uint64_t device_budget = std::uint64_t{512} << 20;
  std::shared_ptr<fault_plan> faults;        ///< when set, every store backend is wrapped in it
  std::optional<std::uint64_t> arena_bytes;  ///< overrides the plan's arena size
};

class engine_stack {
 public:
  explicit engine_stack(stack_options options);
  ~engine_stack();

  [[nodiscard]] device& dev() { return *dev_; }
  [[nodiscard]] const engine::model_layout& layout() const { return *layout_; }
  [[nodiscard]] const engine::footprint_plan& plan() const { return plan_; }
  [[nodiscard]] engine::tier_manager& tiers() { return *tiers_; }
  [[nodiscard]] engine::parameter_swapper& swapper() { return *swapper_; }
  [[nodiscard]] engine::coordinator& coord() { return *coordinator_; }
  [[nodiscard]] allocators::pinned_host_resource& pinned() { return *pinned_; }
  [[nodiscard]] io::swap_store* store() { return store_.get(); }
  [[nodiscard]] const engine::placement& where() const { return *placement_; }

  /// Bytes of `p`'s working shard (what a swap moves).
  [[nodiscard]] std::uint64_t shard_bytes(engine::parameter_id p) const;
  /// Random shard contents for `p` from `seed`: random real elements, zero padding.
  [[nodiscard]] std::vector<std::byte> shard_data(engine::parameter_id p, std::uint64_t seed) const;
  /// Writes `data` to `p`'s home through the swapper (from device memory) and waits; rethrows.
  void write_home(engine::parameter_id p, std::span<const std::byte> data);
  /// Reads `p`'s home through the swapper into device memory and returns it; rethrows.
  [[nodiscard]] std::vector<std::byte> read_home(engine::parameter_id p);
  /// Copies `bytes` of device memory at `src` to the host (synchronously).
  [[nodiscard]] std::vector<std::byte> from_device(const void* src, std::size_t bytes);
  /// Copies `data` to device memory at `dst` (synchronously).
  void to_device(void* dst, std::span<const std::byte> data);

 private:
  scratch_dir dir_;
  std::unique_ptr<device> dev_;
  std::unique_ptr<engine::model_layout> layout_;
  std::unique_ptr<engine::placement> placement_;
  engine::footprint_plan plan_;
  std::unique_ptr<allocators::pinned_host_resource> pinned_;
  std::unique_ptr<io::swap_store> store_;
  std::unique_ptr<engine::tier_manager> tiers_;
  std::unique_ptr<engine::parameter_swapper> swapper_;
  std::unique_ptr<engine::communicator> comm_;
  std::unique_ptr<engine::coordinator> coordinator_;
};

}  // namespace zoe::testing
