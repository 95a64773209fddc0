// The tier manager: homes in every tier combination, allocated within the plan and the device
// budget, byte-exact round trips through each, all-or-nothing failure, and checked transitions.
#include "zoe/engine/tiers/tier_manager.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "io_test_support.hpp"
#include "swap_store_support.hpp"
#include "tiers_test_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/swap_channel.hpp"

namespace zoe::engine {
namespace {

using testing::offload_config;
using testing::place_all;

// fp16 shards of 4 KiB (working) to 160 KiB (fp32 states), around the 64 KiB store chunk, and an
// fp32 parameter whose working copy is its master.
model_layout mixed_layout() {
  using kernels::dtype;
  std::vector<module_spec> modules = {
      {.name = "embed", .parameters = {{.name = "embed.w", .shape = {40960}, .dtype = dtype::fp16}}},
      {.name = "block",
       .parameters = {{.name = "block.w", .shape = {96, 64}, .dtype = dtype::fp16},
                      {.name = "block.b", .shape = {64}, .dtype = dtype::fp16},
                      {.name = "block.norm", .shape = {3000}, .dtype = dtype::fp32}}},
  };
  return model_layout(std::move(modules), {.world_size = 1});
}

// Everything a tier manager needs, sized exactly by the plan: a host device whose budget is the
// plan's device state bytes, a pinned resource limited to the plan's pinned bytes, and a store of
// the plan's capacity striped over as many scratch folders as the plan has swap paths.
struct tiers_fixture {
  /// `device_slack` bytes more (or fewer) than the plan's device states; a store of
  /// `store_capacity` instead of the plan's.
  explicit tiers_fixture(engine_config given, std::int64_t device_slack = 0,
                         std::optional<std::uint64_t> store_capacity = std::nullopt)
      : config(std::move(given)),
        layout(mixed_layout()),
        where(layout, config),
        plan(make_footprint_plan(layout, config, where)) {
    const auto device_bytes = static_cast<std::int64_t>(plan.state_bytes[0]) + device_slack;
    dev = make_host_device(static_cast<std::uint64_t>(std::max<std::int64_t>(device_bytes, 1)));
    pinned = std::make_unique<allocators::pinned_host_resource>(
        *dev, allocators::pinned_options{.limit_bytes = std::max<std::uint64_t>(plan.pinned_bytes, 1)});
    if (plan.nvme_bytes > 0) {
      std::vector<std::filesystem::path> paths;
      for (const auto& dir : dirs) paths.push_back(dir.path());
      paths.resize(plan.swap_paths.size());
      store = std::make_unique<io::swap_store>(testing::store_options(paths, store_capacity.value_or(plan.nvme_bytes)));
    }
  }

  [[nodiscard]] tier_manager make() const { return {layout, where, plan, resources()}; }
  [[nodiscard]] tier_resources resources() const { return {.dev = *dev, .pinned = *pinned, .store = store.get()}; }
  [[nodiscard]] std::unique_ptr<tier_manager> make_unique() const {
    return std::make_unique<tier_manager>(layout, where, plan, resources());
  }
  // Nothing is held by any of the resources.
  [[nodiscard]] ::testing::AssertionResult nothing_allocated() const {
    if (dev->usage().current_bytes != 0) return ::testing::AssertionFailure() << "device bytes left";
    if (pinned->bytes_in_use() != 0) return ::testing::AssertionFailure() << "pinned bytes left";
    if (store && store->free_bytes() != store->capacity()) return ::testing::AssertionFailure() << "extents left";
    return ::testing::AssertionSuccess();
  }

  engine_config config;
  model_layout layout;
  placement where;
  footprint_plan plan;
  std::array<testing::scratch_dir, 2> dirs;
  std::unique_ptr<device> dev;
  std::unique_ptr<allocators::pinned_host_resource> pinned;
  std::unique_ptr<io::swap_store> store;
};

// Writes `data` to the home of (p, s), through its location, as a swapper would.
void write_home(tier_manager& tiers, tiers_fixture& f, parameter_id p, state_kind s, std::span<std::byte> data) {
  ASSERT_TRUE(tiers.begin_move(p, s, move_kind::write));
  const state_location& loc = tiers.location(p, s);
  switch (loc.where) {
    case tier::device: {
      const auto stream = f.dev->create_stream();
      f.dev->copy_async(loc.device, data.data(), data.size(), copy_kind::host_to_device, stream.view());
      f.dev->synchronize(stream.view());
      break;
    }
    case tier::host: std::memcpy(loc.host.data(), data.data(), data.size()); break;
    case tier::nvme: {
      io::swap_channel ch(*f.store);
      testing::store_write(ch, loc.extent, 0, data);
      break;
    }
  }
  tiers.finish_move(p, s);
}

void read_home(tier_manager& tiers, tiers_fixture& f, parameter_id p, state_kind s, std::span<std::byte> out) {
  ASSERT_TRUE(tiers.begin_move(p, s, move_kind::read));
  const state_location& loc = tiers.location(p, s);
  switch (loc.where) {
    case tier::device: {
      const auto stream = f.dev->create_stream();
      f.dev->copy_async(out.data(), loc.device, out.size(), copy_kind::device_to_host, stream.view());
      f.dev->synchronize(stream.view());
      break;
    }
    case tier::host: std::memcpy(out.data(), loc.host.data(), out.size()); break;
    case tier::nvme: {
      io::swap_channel ch(*f.store);
      const auto done = testing::store_read(ch, loc.extent, 0, out);
      ASSERT_TRUE(done.ok()) << done.message;
      break;
    }
  }
  tiers.finish_move(p, s);
}

struct combination {
  std::string name;
  std::function<engine_config(const std::filesystem::path& a, const std::filesystem::path& b)> config;
};

engine_config with_chunk(engine_config c) {
  c.aio.block_size = testing::store_chunk;
  return c;
}

std::vector<combination> combinations() {
  using tf = tier_fractions;
  return {
      {"all_device", [](auto, auto) { return with_chunk(engine_config{}); }},
      {"all_host_pinned",
       [](auto, auto) { return with_chunk(offload_config(offload_device::cpu, offload_device::cpu, "", true)); }},
      {"all_host_pageable",
       [](auto, auto) { return with_chunk(offload_config(offload_device::cpu, offload_device::cpu, "", false)); }},
      {"all_nvme_two_paths",
       [](auto a, auto b) {
         auto c = offload_config(offload_device::nvme, offload_device::nvme, a);
         c.zoe.extra_swap_paths = {b};
         place_all(c, "nvme");
         return with_chunk(c);
       }},
      {"deepspeed_cpu_ratio",
       [](auto, auto) {
         auto c = offload_config(offload_device::cpu, offload_device::cpu);
         c.zero.offload_optimizer->ratio = 0.5;
         c.zero.sub_group_size = 1;  // a sub-group per parameter: two stay on the device
         return with_chunk(c);
       }},
      {"deepspeed_nvme_max_in_cpu",
       [](auto a, auto) {
         auto c = offload_config(offload_device::nvme, offload_device::nvme, a);
         c.zero.sub_group_size = 1;
         c.zero.offload_param->max_in_cpu = 40960;  // the first parameter stays in host memory
         return with_chunk(c);
       }},
      {"every_state_split_three_ways",
       [](auto a, auto) {
         auto c = offload_config(offload_device::none, offload_device::none);
         c.zoe.extra_swap_paths = {a};
         // embed.w is most of every state: it takes the device's 10%, then the host's 80% reaches
         // into the small parameters, and the last of them go to nvme.
         for (auto& f : c.zoe.placement) f = tf{.device = 0.1, .host = 0.8, .nvme = 0.1};
         c.zero.offload_optimizer->pin_memory = false;
         return with_chunk(c);
       }},
  };
}

// gtest's printer hook, by the name gtest looks for.
void PrintTo(const combination& c, std::ostream* out) { *out << c.name; }  // NOLINT(readability-identifier-naming)

class tier_combinations : public ::testing::TestWithParam<combination> {};

TEST_P(tier_combinations, HomesFollowThePlacementAndRoundTripByteExact) {
  const testing::scratch_dir a;
  const testing::scratch_dir b;
  tiers_fixture f(GetParam().config(a.path(), b.path()));
  {
    tier_manager tiers = f.make();
    std::array<std::uint64_t, memory_kind_count> seen{};
    for (const auto& p : f.layout.parameters()) {
      for (const state_kind s : all_states) {
        const state_location& loc = tiers.location(p.id, s);
        EXPECT_EQ(loc.where, f.where.where(p.id, s)) << p.name << " " << state_kind_name(s);
        EXPECT_EQ(loc.bytes, state_bytes(p, s));
        EXPECT_EQ(tiers.status(p.id, s), state_status::released) << "nothing is written yet";
        if (loc.bytes == 0) continue;
        if (loc.where == tier::host) {
          EXPECT_EQ(reinterpret_cast<std::uintptr_t>(loc.host.data()) % 4096, 0U) << "O_DIRECT can use it";
          EXPECT_EQ(loc.host.size(), loc.bytes);
        }
        if (loc.where == tier::nvme) {
          EXPECT_EQ(loc.extent.bytes, loc.bytes);
          // The optimizer step's second extent, for the states it rewrites.
          const io::swap_extent shadow = tiers.shadow(p.id, s);
          EXPECT_EQ(shadow.bytes, s == state_kind::gradient ? 0U : loc.bytes) << p.name << " " << state_kind_name(s);
          if (shadow.bytes > 0) {
            EXPECT_NE(shadow.id, loc.extent.id);
          }
        } else {
          EXPECT_EQ(tiers.shadow(p.id, s).bytes, 0U) << "only nvme states have a shadow";
        }
        seen[static_cast<std::size_t>(memory_of(loc.where, f.where.host_pinned(s)))] += loc.bytes;
      }
    }
    EXPECT_EQ(seen, f.plan.state_bytes) << "exactly what the plan lists";
    if (GetParam().name == "every_state_split_three_ways") {
      // The fp32 states; the 16-bit ones are split in two only (whole shards, other sizes).
      for (const state_kind s : {state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
        for (const tier t : {tier::device, tier::host, tier::nvme}) {
          EXPECT_GT(f.where.bytes(s, t), 0U) << state_kind_name(s) << " in " << tier_name(t);
        }
      }
    }
    EXPECT_EQ(tiers.home_bytes(memory_kind::device), f.plan.state_bytes[0]);
    EXPECT_EQ(tiers.home_bytes(memory_kind::nvme), f.plan.state_bytes[3]);
    EXPECT_EQ(f.pinned->bytes_in_use(), f.plan.state_bytes[1]);

    std::uint64_t seed = 1;
    for (const auto& p : f.layout.parameters()) {
      for (const state_kind s : all_states) {
        const std::uint64_t bytes = tiers.location(p.id, s).bytes;
        if (bytes == 0) continue;
        testing::aligned_buffer data(bytes);
        const auto expected = testing::random_bytes(bytes, seed++);
        std::memcpy(data.data(), expected.data(), bytes);
        write_home(tiers, f, p.id, s, data.span());
        EXPECT_EQ(tiers.status(p.id, s), state_status::resident);
        testing::aligned_buffer back(bytes);
        read_home(tiers, f, p.id, s, back.span());
        EXPECT_TRUE(testing::same_bytes(back.span(), expected)) << p.name << " " << state_kind_name(s);
      }
    }
    EXPECT_LE(f.dev->usage().peak_bytes, f.dev->usage().budget_bytes) << "the device budget held";
    EXPECT_LE(f.pinned->peak_bytes_in_use(), f.plan.pinned_bytes) << "pinned never above the plan";
  }
  EXPECT_TRUE(f.nothing_allocated()) << "destruction frees every home";
}

INSTANTIATE_TEST_SUITE_P(tiers, tier_combinations, ::testing::ValuesIn(combinations()),
                         [](const auto& test) { return test.param.name; });

engine_config split_config(const std::filesystem::path& a) { return combinations()[6].config(a, a); }

template <typename Error>
std::string failure_of(const tiers_fixture& f) {
  try {
    (void)f.make_unique();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(tier_manager, ADeviceBudgetOneByteShortAllocatesNothing) {
  const testing::scratch_dir a;
  const tiers_fixture f(split_config(a.path()), -1);
  const std::string text = failure_of<memory_error>(f);
  EXPECT_NE(text.find("tier manager: cannot allocate"), std::string::npos) << text;
  EXPECT_NE(text.find(" in device"), std::string::npos) << text;
  EXPECT_TRUE(f.nothing_allocated());
  EXPECT_LE(f.dev->usage().peak_bytes, f.dev->usage().budget_bytes);
}

TEST(tier_manager, RefusedPinnedMemoryAllocatesNothing) {
  const testing::scratch_dir a;
  auto config = split_config(a.path());
  config.zero.offload_optimizer->pin_memory = true;
  tiers_fixture f(config);
  f.pinned = std::make_unique<allocators::pinned_host_resource>(
      *f.dev, allocators::pinned_options{.limit_bytes = f.plan.state_bytes[1] - 1});
  ASSERT_GT(f.plan.state_bytes[1], 0U);
  const std::string text = failure_of<memory_error>(f);
  EXPECT_NE(text.find(" in host"), std::string::npos) << text;
  EXPECT_TRUE(f.nothing_allocated());
}

TEST(tier_manager, ASwapStoreTooSmallAllocatesNothing) {
  // Every state on nvme: the first 160 KiB extent fits in 256 KiB, the second does not.
  const testing::scratch_dir a;
  const tiers_fixture f(combinations()[3].config(a.path(), a.path()), 0, 256 * KiB);
  const std::string text = failure_of<memory_error>(f);
  EXPECT_NE(text.find(" in nvme"), std::string::npos) << text;
  EXPECT_TRUE(f.nothing_allocated());
}

TEST(tier_manager, ThePlanCapacityHoldsEveryExtentInAnyLayout) {
  // Extents around the chunk (64 KiB) in both directions, on two striped paths: the plan's
  // rounding must hold them with nothing to spare beyond a stripe.
  const testing::scratch_dir a;
  const testing::scratch_dir b;
  auto config = combinations()[3].config(a.path(), b.path());
  std::vector<module_spec> modules;
  for (const std::uint64_t numel : {2048U, 30720U, 34816U, 4096U, 65536U, 2048U, 98304U}) {
    modules.push_back({.name = str("m", numel, "_", modules.size()),
                       .parameters = {{.name = str("p", modules.size()), .shape = {numel}}}});
  }
  const model_layout layout(std::move(modules), {});
  const placement where(layout, config);
  const footprint_plan plan = make_footprint_plan(layout, config, where);
  const auto dev = make_host_device(1 * MiB);
  allocators::pinned_host_resource pinned(*dev);
  io::swap_store store(testing::store_options({a.path(), b.path()}, plan.nvme_bytes));
  EXPECT_EQ(store.capacity(), plan.nvme_bytes) << "the plan rounds as the store does";
  EXPECT_NO_THROW(tier_manager(layout, where, plan, {.dev = *dev, .pinned = pinned, .store = &store}));
}

TEST(tier_manager, APlanForAnotherPlacementOrAMissingStoreIsAUsageError) {
  const testing::scratch_dir a;
  tiers_fixture f(split_config(a.path()));
  footprint_plan other = f.plan;
  other.state_bytes[0] += 4096;
  EXPECT_THROW(tier_manager(f.layout, f.where, other, f.resources()), usage_error);
  EXPECT_THROW(tier_manager(f.layout, f.where, f.plan, {.dev = *f.dev, .pinned = *f.pinned, .store = nullptr}),
               usage_error);
  EXPECT_TRUE(f.nothing_allocated());
}

TEST(tier_manager, TransitionsAreCheckedAndNameTheState) {
  tiers_fixture f(with_chunk(engine_config{}));
  tier_manager tiers = f.make();
  const parameter_id p = 1;  // block.w
  const state_kind s = state_kind::exp_avg;
  try {
    (void)tiers.begin_move(p, s, move_kind::read);
    FAIL() << "reading a released state must be refused";
  } catch (const usage_error& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("block.w"), std::string::npos) << text;
    EXPECT_NE(text.find("exp_avg"), std::string::npos) << text;
    EXPECT_NE(text.find("released"), std::string::npos) << text;
  }
  EXPECT_EQ(tiers.status(p, s), state_status::released) << "a refused transition changes nothing";
  EXPECT_THROW(tiers.finish_move(p, s), usage_error);
  EXPECT_THROW(tiers.abort_move(p, s), usage_error);

  // A write from released; a second mover is turned away while it runs.
  EXPECT_TRUE(tiers.begin_move(p, s, move_kind::write));
  EXPECT_EQ(tiers.status(p, s), state_status::in_flight);
  EXPECT_FALSE(tiers.begin_move(p, s, move_kind::read));
  EXPECT_THROW(tiers.mark_written(p, s), usage_error);
  EXPECT_THROW(tiers.mark_released(p, s), usage_error);
  tiers.finish_move(p, s);
  EXPECT_EQ(tiers.status(p, s), state_status::resident);

  // A failed read leaves the home as it was; a failed write leaves it released and dirty.
  ASSERT_TRUE(tiers.begin_move(p, s, move_kind::read));
  tiers.abort_move(p, s);
  EXPECT_EQ(tiers.status(p, s), state_status::resident);
  EXPECT_FALSE(tiers.dirty(p, s));
  ASSERT_TRUE(tiers.begin_move(p, s, move_kind::write));
  tiers.abort_move(p, s);
  EXPECT_EQ(tiers.status(p, s), state_status::released);
  EXPECT_TRUE(tiers.dirty(p, s)) << "the source is the only good copy";

  // A good write makes the home current again.
  ASSERT_TRUE(tiers.begin_move(p, s, move_kind::write));
  tiers.finish_move(p, s);
  EXPECT_FALSE(tiers.dirty(p, s));
  tiers.set_dirty(p, s, true);
  EXPECT_TRUE(tiers.dirty(p, s));
  EXPECT_FALSE(tiers.dirty(p, state_kind::master)) << "flags are per state";

  tiers.mark_released(p, s);
  EXPECT_EQ(tiers.status(p, s), state_status::released);
  tiers.mark_written(p, s);
  EXPECT_EQ(tiers.status(p, s), state_status::resident);
  EXPECT_THROW((void)tiers.location(99, s), usage_error);
  EXPECT_THROW((void)tiers.status(99, s), usage_error);
}

// A write-back copies the source as it was when the move began; a change made to the source while
// the write runs is not in the home, so finishing the write must leave the state dirty (clearing it
// would lose that change: nothing would write it back again).
TEST(tier_manager, ADirtyMarkDuringAWriteSurvivesItsFinish) {
  tiers_fixture f(with_chunk(engine_config{}));
  tier_manager tiers = f.make();
  const parameter_id p = 1;
  const state_kind s = state_kind::master;
  tiers.mark_written(p, s);
  tiers.set_dirty(p, s, true);
  ASSERT_TRUE(tiers.begin_move(p, s, move_kind::write));
  tiers.finish_move(p, s);
  EXPECT_FALSE(tiers.dirty(p, s)) << "a write with no change during it makes the home current";

  tiers.set_dirty(p, s, true);
  ASSERT_TRUE(tiers.begin_move(p, s, move_kind::write));
  tiers.set_dirty(p, s, true);  // the gathered copy changed again while the write-back ran
  tiers.finish_move(p, s);
  EXPECT_EQ(tiers.status(p, s), state_status::resident);
  EXPECT_TRUE(tiers.dirty(p, s)) << "the change made during the write is not in the home";

  // Clearing during a write (the writer's source was dropped) is honoured too.
  ASSERT_TRUE(tiers.begin_move(p, s, move_kind::write));
  tiers.set_dirty(p, s, true);
  tiers.set_dirty(p, s, false);
  tiers.finish_move(p, s);
  EXPECT_FALSE(tiers.dirty(p, s));
}

// The optimizer step's rewrite: it starts from resident only, and however it ends the state is
// resident with its dirty flag as it was (the home was never touched, or was put back).
TEST(tier_manager, ARewriteEndsResidentWithItsDirtyFlagAsItWas) {
  tiers_fixture f(with_chunk(engine_config{}));
  tier_manager tiers = f.make();
  const parameter_id p = 1;
  const state_kind s = state_kind::exp_avg_sq;
  EXPECT_THROW((void)tiers.begin_move(p, s, move_kind::rewrite), usage_error) << "nothing to rewrite yet";
  EXPECT_EQ(tiers.status(p, s), state_status::released);
  tiers.mark_written(p, s);
  for (const bool dirty : {false, true}) {
    tiers.set_dirty(p, s, dirty);
    ASSERT_TRUE(tiers.begin_move(p, s, move_kind::rewrite));
    EXPECT_FALSE(tiers.begin_move(p, s, move_kind::read)) << "nothing else moves it meanwhile";
    tiers.abort_move(p, s);
    EXPECT_EQ(tiers.status(p, s), state_status::resident);
    EXPECT_EQ(tiers.dirty(p, s), dirty);
    ASSERT_TRUE(tiers.begin_move(p, s, move_kind::rewrite));
    tiers.finish_move(p, s);
    EXPECT_EQ(tiers.status(p, s), state_status::resident);
    EXPECT_EQ(tiers.dirty(p, s), dirty);
  }
}

// commit_shadow swaps the home and the shadow; a step that does not commit leaves the old home.
TEST(tier_manager, CommittingAShadowSwapsItWithTheHomeAndAnAbortKeepsTheOldHome) {
  const testing::scratch_dir a;
  const testing::scratch_dir b;
  tiers_fixture f(combinations()[3].config(a.path(), b.path()));  // every state on nvme
  {
    tier_manager tiers = f.make();
    const parameter_id p = 0;  // embed.w: 160 KiB fp32 states, several chunks
    const state_kind s = state_kind::master;
    const std::uint64_t bytes = tiers.location(p, s).bytes;
    const io::swap_extent home = tiers.location(p, s).extent;
    const io::swap_extent shadow = tiers.shadow(p, s);
    ASSERT_EQ(shadow.bytes, bytes);
    EXPECT_THROW(tiers.commit_shadow(p, s), usage_error) << "a released state has nothing to commit";

    testing::aligned_buffer old_data(bytes);
    const auto old_bytes = testing::random_bytes(bytes, 11);
    std::memcpy(old_data.data(), old_bytes.data(), bytes);
    write_home(tiers, f, p, s, old_data.span());
    testing::aligned_buffer new_data(bytes);
    const auto new_bytes = testing::random_bytes(bytes, 12);
    std::memcpy(new_data.data(), new_bytes.data(), bytes);
    testing::aligned_buffer back(bytes);

    // A step that fails after writing the shadow: the old home is still the home, resident, clean.
    ASSERT_TRUE(tiers.begin_move(p, s, move_kind::rewrite));
    {
      io::swap_channel ch(*f.store);
      testing::store_write(ch, shadow, 0, new_data.span());
    }
    EXPECT_THROW(tiers.commit_shadow(p, s), usage_error) << "not while the step holds it";
    tiers.abort_move(p, s);
    EXPECT_EQ(tiers.status(p, s), state_status::resident);
    EXPECT_FALSE(tiers.dirty(p, s));
    EXPECT_EQ(tiers.location(p, s).extent.id, home.id);
    read_home(tiers, f, p, s, back.span());
    EXPECT_TRUE(testing::same_bytes(back.span(), old_bytes));

    // A step that succeeds: the shadow becomes the home, the old home the next shadow.
    ASSERT_TRUE(tiers.begin_move(p, s, move_kind::rewrite));
    tiers.finish_move(p, s);
    tiers.commit_shadow(p, s);
    EXPECT_EQ(tiers.location(p, s).extent.id, shadow.id);
    EXPECT_EQ(tiers.shadow(p, s).id, home.id);
    EXPECT_EQ(tiers.status(p, s), state_status::resident);
    read_home(tiers, f, p, s, back.span());
    EXPECT_TRUE(testing::same_bytes(back.span(), new_bytes));

    try {
      tiers.commit_shadow(p, state_kind::gradient);
      FAIL() << "the gradient has no shadow";
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("embed.w"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(f.nothing_allocated()) << "both extents are freed";
}

}  // namespace
}  // namespace zoe::engine
