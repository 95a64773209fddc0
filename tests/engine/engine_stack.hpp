#pragma once
// The engine's shared resources (engine::engine_resources) on the host device, with its swap store in a
// scratch folder on a real disk (optionally over the fault-injecting backend), for the swapper and
// coordinator tests. Helpers write a shard's home and read it back, byte for byte.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "fake_device.hpp"
#include "fault_injecting_backend.hpp"
#include "io_test_support.hpp"
#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/engine_resources.hpp"

namespace zoe::testing {

/// A stage-3 config with the working copies on nvme (engine_stack points nvme_path at its scratch
/// folder, and offload_optimizer's too when it is on nvme), small aio blocks so shards take several
/// chunks, and `buffer_count` swap buffers of `buffer_elements`.
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
  bool use_fake_device = false;              ///< wrap the host device in a fake_device (fake())
};

class engine_stack {
 public:
  explicit engine_stack(stack_options options);
  ~engine_stack();

  [[nodiscard]] device& dev() { return *dev_; }
  /// The fake_device the stack's device is, with stack_options::use_fake_device; null otherwise.
  [[nodiscard]] fake_device* fake() { return fake_; }
  [[nodiscard]] const engine::model_layout& layout() const { return path_->layout(); }
  [[nodiscard]] const engine::footprint_plan& plan() const { return path_->plan(); }
  [[nodiscard]] engine::tier_manager& tiers() { return path_->tiers(); }
  [[nodiscard]] engine::parameter_swapper& swapper() { return path_->swapper(); }
  [[nodiscard]] engine::coordinator& coord() { return path_->coord(); }
  [[nodiscard]] engine::communicator& comm() { return path_->comm(); }
  [[nodiscard]] allocators::pinned_host_resource& pinned() { return path_->pinned(); }
  [[nodiscard]] io::swap_store* store() { return path_->store(); }
  [[nodiscard]] engine::mover& movers() { return path_->movers(); }

  /// Bytes of `p`'s working shard (what a swap moves).
  [[nodiscard]] std::uint64_t shard_bytes(engine::parameter_id p) const;
  /// Random shard contents for `p` from `seed`: random real elements, zero padding.
  [[nodiscard]] std::vector<std::byte> shard_data(engine::parameter_id p, std::uint64_t seed) const;
  /// Writes `data` (host memory) to `p`'s home through state_io and waits; rethrows.
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
  fake_device* fake_ = nullptr;
  std::unique_ptr<engine::engine_resources> path_;
};

}  // namespace zoe::testing
