// The engine's resources refuse, before allocating anything, a plan this machine cannot hold (naming
// the keys to change) and a swap path that does not exist (naming the key and the path); once
// built, its pinned memory cannot grow past the plan's pinned bytes.
#include <gtest/gtest.h>

#include <string>

#include "engine_stack.hpp"
#include "zoe/core/error.hpp"

namespace zoe::testing {
namespace {

// What constructing a engine_resources on `dev` throws as config_error ("" when nothing is thrown).
std::string refusal(const engine::engine_config& config, device& dev) {
  try {
    const engine::engine_resources path(layered_model(2, 2, 20'000), config, dev);
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

TEST(EngineResources, APlanLargerThanTheDeviceBudgetIsRefusedNamingTheKeysBeforeAnythingIsAllocated) {
  const scratch_dir dir;
  engine::engine_config config = nvme_config();
  config.zero.offload_param->nvme_path = dir.path();
  config.zero.param_persistence_threshold = 0;   // every parameter is fetched through the arena
  const auto dev = make_host_device(16 * 1024);  // less than one gathered layer
  const std::string what = refusal(config, *dev);
  EXPECT_NE(what.find("device memory"), std::string::npos) << what;
  EXPECT_NE(what.find("zoe.device.budget_bytes"), std::string::npos) << what;
  EXPECT_NE(what.find("stage3_prefetch_bucket_size"), std::string::npos) << what;
  EXPECT_EQ(dev->usage().peak_bytes, 0U);
}

TEST(EngineResources, AMissingNvmePathIsAConfigErrorNamingTheKeyAndThePath) {
  const scratch_dir dir;
  engine::engine_config config = nvme_config();
  config.zero.offload_param->nvme_path = dir.path() / "not-made";
  const auto dev = make_host_device(std::uint64_t{64} << 20);
  const std::string what = refusal(config, *dev);
  EXPECT_NE(what.find("zero_optimization.offload_param.nvme_path"), std::string::npos) << what;
  EXPECT_NE(what.find((dir.path() / "not-made").string()), std::string::npos) << what;
  EXPECT_EQ(dev->usage().peak_bytes, 0U);
}

TEST(EngineResources, AMissingExtraSwapPathNamesTheZoeKey) {
  const scratch_dir dir;
  engine::engine_config config = nvme_config();
  config.zero.offload_param->nvme_path = dir.path();
  config.zoe.extra_swap_paths = {dir.path() / "second"};
  const auto dev = make_host_device(std::uint64_t{64} << 20);
  const std::string what = refusal(config, *dev);
  EXPECT_NE(what.find("zoe.swap.extra_paths"), std::string::npos) << what;
  EXPECT_NE(what.find((dir.path() / "second").string()), std::string::npos) << what;
}

TEST(EngineResources, PinnedMemoryIsLimitedToThePlansPinnedBytes) {
  engine_stack s({.modules = layered_model(2, 2, 20'000), .config = nvme_config()});
  ASSERT_GT(s.plan().pinned_bytes, 0U);
  EXPECT_LE(s.pinned().bytes_in_use(), s.plan().pinned_bytes);
  const std::uint64_t room = s.plan().pinned_bytes - s.pinned().bytes_in_use();
  EXPECT_THROW((void)s.pinned().allocate(room + 1), memory_error);
  EXPECT_EQ(s.pinned().bytes_in_use() + room, s.plan().pinned_bytes);
}

// The rank's mover has exactly the pools the plan names, each as the plan cut it: the plan item's
// memory, in its slots.
TEST(ParameterPath, TheMoversPoolsAreThePlansPoolItems) {
  engine_stack s({.modules = layered_model(2, 2, 20'000), .config = nvme_config()});
  std::size_t pools = 0;
  for (const engine::plan_item& item : s.plan().items) {
    if (!item.pool) continue;
    ++pools;
    ASSERT_TRUE(s.movers().has_pool(item.pool->key)) << item.what;
    const engine::mover_pool_spec& spec = s.movers().pool_spec(s.movers().pool(item.pool->key));
    EXPECT_EQ(spec.slot_bytes, item.pool->slot_bytes) << item.what;
    EXPECT_EQ(spec.slot_count, item.pool->slot_count) << item.what;
    EXPECT_LE(spec.slot_bytes * spec.slot_count, item.bytes) << item.what;
  }
  EXPECT_GE(pools, 1U) << "parameters on nvme: the parameter swap buffers are a pool";
  EXPECT_TRUE(s.movers().has_pool("params"));
  EXPECT_FALSE(s.movers().has_pool("anything else"));
}

}  // namespace
}  // namespace zoe::testing
