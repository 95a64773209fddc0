// The footprint plan: every term computed by hand for small layouts, and the shortfalls naming
// the keys to change.
#include "zoe/engine/tiers/footprint_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <tuple>

#include "io_test_support.hpp"
#include "tiers_test_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"

namespace zoe::engine {
namespace {

using testing::layout_of;
using testing::offload_config;
using testing::place_all;

std::uint64_t sum_of(const footprint_plan& plan, memory_kind m) {
  std::uint64_t sum = 0;
  for (const auto& item : plan.items) {
    if (item.memory == m) sum += item.bytes;
  }
  return sum;
}

const plan_item* item_named(const footprint_plan& plan, const std::string& what) {
  for (const auto& item : plan.items) {
    if (item.what.find(what) != std::string::npos) return &item;
  }
  return nullptr;
}

bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& line : lines) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
}

// Parameters of 2048 and 40960 elements (fp16): working 4 KiB and 80 KiB, fp32 states (the gradient
// too) 8 and 160 KiB.
model_layout small_and_large() { return layout_of({{2048}, {40960}}); }

engine_config everything_on_nvme(std::size_t paths) {
  auto config = offload_config(offload_device::nvme, offload_device::nvme, "/swap/a");
  if (paths > 1) config.zoe.extra_swap_paths = {"/swap/b"};
  config.aio.block_size = 64 * KiB;
  place_all(config, "nvme");
  return config;
}

TEST(footprint_plan, ItemsSumToTheTotals) {
  const auto layout = small_and_large();
  auto config = everything_on_nvme(2);
  config.zoe.placement[static_cast<std::size_t>(state_kind::gradient)] = tier_fractions{.device = 0.5, .host = 0.5};
  const placement where(layout, config);
  const auto plan = make_footprint_plan(layout, config, where);
  EXPECT_EQ(sum_of(plan, memory_kind::device), plan.device_bytes);
  EXPECT_EQ(sum_of(plan, memory_kind::pinned), plan.pinned_bytes);
  EXPECT_EQ(sum_of(plan, memory_kind::pageable), plan.pageable_bytes);
  EXPECT_EQ(sum_of(plan, memory_kind::nvme), plan.nvme_bytes);
  for (const auto& item : plan.items) {
    EXPECT_GT(item.bytes, 0U) << item.what;
    EXPECT_FALSE(item.keys.empty()) << item.what << " names the keys that size it";
  }
}

TEST(footprint_plan, TheSwapStoreIsRoundedAsTheStoreRounds) {
  const auto layout = small_and_large();
  const auto config = everything_on_nvme(2);
  const auto plan = make_footprint_plan(layout, config, placement(layout, config));
  // Small extents round to 4 KiB: 4 + 8 + 8 + 8 + 8 KiB (the gradient is fp32). Those of a block
  // (64 KiB) or more round to blocks: 80 -> 128 KiB once, 160 -> 192 KiB four times: 932 KiB of
  // homes. The optimizer step's shadows (every state but the gradients): 4 + 8 + 8 + 8 + 128 + 3 x
  // 192 = 732 KiB. 1664 KiB, already whole 128 KiB stripes.
  EXPECT_EQ(plan.state_bytes[static_cast<std::size_t>(memory_kind::nvme)], (36 + 720) * KiB);
  EXPECT_EQ(plan.nvme_bytes, 1664 * KiB);
  std::uint64_t shadows = 0;
  for (const auto& item : plan.items) {
    if (item.what.find("optimizer step shadow extents") != std::string::npos) shadows += item.bytes;
  }
  EXPECT_EQ(shadows, (28 + 80 + 3 * 160) * KiB);
  ASSERT_NE(item_named(plan, "swap store rounding"), nullptr);
  EXPECT_EQ(item_named(plan, "swap store rounding")->bytes, (1664 - 756 - 588) * KiB);
  EXPECT_EQ(plan.swap_paths, (std::vector<std::filesystem::path>{"/swap/a", "/swap/b"}));
  EXPECT_EQ(plan.swap_block_size, 64 * KiB);
}

TEST(footprint_plan, BoundedShadowsHoldEachNvmeStateOnce) {
  const auto layout = small_and_large();
  auto config = everything_on_nvme(2);
  const auto full = make_footprint_plan(layout, config, placement(layout, config));
  config.zoe.shadows = "bounded";
  const auto bounded = make_footprint_plan(layout, config, placement(layout, config));
  EXPECT_TRUE(full.shadow_extents);
  EXPECT_FALSE(bounded.shadow_extents);
  // The same states; no shadow extents (TheSwapStoreIsRoundedAsTheStoreRounds: 932 KiB of homes,
  // rounded to 128 KiB stripes) where full shadows take 1664 KiB.
  EXPECT_EQ(bounded.state_bytes, full.state_bytes);
  EXPECT_EQ(bounded.nvme_bytes, 1024 * KiB);
  EXPECT_EQ(full.nvme_bytes, 1664 * KiB);
  for (const auto& item : bounded.items) {
    EXPECT_EQ(item.what.find("shadow"), std::string::npos) << item.what;
  }
}

TEST(footprint_plan, ShadowExtentsAreListedPerStateWithTheKeysThatPutThemOnNvme) {
  const auto layout = small_and_large();
  // The optimizer on nvme, the working copies in host memory: shadows of the fp32 states only.
  auto config = offload_config(offload_device::cpu, offload_device::nvme, "/swap/a");
  config.aio.block_size = 64 * KiB;
  const auto plan = make_footprint_plan(layout, config, placement(layout, config));
  EXPECT_EQ(item_named(plan, "shadow extents of working"), nullptr);
  EXPECT_EQ(item_named(plan, "shadow extents of gradient"), nullptr);
  for (const std::string s : {"master", "exp_avg", "exp_avg_sq"}) {
    const plan_item* item = item_named(plan, "optimizer step shadow extents of " + s);
    ASSERT_NE(item, nullptr) << s;
    EXPECT_EQ(item->memory, memory_kind::nvme);
    EXPECT_EQ(item->bytes, 168 * KiB) << s;
    EXPECT_TRUE(mentions(item->keys, "zero_optimization.offload_optimizer.device")) << s;
  }
  // Homes 8 + 160 -> 8 + 192 KiB three times, shadows the same: 1200 KiB, in 64 KiB stripes: 1216.
  EXPECT_EQ(plan.nvme_bytes, 1216 * KiB);
  EXPECT_EQ(sum_of(plan, memory_kind::nvme), plan.nvme_bytes);
}

// The undo log holds the in-memory states the step rewrites, of the shards with a state on nvme.
TEST(footprint_plan, TheUndoLogHoldsTheInMemoryStatesOfShardsWithAStateOnNvme) {
  const auto layout = small_and_large();
  auto config = offload_config(offload_device::cpu, offload_device::nvme, "/swap/a");
  config.aio.block_size = 64 * KiB;
  // The masters of both in host memory (zoe.placement), the working copies too (offload_param cpu).
  config.zoe.placement[static_cast<std::size_t>(state_kind::master)] = tier_fractions{.host = 1.0};
  auto plan = make_footprint_plan(layout, config, placement(layout, config));
  // working 4 + 80 KiB, master 8 + 160 KiB, of shards whose moments are on nvme.
  EXPECT_EQ(plan.optimizer_undo_bytes, (84 + 168) * KiB);
  const plan_item* item = item_named(plan, "optimizer step undo log");
  ASSERT_NE(item, nullptr);
  EXPECT_EQ(item->memory, memory_kind::pageable);
  EXPECT_EQ(item->bytes, plan.optimizer_undo_bytes);
  EXPECT_EQ(sum_of(plan, memory_kind::pageable), plan.pageable_bytes);

  // Only the large parameter's gradient on nvme: its working copy and fp32 states are logged.
  auto gradient_only = offload_config(offload_device::cpu, offload_device::cpu, "/swap/a");
  gradient_only.aio.block_size = 64 * KiB;
  gradient_only.zoe.extra_swap_paths = {"/swap/a"};
  gradient_only.zoe.placement[static_cast<std::size_t>(state_kind::gradient)] =
      tier_fractions{.host = 0.04, .nvme = 0.96};
  plan = make_footprint_plan(layout, gradient_only, placement(layout, gradient_only));
  EXPECT_EQ(plan.optimizer_undo_bytes, (80 + 3 * 160) * KiB);

  // Nothing on nvme: no undo log.
  config = offload_config(offload_device::cpu, offload_device::cpu);
  plan = make_footprint_plan(layout, config, placement(layout, config));
  EXPECT_EQ(plan.optimizer_undo_bytes, 0U);
  EXPECT_EQ(item_named(plan, "optimizer step undo log"), nullptr);
}

// With nothing on nvme, the optimizer step still fails after it changed a shard with a state in
// device memory (a copy, a launch, a sync): the undo log holds such shards' in-memory states (only
// the working copy where it alone is in device memory: those shards step twice), and the scratch
// memory that stages the shards split between device and host memory is listed.
TEST(footprint_plan, TheUndoLogHoldsTheShardsSplitBetweenDeviceAndHost) {
  const auto layout = small_and_large();
  auto config = offload_config(offload_device::cpu, offload_device::cpu);
  // ZeRO-Offload's layout, the working copies alone in device memory: Adam runs in place on the
  // host states and the new working copies are copied to the device, with nothing logged.
  config.zoe.placement[static_cast<std::size_t>(state_kind::working)] = tier_fractions{.device = 1.0};
  footprint_plan plan = make_footprint_plan(layout, config, placement(layout, config));
  EXPECT_EQ(plan.optimizer_undo_bytes, 0U);
  const plan_item* scratch = item_named(plan, "optimizer step scratch");
  ASSERT_NE(scratch, nullptr);
  EXPECT_EQ(scratch->memory, memory_kind::pageable);
  // One staging slot per state: the large shard in fp32 (below the default 1 MiB piece).
  EXPECT_EQ(scratch->bytes, state_kind_count * 160 * KiB);
  EXPECT_EQ(sum_of(plan, memory_kind::pageable), plan.pageable_bytes);

  // The masters in device memory too: split otherwise, so every state the step rewrites is logged.
  config.zoe.placement[static_cast<std::size_t>(state_kind::master)] = tier_fractions{.device = 1.0};
  plan = make_footprint_plan(layout, config, placement(layout, config));
  EXPECT_EQ(plan.optimizer_undo_bytes, (84 + 3 * 168) * KiB) << "working 4 + 80 KiB, three fp32 states 8 + 160";

  // Every state in device memory: stepped in place by the device's kernel, nothing logged.
  for (const state_kind s : all_states) {
    config.zoe.placement[static_cast<std::size_t>(s)] = tier_fractions{.device = 1.0};
  }
  plan = make_footprint_plan(layout, config, placement(layout, config));
  EXPECT_EQ(plan.optimizer_undo_bytes, 0U);
}

TEST(footprint_plan, ParameterSwapBuffersHoldAtLeastOneChunk) {
  const auto layout = small_and_large();
  auto config = everything_on_nvme(1);
  const auto plan = make_footprint_plan(layout, config, placement(layout, config));
  // buffer_count 5 of buffer_size 1e8 fp16 elements, in whole pages.
  EXPECT_EQ(plan.param_buffer_count, 5U);
  EXPECT_EQ(plan.param_buffer_bytes, round_up(200'000'000, 4096));
  EXPECT_EQ(item_named(plan, "parameter swap buffers")->bytes, 5 * round_up(200'000'000, 4096));

  // 100 elements are too few: a buffer holds a 64 KiB chunk of the 80 KiB shard at least.
  config.zero.offload_param->buffer_size = 100;
  config.zero.offload_param->buffer_count = 2;
  const auto small = make_footprint_plan(layout, config, placement(layout, config));
  EXPECT_EQ(small.param_buffer_bytes, 64 * KiB);
  EXPECT_EQ(small.param_buffer_count, 2U);

  // With only the 4 KiB shard on nvme, a buffer of its size is enough.
  const auto tiny_layout = layout_of({{2048}});
  EXPECT_EQ(make_footprint_plan(tiny_layout, config, placement(tiny_layout, config)).param_buffer_bytes, 4 * KiB);
}

// The parameter swap buffers are the mover's pool "params", cut into slots of one aio.block_size
// chunk (or one per buffer when a buffer is smaller): the slots are the item's memory, no more.
// No other item is a pool yet.
TEST(footprint_plan, TheParameterSwapBuffersAreTheMoversParamsPool) {
  const auto layout = small_and_large();
  auto config = everything_on_nvme(1);
  for (const std::uint64_t buffer_size : {100'000'000U, 100U}) {
    config.zero.offload_param->buffer_size = buffer_size;
    const auto plan = make_footprint_plan(layout, config, placement(layout, config));
    const plan_item* buffers = item_named(plan, "parameter swap buffers");
    ASSERT_NE(buffers, nullptr);
    ASSERT_TRUE(buffers->pool.has_value());
    EXPECT_EQ(buffers->pool->key, "params");
    EXPECT_EQ(buffers->pool->slot_bytes, std::min<std::uint64_t>(plan.param_buffer_bytes, config.aio.block_size));
    EXPECT_EQ(buffers->pool->slot_count, buffers->bytes / buffers->pool->slot_bytes);
    EXPECT_LE(buffers->pool->slot_count * buffers->pool->slot_bytes, buffers->bytes);
    for (const plan_item& item : plan.items) {
      if (&item != buffers) {
        EXPECT_FALSE(item.pool.has_value()) << item.what;
      }
    }
  }
}

TEST(footprint_plan, OptimizerSwapBuffersHoldTheLargestSubGroup) {
  const auto layout = small_and_large();
  auto config = everything_on_nvme(1);
  config.zero.offload_optimizer->buffer_count = 5;
  const auto plan = make_footprint_plan(layout, config, placement(layout, config));
  // One sub-group (sub_group_size 1e9) of 43008 fp32 elements: 168 KiB per buffer, 5 buffers.
  EXPECT_EQ(plan.optimizer_buffer_count, 5U);
  EXPECT_EQ(plan.optimizer_buffer_bytes, 168 * KiB);
  config.zero.sub_group_size = 2048;  // {p0}, {p1}: the largest is 40960 elements
  EXPECT_EQ(make_footprint_plan(layout, config, placement(layout, config)).optimizer_buffer_bytes, 160 * KiB);
  config.zero.offload_optimizer->device = offload_device::cpu;
  config.zero.offload_param->device = offload_device::cpu;
  config.zoe.placement = {};
  const auto none = make_footprint_plan(layout, config, placement(layout, config));
  EXPECT_EQ(none.optimizer_buffer_count, 0U) << "nothing the optimizer step touches on nvme";
  EXPECT_EQ(item_named(none, "optimizer swap buffers"), nullptr);
}

// The step cuts its buffers into slots of one piece of an fp32 state (one 64 KiB chunk of the fp16
// working copy: 32768 elements, 128 KiB in fp32), one per state on nvme: every state is, so a piece
// takes five slots, and fewer buffers are made larger to hold them.
TEST(footprint_plan, OptimizerSwapBuffersHoldOnePiecesSlots) {
  const auto layout = small_and_large();
  auto config = everything_on_nvme(1);
  config.zero.offload_optimizer->buffer_count = 2;
  const auto plan = make_footprint_plan(layout, config, placement(layout, config));
  EXPECT_EQ(plan.optimizer_buffer_count, 2U);
  EXPECT_EQ(plan.optimizer_buffer_bytes, 3 * 128 * KiB);

  // Only the working copies on nvme: the step writes them, so it still needs one slot a piece.
  config.zero.offload_optimizer->device = offload_device::cpu;
  config.zero.offload_param->max_in_cpu = 0;
  config.zoe.placement = {};
  const placement working_where(layout, config);
  ASSERT_GT(working_where.bytes(state_kind::working, tier::nvme), 0U);
  ASSERT_EQ(working_where.bytes(state_kind::master, tier::nvme), 0U);
  const auto working = make_footprint_plan(layout, config, working_where);
  EXPECT_EQ(working.optimizer_buffer_count, 2U);
  EXPECT_EQ(working.optimizer_buffer_bytes, 168 * KiB);
}

// zoe.placement.gradient on nvme (CONFIG.md's way to send gradients there) with the optimizer in
// host memory: the gradients still go to and come from nvme through pinned buffers, which the plan
// must count, or the swapper would lock memory the plan never listed.
TEST(footprint_plan, GradientsOnNvmeAloneGetOptimizerSwapBuffers) {
  const auto layout = small_and_large();
  auto config = offload_config(offload_device::none, offload_device::cpu, "/swap/a");
  config.zero.offload_optimizer->nvme_path = "/swap/a";
  config.zoe.placement[static_cast<std::size_t>(state_kind::gradient)] = tier_fractions{.nvme = 1.0};
  const placement where(layout, config);
  ASSERT_GT(where.bytes(state_kind::gradient, tier::nvme), 0U);
  const auto plan = make_footprint_plan(layout, config, where);
  EXPECT_EQ(plan.optimizer_buffer_count, 4U);
  // One sub-group of 43008 elements; the buffers are sized for fp32, the gradient's dtype.
  EXPECT_EQ(plan.optimizer_buffer_bytes, 168 * KiB);
  EXPECT_NE(item_named(plan, "optimizer swap buffers"), nullptr);
}

// Modules of 4 KiB and 80 KiB of fp16 gradients (86016 bytes in all): a bucket of
// reduce_bucket_size fp16 elements, clamped between the largest module and the whole model.
TEST(footprint_plan, GradientBucketsFollowReduceBucketSizeBetweenTheLargestModuleAndTheModel) {
  const auto layout = small_and_large();
  auto config = everything_on_nvme(1);
  config.zero.overlap_comm = false;
  const auto bucket = [&] { return make_footprint_plan(layout, config, placement(layout, config)); };
  EXPECT_EQ(bucket().gradient_bucket_count, 1U);
  EXPECT_EQ(bucket().gradient_bucket_bytes, 86016U) << "500M elements would never fill";
  config.zero.reduce_bucket_size = 1000;
  EXPECT_EQ(bucket().gradient_bucket_bytes, 81920U) << "a module is lent its gradients whole";
  config.zero.reduce_bucket_size = 42000;
  EXPECT_EQ(bucket().gradient_bucket_bytes, 84000U);
  config.zero.overlap_comm = true;
  const auto plan = bucket();
  EXPECT_EQ(plan.gradient_bucket_count, 2U);
  const plan_item* item = item_named(plan, "gradient buckets");
  ASSERT_NE(item, nullptr);
  EXPECT_EQ(item->memory, memory_kind::device);
  EXPECT_EQ(item->bytes, 2 * 84000U);
  EXPECT_TRUE(mentions(item->keys, "zero_optimization.reduce_bucket_size"));
  EXPECT_TRUE(mentions(item->keys, "zero_optimization.overlap_comm"));
}

// Staging buffers cover whole aio.block_size chunks and whole 64 Ki-element fp32 chunks of the sum
// of squares (lcm: 256 KiB with 64 KiB blocks), or the largest off-device gradient shard whole.
TEST(footprint_plan, GradientStagingBuffersCoverWholeChunksOfBothKinds) {
  auto config = everything_on_nvme(1);
  const auto small = small_and_large();  // the largest gradient shard: 160 KiB of fp32
  auto plan = make_footprint_plan(small, config, placement(small, config));
  EXPECT_EQ(plan.gradient_buffer_count, 4U);
  EXPECT_EQ(plan.gradient_buffer_bytes, 160 * KiB);
  const plan_item* item = item_named(plan, "gradient staging buffers");
  ASSERT_NE(item, nullptr);
  EXPECT_EQ(item->memory, memory_kind::pinned);
  EXPECT_EQ(item->bytes, 4 * 160 * KiB);

  const auto large = layout_of({{2048}, {131072}});  // 512 KiB of fp32
  EXPECT_EQ(make_footprint_plan(large, config, placement(large, config)).gradient_buffer_bytes, 256 * KiB);
  config.aio.block_size = 1 * MiB;
  EXPECT_EQ(make_footprint_plan(large, config, placement(large, config)).gradient_buffer_bytes, 512 * KiB);
  config.aio.block_size = 192 * KiB;  // not a power of two: lcm(192, 256) KiB
  const auto huge = layout_of({{2048}, {1048576}});
  EXPECT_EQ(make_footprint_plan(huge, config, placement(huge, config)).gradient_buffer_bytes, 768 * KiB);

  // In host memory the reduced gradient still comes through staging; on the device it does not.
  config = everything_on_nvme(1);
  config.zoe.placement[static_cast<std::size_t>(state_kind::gradient)] = tier_fractions{.host = 1};
  EXPECT_EQ(make_footprint_plan(small, config, placement(small, config)).gradient_buffer_count, 4U);
  config.zoe.placement[static_cast<std::size_t>(state_kind::gradient)] = tier_fractions{.device = 1};
  plan = make_footprint_plan(small, config, placement(small, config));
  EXPECT_EQ(plan.gradient_buffer_count, 0U);
  EXPECT_EQ(plan.gradient_buffer_bytes, 0U);
  EXPECT_EQ(item_named(plan, "gradient staging buffers"), nullptr);
}

TEST(footprint_plan, ZeroSwapBuffersWithStatesOnNvmeIsAConfigError) {
  const auto layout = small_and_large();
  auto config = everything_on_nvme(1);
  config.zero.offload_param->buffer_count = 0;
  try {
    (void)make_footprint_plan(layout, config, placement(layout, config));
    FAIL() << "buffer_count 0 must be refused";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("zero_optimization.offload_param.buffer_count"), std::string::npos)
        << e.what();
  }
  config.zero.offload_param->buffer_count = 1;
  config.zero.offload_optimizer->buffer_count = 0;
  EXPECT_THROW((void)make_footprint_plan(layout, config, placement(layout, config)), config_error);
}

TEST(footprint_plan, PinMemoryDecidesPinnedOrPageableHomes) {
  const auto layout = layout_of({{2048, 4096}});
  for (const bool pinned : {true, false}) {
    const auto config = offload_config(offload_device::cpu, offload_device::cpu, "", pinned);
    const auto plan = make_footprint_plan(layout, config, placement(layout, config));
    const std::uint64_t host = 6144U * (2 + 4 + 4 + 4 + 4);  // the gradient is fp32
    // The gradient in host memory, pinned or not, also comes through the pinned staging buffers.
    EXPECT_EQ(plan.gradient_buffer_bytes, 4096U * 4);
    EXPECT_EQ(plan.pinned_bytes, (pinned ? host : 0U) + plan.gradient_buffer_count * plan.gradient_buffer_bytes);
    // And the speculative step's pending memory: the host states it rewrites (all but the gradient).
    const std::uint64_t pending = 6144U * (2 + 4 + 4 + 4);
    EXPECT_EQ(plan.optimizer_pending_bytes, pending);
    EXPECT_EQ(plan.pageable_bytes, (pinned ? 0U : host) + pending);
    EXPECT_EQ(plan.state_bytes[static_cast<std::size_t>(pinned ? memory_kind::pinned : memory_kind::pageable)], host);
    EXPECT_EQ(plan.nvme_bytes, 0U);
    EXPECT_TRUE(plan.swap_paths.empty());
  }
}

TEST(footprint_plan, TheArenaHoldsTheLargestModulePrefetchAndPersistentParameters) {
  // fp16 modules of 8192, 4096, 4096, 4096 and 2048 elements; the last persists (threshold 2048).
  const auto layout = layout_of({{8192}, {4096}, {4096}, {4096}, {2048}});
  engine_config config;
  config.zero.stage = 3;
  config.zero.param_persistence_threshold = 2048;
  config.zero.prefetch_bucket_size = 1000;
  const auto arena = [&] { return make_footprint_plan(layout, config, placement(layout, config)).arena_bytes; };
  // Largest module 16 KiB, plus a bucket of 1000 fp16 elements, plus one parameter that may pass the
  // bucket's edge (16 KiB), plus the persistent 4 KiB. The limits count elements; their bytes are
  // rounded up to the arena's 256-byte alignment, or the arena would refuse its capacity.
  EXPECT_EQ(arena(), 16384U + 2048 + 16384 + 4096);
  config.zero.max_live_parameters = 10'000;  // 20000 bytes live at most: 20224 rounded
  EXPECT_EQ(arena(), 20224U + 4096);
  EXPECT_EQ(arena() % 256, 0U);
  config.zero.max_live_parameters = 10;  // never below the largest module
  EXPECT_EQ(arena(), 16384U + 4096);
  config.zero.max_live_parameters = 1'000'000'000;
  config.zero.prefetch_bucket_size = 1'000'000;  // at most every non-persistent parameter at once
  EXPECT_EQ(arena(), 40960U + 4096);
  config.zero.max_live_parameters = std::numeric_limits<std::uint64_t>::max();  // no overflow
  EXPECT_EQ(arena(), 40960U + 4096);
}

TEST(footprint_plan, PersistentParametersFollowDeepSpeedsRule) {
  // numel 100, 5000, 50, 60; param threshold 100, model threshold 170: 100 persists, 5000 is too
  // large, 50 still fits (150), 60 would pass 170 and is skipped.
  const auto layout = layout_of({{100, 5000}, {50, 60}});
  zero_config zero;
  zero.stage = 3;
  zero.param_persistence_threshold = 100;
  zero.model_persistence_threshold = 170;
  EXPECT_EQ(persistent_parameters(layout, zero), (std::vector<parameter_id>{0, 2}));
  zero.param_persistence_threshold = 0;
  EXPECT_TRUE(persistent_parameters(layout, zero).empty());
  // Below stage 3 the 16-bit parameters are replicated: every one persists, whatever the thresholds.
  zero.stage = 2;
  EXPECT_EQ(persistent_parameters(layout, zero), (std::vector<parameter_id>{0, 1, 2, 3}));
}

TEST(footprint_plan, ShortfallsNameTheBytesAndTheKeys) {
  const auto layout = small_and_large();
  auto config = everything_on_nvme(1);
  config.zoe.placement[static_cast<std::size_t>(state_kind::gradient)] = tier_fractions{.host = 1};
  config.zoe.placement[static_cast<std::size_t>(state_kind::working)] = tier_fractions{.device = 1};
  const auto plan = make_footprint_plan(layout, config, placement(layout, config));
  const machine_limits ample{.device_budget = plan.device_bytes,
                             .memlock_limit = plan.pinned_bytes,
                             .host_available = plan.pinned_bytes + plan.pageable_bytes,
                             .disk_free = {{"/swap/a", plan.nvme_bytes}}};
  EXPECT_TRUE(plan_shortfalls(plan, ample).empty()) << "exactly enough fits";
  EXPECT_NO_THROW(check_plan_fits(plan, ample));

  machine_limits tight = ample;
  tight.device_budget -= 1;
  tight.memlock_limit -= 1;
  tight.host_available -= 1;
  tight.disk_free = {{"/swap/a", plan.nvme_bytes - 1}};
  const auto lines = plan_shortfalls(plan, tight);
  ASSERT_EQ(lines.size(), 4U);
  EXPECT_TRUE(mentions({lines[0]}, "device memory")) << lines[0];
  EXPECT_TRUE(mentions({lines[0]}, "zoe.placement.working")) << lines[0];
  EXPECT_TRUE(mentions({lines[0]}, "zoe.device.budget_bytes")) << lines[0];
  EXPECT_TRUE(mentions({lines[1]}, "RLIMIT_MEMLOCK")) << lines[1];
  EXPECT_TRUE(mentions({lines[1]}, "zero_optimization.offload_optimizer.buffer_count")) << lines[1];
  EXPECT_TRUE(mentions({lines[1]}, "zero_optimization.offload_optimizer.pin_memory")) << lines[1];
  EXPECT_TRUE(mentions({lines[2]}, "MemAvailable")) << lines[2];
  EXPECT_TRUE(mentions({lines[3]}, "/swap/a")) << lines[3];
  EXPECT_TRUE(mentions({lines[3]}, "zoe.swap.extra_paths")) << lines[3];
  EXPECT_TRUE(mentions({lines[3]}, format_bytes(plan.nvme_bytes))) << lines[3];
  try {
    check_plan_fits(plan, tight);
    FAIL() << "a plan that does not fit is refused";
  } catch (const config_error& e) {
    for (const auto& line : lines) EXPECT_NE(std::string(e.what()).find(line), std::string::npos) << e.what();
  }
}

// Pinned bytes that saturate (buffer_count 2e14 swap buffers) plus any pageable bytes must still
// exceed the host: the sum saturates instead of wrapping to a few bytes that "fit".
TEST(footprint_plan, SaturatedPinnedBytesWithPageableHomesDoNotFit) {
  const auto layout = small_and_large();
  auto config = offload_config(offload_device::cpu, offload_device::nvme, "/swap/a", false);
  config.zero.offload_optimizer->buffer_count = 200'000'000'000'000;
  const auto plan = make_footprint_plan(layout, config, placement(layout, config));
  ASSERT_EQ(plan.pinned_bytes, std::numeric_limits<std::uint64_t>::max());
  ASSERT_GT(plan.pageable_bytes, 0U);
  const machine_limits limits{
      .device_budget = UINT64_MAX, .memlock_limit = UINT64_MAX, .host_available = 64 * GiB, .disk_free = {}};
  const auto lines = plan_shortfalls(plan, limits);
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_TRUE(mentions(lines, "MemAvailable")) << lines[0];
  EXPECT_TRUE(mentions(lines, "zero_optimization.offload_optimizer.buffer_count")) << lines[0];
}

TEST(footprint_plan, UnknownFreeSpaceIsNoShortfall) {
  const auto layout = small_and_large();
  const auto config = everything_on_nvme(2);
  const auto plan = make_footprint_plan(layout, config, placement(layout, config));
  const machine_limits limits{.device_budget = UINT64_MAX,
                              .memlock_limit = UINT64_MAX,
                              .host_available = UINT64_MAX,
                              .disk_free = {{"/swap/a", std::nullopt}, {"/swap/b", plan.nvme_bytes / 2}}};
  EXPECT_TRUE(plan_shortfalls(plan, limits).empty()) << "each path holds its half of the store";
}

// Two swap paths on one filesystem (offload_param under /nvme/param, offload_optimizer under
// /nvme/optim) take both their shares from its free bytes: each share fitting is not enough.
TEST(footprint_plan, SwapPathsOnOneFilesystemNeedTheirSharesTogether) {
  const auto layout = small_and_large();
  const auto config = everything_on_nvme(2);
  const auto plan = make_footprint_plan(layout, config, placement(layout, config));
  const std::uint64_t half = plan.nvme_bytes / 2;
  machine_limits limits{.device_budget = UINT64_MAX,
                        .memlock_limit = UINT64_MAX,
                        .host_available = UINT64_MAX,
                        .disk_free = {{.path = "/swap/a", .free = half + half / 2, .filesystem = 7},
                                      {.path = "/swap/b", .free = half + half / 2, .filesystem = 7}}};
  const auto lines = plan_shortfalls(plan, limits);
  ASSERT_EQ(lines.size(), 1U) << "one filesystem, one line";
  EXPECT_TRUE(mentions(lines, "'/swap/a', '/swap/b'")) << lines[0];
  EXPECT_TRUE(mentions(lines, format_bytes(2 * half))) << lines[0];
  EXPECT_TRUE(mentions(lines, "zoe.swap.extra_paths")) << lines[0];

  limits.disk_free[1].filesystem = 8;  // two filesystems: each holds its half
  EXPECT_TRUE(plan_shortfalls(plan, limits).empty());
  limits.disk_free[0].filesystem = std::nullopt;  // unknown: each path counts alone
  limits.disk_free[1].filesystem = std::nullopt;
  EXPECT_TRUE(plan_shortfalls(plan, limits).empty());
  limits.disk_free = {{.path = "/swap/a", .free = 2 * half, .filesystem = 7},
                      {.path = "/swap/b", .free = 2 * half, .filesystem = 7}};
  EXPECT_TRUE(plan_shortfalls(plan, limits).empty()) << "exactly enough for both fits";
}

TEST(footprint_plan, MeasuredSubfoldersOfOneFolderShareAFilesystem) {
  const testing::scratch_dir dir;
  std::filesystem::create_directories(dir / "param");
  std::filesystem::create_directories(dir / "optim");
  engine_config config;
  config.zoe.device_kind = "host";
  config.zoe.extra_swap_paths = {dir / "param", dir / "optim"};
  const machine_limits limits = measure_machine(config);
  ASSERT_EQ(limits.disk_free.size(), 2U);
  ASSERT_TRUE(limits.disk_free[0].filesystem.has_value());
  EXPECT_EQ(limits.disk_free[0].filesystem, limits.disk_free[1].filesystem);
}

TEST(footprint_plan, MeasureMachineReadsTheHostDeviceAndTheSwapPaths) {
  const testing::scratch_dir dir;
  engine_config config;
  config.zoe.device_kind = "host";
  config.zoe.device_budget = 123 * MiB;
  config.zoe.extra_swap_paths = {dir.path(), dir / "missing"};
  const machine_limits limits = measure_machine(config);
  EXPECT_EQ(limits.device_budget, 123 * MiB);
  EXPECT_GT(limits.memlock_limit, 0U);
  EXPECT_GT(limits.host_available, 0U);
  ASSERT_EQ(limits.disk_free.size(), 2U);
  EXPECT_EQ(limits.disk_free[0].path, dir.path());
  ASSERT_TRUE(limits.disk_free[0].free.has_value());
  EXPECT_GT(*limits.disk_free[0].free, 0U);
  EXPECT_TRUE(limits.disk_free[0].filesystem.has_value());
  EXPECT_FALSE(limits.disk_free[1].free.has_value()) << "a missing path: free space unknown";
  EXPECT_FALSE(limits.disk_free[1].filesystem.has_value());
}

}  // namespace
}  // namespace zoe::engine

namespace zoe::engine {
namespace {

// ZeRO++'s device memory: the hpZ secondary shards (each parameter's slice of its full padded
// value over the hpZ group, aligned), qwZ's gather scratch and qgZ's reduce-scatter scratch, each
// in the device total and naming its key; none when the keys are off or there is nothing to split.
TEST(footprint_plan, ZeroPlusPlusMemoryIsListedOnTheDeviceNamingItsKeys) {
  const auto layout = layout_of({{2048, 7}, {40960}}, kernels::dtype::fp16, 4);
  auto config = offload_config(offload_device::cpu, offload_device::cpu);
  const auto off = make_footprint_plan(layout, config, placement(layout, config));
  EXPECT_EQ(off.hpz_secondary_bytes + off.qwz_scratch_bytes + off.qgz_scratch_bytes, 0U);
  EXPECT_EQ(item_named(off, "hpZ"), nullptr);

  config.zero.zero_hpz_partition_size = 2;
  config.zero.zero_quantized_weights = true;
  config.zero.zero_quantized_gradients = true;
  const auto plan = make_footprint_plan(layout, config, placement(layout, config));
  std::uint64_t secondary = 0;
  for (const parameter_layout& p : layout.parameters()) {
    const std::uint64_t slice = p.padded_numel(4) * 2 / 2;  // fp16 full bytes over 2 ranks
    EXPECT_EQ(hpz_secondary_shard_bytes(p, 4, 2), slice);
    secondary += (slice + arena_alignment - 1) / arena_alignment * arena_alignment;
  }
  EXPECT_EQ(plan.hpz_secondary_bytes, secondary);
  for (const auto& [what, key, bytes] :
       {std::tuple{"hpZ secondary shards", "zero_optimization.zero_hpz_partition_size", plan.hpz_secondary_bytes},
        std::tuple{"qwZ", "zero_optimization.zero_quantized_weights", plan.qwz_scratch_bytes},
        std::tuple{"qgZ", "zero_optimization.zero_quantized_gradients", plan.qgz_scratch_bytes}}) {
    const plan_item* item = item_named(plan, what);
    ASSERT_NE(item, nullptr) << what;
    EXPECT_EQ(item->memory, memory_kind::device) << what;
    EXPECT_EQ(item->bytes, bytes) << what;
    EXPECT_GT(bytes, 0U) << what;
    EXPECT_NE(std::find(item->keys.begin(), item->keys.end(), key), item->keys.end()) << what;
  }
  EXPECT_EQ(plan.device_bytes,
            off.device_bytes + plan.hpz_secondary_bytes + plan.qwz_scratch_bytes + plan.qgz_scratch_bytes);
  // The largest parameter's gather fits the scratch; so does its reduce-scatter on any topology.
  EXPECT_GE(plan.qwz_scratch_bytes, quantized_all_gather_scratch(4, layout.parameter(2).shard_numel));
  EXPECT_GE(plan.qgz_scratch_bytes,
            quantized_reduce_scatter_scratch(kernels::topology{.nodes = 2, .ranks_per_node = 2},
                                             layout.parameter(2).shard_numel, device_kind::cuda));
  // One rank has no hpZ group to split over.
  const auto single = layout_of({{2048, 7}, {40960}}, kernels::dtype::fp16, 1);
  EXPECT_EQ(make_footprint_plan(single, config, placement(single, config)).hpz_secondary_bytes, 0U);
}

}  // namespace
}  // namespace zoe::engine

namespace zoe::engine {
namespace {

// What each ZeRO stage partitions, as DeepSpeed defines them, on 4 ranks with 4 micro-batches per
// step: optimizer states 1/N at stages 1-3; the 16-bit parameters whole on every rank below stage
// 3; the gradient whole (stage 1's local accumulation, fp32 padded) at stage 1 and only the 1/N
// gradient state at stages 2 and 3.
TEST(footprint_plan, EachStagePlansWhatItPartitions) {
  constexpr std::size_t world = 4;
  const auto layout = layout_of({{2048, 7}, {40960}}, kernels::dtype::fp16, world);
  std::uint64_t shard_fp32 = 0;
  std::uint64_t full_fp32 = 0;
  std::uint64_t full_fp16_aligned = 0;
  for (const parameter_layout& p : layout.parameters()) {
    shard_fp32 += p.shard_numel * 4;
    full_fp32 += p.padded_numel(world) * 4;
    full_fp16_aligned += align_up(p.padded_numel(world) * 2, arena_alignment);
  }
  ASSERT_EQ(full_fp32, world * shard_fp32);
  for (const int stage : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << "stage " << stage);
    auto config = offload_config(offload_device::cpu, offload_device::cpu);  // optimizer states in pinned host memory
    config.zero.stage = stage;
    config.gradient_accumulation_steps = 4;
    config.zero.param_persistence_threshold = 100;  // at stage 3 only the bias persists
    const auto plan = make_footprint_plan(layout, config, placement(layout, config));
    for (const char* state : {"master in pinned host memory", "exp_avg in pinned host memory",
                              "exp_avg_sq in pinned host memory", "gradient in pinned host memory"}) {
      const plan_item* item = item_named(plan, state);
      ASSERT_NE(item, nullptr) << state;
      EXPECT_EQ(item->bytes, shard_fp32) << state << ": 1/N of the model in fp32";
    }
    // Stage 1's whole gradient beside the 1/N state, off the device like the state: pageable host.
    EXPECT_EQ(plan.local_gradient_device_bytes, 0U);
    EXPECT_EQ(plan.local_gradient_host_bytes, stage == 1 ? full_fp32 : 0U);
    const plan_item* whole = item_named(plan, "stage-1 gradient accumulation");
    EXPECT_EQ(whole != nullptr, stage == 1);
    if (whole != nullptr) {
      EXPECT_EQ(whole->memory, memory_kind::pageable);
      EXPECT_EQ(whole->bytes, full_fp32);
      EXPECT_NE(std::find(whole->keys.begin(), whole->keys.end(), "zero_optimization.stage"), whole->keys.end());
    }
    // The 16-bit parameters: whole on every rank below stage 3 (every one persistent), only the
    // persistence threshold's small ones at stage 3 (here: the bias of 7 elements).
    const plan_item* replicated = item_named(plan, "16-bit parameters, replicated");
    EXPECT_EQ(replicated != nullptr, stage < 3);
    if (replicated != nullptr) {
      EXPECT_EQ(replicated->bytes, full_fp16_aligned);
    }
    EXPECT_EQ(persistent_parameters(layout, config.zero).size(), stage < 3 ? 3U : 1U);
  }
}

// Stage 1's whole gradient lies where its gradient state does: on the device without offload, and
// only where it is needed: on more than one rank, with more than one micro-batch per step.
TEST(footprint_plan, StageOneAccumulatesWholeGradientsOnlyWithSeveralRanksAndMicroBatches) {
  engine_config config;
  config.zero.stage = 1;
  config.gradient_accumulation_steps = 4;
  const auto four = layout_of({{2048, 7}, {40960}}, kernels::dtype::bf16, 4);
  const auto plan = make_footprint_plan(four, config, placement(four, config));
  std::uint64_t aligned = 0;
  for (const parameter_layout& p : four.parameters()) aligned += align_up(p.padded_numel(4) * 4, arena_alignment);
  EXPECT_EQ(plan.local_gradient_device_bytes, aligned);
  EXPECT_EQ(plan.local_gradient_host_bytes, 0U);
  const plan_item* item = item_named(plan, "stage-1 gradient accumulation, whole on every rank, in device memory");
  ASSERT_NE(item, nullptr);
  EXPECT_EQ(item->memory, memory_kind::device);
  EXPECT_TRUE(accumulates_gradients_locally(config, 4));

  config.gradient_accumulation_steps = 1;
  EXPECT_FALSE(accumulates_gradients_locally(config, 4));
  EXPECT_EQ(make_footprint_plan(four, config, placement(four, config)).local_gradient_device_bytes, 0U);
  config.gradient_accumulation_steps = 4;
  const auto one = layout_of({{2048, 7}, {40960}}, kernels::dtype::bf16, 1);
  EXPECT_FALSE(accumulates_gradients_locally(config, 1));
  EXPECT_EQ(make_footprint_plan(one, config, placement(one, config)).local_gradient_device_bytes, 0U);
}

// Stage 0 is plain data parallelism: each of 4 ranks holds every state whole (one shard, held by
// every rank), so a rank's plan is the one-rank plan: a full replica of the 16-bit parameters, the
// gradient, the master and both moments. Stage 1 on 4 ranks holds a quarter of the fp32 states.
TEST(footprint_plan, StageZeroHoldsAFullReplicaOnEveryRank) {
  engine_config config;
  config.zero.stage = 0;
  const layout_options four_ranks = stage_layout(config, 4);
  EXPECT_EQ(four_ranks.world_size, 1U);
  EXPECT_EQ(four_ranks.replicas, 4U);
  const std::vector<std::vector<std::uint64_t>> model = {{2048, 7}, {40960}};
  const auto replicated = layout_of(model, kernels::dtype::bf16, four_ranks);
  const auto one = layout_of(model, kernels::dtype::bf16, 1);
  EXPECT_EQ(replicated.ranks(), 4U);
  for (std::size_t r = 0; r < 4; ++r) EXPECT_EQ(replicated.shard_of(r), 0U) << "rank " << r;
  std::uint64_t whole_fp32 = 0;
  for (const parameter_layout& p : replicated.parameters()) {
    EXPECT_GE(p.shard_numel, p.numel) << p.name << " is whole on every rank";
    whole_fp32 += p.shard_numel * 4;
  }
  const footprint_plan four = make_footprint_plan(replicated, config, placement(replicated, config));
  const footprint_plan single = make_footprint_plan(one, config, placement(one, config));
  for (const char* state : {"gradient in device memory", "master in device memory", "exp_avg in device memory",
                            "exp_avg_sq in device memory"}) {
    const plan_item* item = item_named(four, state);
    ASSERT_NE(item, nullptr) << state;
    EXPECT_EQ(item->bytes, whole_fp32) << state;
  }
  EXPECT_EQ(item_named(four, "16-bit parameters, replicated")->bytes,
            item_named(single, "16-bit parameters, replicated")->bytes);
  EXPECT_EQ(four.state_bytes, single.state_bytes);
  EXPECT_EQ(four.device_bytes, single.device_bytes);

  config.zero.stage = 1;
  const auto partitioned = layout_of(model, kernels::dtype::bf16, stage_layout(config, 4));
  EXPECT_EQ(partitioned.options().world_size, 4U);
  const footprint_plan quarter = make_footprint_plan(partitioned, config, placement(partitioned, config));
  EXPECT_LT(item_named(quarter, "master in device memory")->bytes * 2, whole_fp32) << "stage 1 partitions";
}

// Stage 0 on several ranks with several micro-batches accumulates each rank's whole gradient in
// fp32 and all-reduces it once per step, as DeepSpeed's engine reduces only at the accumulation
// boundary; one rank has nothing to reduce and accumulates into its gradient state.
TEST(footprint_plan, StageZeroAccumulatesWholeGradientsOnSeveralRanks) {
  engine_config config;
  config.zero.stage = 0;
  config.gradient_accumulation_steps = 4;
  EXPECT_TRUE(accumulates_gradients_locally(config, 4));
  EXPECT_FALSE(accumulates_gradients_locally(config, 1));
  const std::vector<std::vector<std::uint64_t>> model = {{2048, 7}, {40960}};
  const auto replicated = layout_of(model, kernels::dtype::bf16, stage_layout(config, 4));
  const footprint_plan plan = make_footprint_plan(replicated, config, placement(replicated, config));
  std::uint64_t aligned = 0;
  for (const parameter_layout& p : replicated.parameters()) aligned += align_up(p.shard_numel * 4, arena_alignment);
  EXPECT_EQ(plan.local_gradient_device_bytes, aligned);
  const plan_item* item = item_named(plan, "stage-0 gradient accumulation, whole on every rank, in device memory");
  ASSERT_NE(item, nullptr);
  EXPECT_EQ(item->bytes, aligned);
  const auto one = layout_of(model, kernels::dtype::bf16, stage_layout(config, 1));
  EXPECT_EQ(make_footprint_plan(one, config, placement(one, config)).local_gradient_device_bytes, 0U);
}

// What needs partitions is refused for stage 0 on several ranks, naming the key (its reduction is a
// plain all-reduce, and every rank holds whole parameters); one rank runs it as before. A stage-0
// layout cut into shards is the caller's mistake.
TEST(footprint_plan, StageZeroOnSeveralRanksRefusesWhatNeedsPartitionsNamingTheKey) {
  engine_config config;
  config.zero.stage = 0;
  const auto refused = [&](const std::string& key) {
    const auto replicated = layout_of({{2048, 7}}, kernels::dtype::fp32, stage_layout(config, 2));
    try {
      (void)make_footprint_plan(replicated, config, placement(replicated, config));
      ADD_FAILURE() << key << " was planned at stage 0 on 2 ranks";
    } catch (const config_error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("2 ranks"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(check_stage_fits_world(config, 1));
  };
  config.zero.zero_quantized_gradients = true;
  refused("zero_optimization.zero_quantized_gradients");
  config.zero.zero_quantized_gradients = false;
  config.zero.zero_hpz_partition_size = 2;
  refused("zero_optimization.zero_hpz_partition_size");
  config.zero.zero_hpz_partition_size = 1;

  const auto cut = layout_of({{2048, 7}}, kernels::dtype::fp32, 2);
  EXPECT_THROW((void)make_footprint_plan(cut, config, placement(cut, config)), usage_error);
}

}  // namespace
}  // namespace zoe::engine
