// The tier manager's transitions from several threads: one mover at a time per state, and no
// status lost between them.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tiers_test_support.hpp"
#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"

namespace zoe::engine {
namespace {

TEST(tier_manager_threads, OneMoverAtATimePerState) {
  const auto layout = testing::layout_of({{2048, 2048}});
  const engine_config config;
  const placement where(layout, config);
  const footprint_plan plan = make_footprint_plan(layout, config, where);
  const auto dev = make_host_device(1 * MiB);
  allocators::pinned_host_resource pinned(*dev);
  tier_manager tiers(layout, where, plan, {.dev = *dev, .pinned = pinned, .store = nullptr});

  constexpr int rounds = 2000;
  std::atomic<int> movers{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> moves{0};
  const auto body = [&](state_kind s) {
    for (int i = 0; i < rounds; ++i) {
      if (!tiers.begin_move(0, s, move_kind::write)) continue;
      if (movers.fetch_add(1) != 0) overlaps.fetch_add(1);
      movers.fetch_sub(1);
      moves.fetch_add(1);
      tiers.finish_move(0, s);
      tiers.set_dirty(1, s, (i % 2) == 0);  // another parameter, to contend on the lock
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(body, state_kind::exp_avg);
  threads.emplace_back(body, state_kind::exp_avg);
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0) << "two threads held one state in flight at once";
  EXPECT_GT(moves.load(), 0);
  EXPECT_EQ(tiers.status(0, state_kind::exp_avg), state_status::resident);
  EXPECT_FALSE(tiers.dirty(0, state_kind::exp_avg)) << "every write finished";
}

}  // namespace
}  // namespace zoe::engine
