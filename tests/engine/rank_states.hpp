#pragma once
// One rank's shards for the tests of checkpoints on many ranks: a model laid out for a world size,
// every state of this rank's shards in its tiers (host memory or a swap store in a scratch folder),
// on a host device of its own, with a state_io. The model's values are made for the whole model
// (real elements of each saved state), so that what a rank holds can be checked against its slice
// whatever the world size.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "fault_injecting_backend.hpp"
#include "io_test_support.hpp"
#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/checkpoint/checkpoint.hpp"
#include "zoe/engine/config/config.hpp"
#include "zoe/engine/model/layout.hpp"
#include "zoe/engine/swap/state_io.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/engine/tiers/placement.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::testing {

/// Where a rank keeps its states.
enum class rank_tier : std::uint8_t { host = 0, nvme = 1 };

/// Parameters whose sizes divide nothing (1, 7, 4097 elements...), so shards of 2 and 4 ranks hold
/// padding, partial slices and none at all; fp16 with fp32 masters, and one fp32 parameter (no
/// working copy of its own).
[[nodiscard]] std::vector<engine::module_spec> uneven_model();

/// The real elements of every saved state (working where it has bytes, master, exp_avg,
/// exp_avg_sq) of every parameter of the whole model.
using model_values = std::map<std::pair<engine::parameter_id, engine::state_kind>, std::vector<std::byte>>;

/// Random values from `seed` for `layout`'s model (the same for any world size).
[[nodiscard]] model_values random_model(const engine::model_layout& layout, std::uint64_t seed);

class rank_states {
 public:
  /// Rank `rank` of `world_size`, its states on `where`. Every state starts released. `faults`,
  /// when given, wraps the swap store's backends.
  rank_states(std::vector<engine::module_spec> modules, std::size_t world_size, std::size_t rank, rank_tier where,
              std::shared_ptr<fault_plan> faults = nullptr);
  ~rank_states();
  rank_states(const rank_states&) = delete;
  rank_states& operator=(const rank_states&) = delete;

  [[nodiscard]] device& dev() { return *dev_; }
  [[nodiscard]] engine::tier_manager& tiers() { return *tiers_; }
  [[nodiscard]] engine::state_io& io() { return *io_; }
  [[nodiscard]] const engine::model_layout& layout() const { return layout_; }
  [[nodiscard]] io::swap_store* store() { return store_.get(); }
  [[nodiscard]] std::size_t rank() const { return rank_; }

  /// Writes this rank's slice of `values` (zero padding) into every saved state.
  void give(const model_values& values);
  /// Whether every saved state holds this rank's slice of `values`, padding zero, bit for bit.
  [[nodiscard]] ::testing::AssertionResult holds(const model_values& values);

 private:
  [[nodiscard]] std::vector<std::byte> shard_of(const model_values& values, const engine::parameter_layout& p,
                                                engine::state_kind s) const;

  std::size_t rank_;
  scratch_dir swap_;
  engine::engine_config config_;
  engine::model_layout layout_;
  engine::placement where_;
  engine::footprint_plan plan_;
  std::unique_ptr<device> dev_;
  std::unique_ptr<allocators::pinned_host_resource> pinned_;
  std::unique_ptr<io::swap_store> store_;
  std::unique_ptr<engine::tier_manager> tiers_;
  std::unique_ptr<engine::mover> movers_;
  std::unique_ptr<engine::state_io> io_;
};

/// The n-th of distinct checkpoint metas (scaler and learning rate) a test saves and expects back.
[[nodiscard]] engine::checkpoint_meta checkpoint_meta_of(int n);

}  // namespace zoe::testing
