// Placement: the precedence of zoe.placement over offload_param / offload_optimizer / max_in_cpu,
// DeepSpeed's reading of each, and the errors naming their keys.
#include "zoe/engine/tiers/placement.hpp"

#include <gtest/gtest.h>

#include <string>

#include "tiers_test_support.hpp"
#include "zoe/core/error.hpp"

namespace zoe::engine {
namespace {

using testing::layout_of;
using testing::offload_config;

// Tiers of state `s` for every parameter, in layout order.
std::vector<tier> tiers_of(const placement& where, const model_layout& layout, state_kind s) {
  std::vector<tier> out;
  for (const auto& p : layout.parameters()) out.push_back(where.where(p.id, s));
  return out;
}

std::string message_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const config_error& e) {
    return e.what();
  }
  return "(no config_error)";
}

TEST(placement, WithoutOffloadEveryStateIsOnTheDevice) {
  const auto layout = layout_of({{4096, 100}, {2048}});
  const placement where(layout, engine_config{});
  for (const state_kind s : all_states) {
    for (const auto& p : layout.parameters()) EXPECT_EQ(where.where(p.id, s), tier::device) << state_kind_name(s);
    EXPECT_EQ(where.bytes(s, tier::host) + where.bytes(s, tier::nvme), 0U);
  }
  // Shards are 2048-element granules: 4096 + 2048 + 2048 elements per state.
  EXPECT_EQ(where.bytes(state_kind::working, tier::device), 8192U * 2);
  EXPECT_EQ(where.bytes(state_kind::master, tier::device), 8192U * 4);
  EXPECT_EQ(where.bytes(tier::device), 8192U * (2 + 4 + 4 + 4 + 4));  // the gradient is fp32
}

TEST(placement, OffloadParamCpuPutsTheWorkingCopyInHostMemoryOnly) {
  const auto layout = layout_of({{4096, 2048}});
  const placement where(layout, offload_config(offload_device::cpu, offload_device::none));
  EXPECT_EQ(where.bytes(state_kind::working, tier::host), 6144U * 2);
  for (const state_kind s : {state_kind::gradient, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    EXPECT_EQ(where.bytes(s, tier::device), 6144U * 4) << state_kind_name(s) << " is fp32";
  }
}

TEST(placement, OffloadParamBelowStageThreeIsIgnored) {
  const auto layout = layout_of({{4096}});
  auto config = offload_config(offload_device::cpu, offload_device::none);
  config.zero.stage = 2;
  const placement where(layout, config);
  EXPECT_EQ(where.where(0, state_kind::working), tier::device);
  EXPECT_EQ(where.keys(state_kind::working)[0], "zero_optimization.stage") << "the key that would move it";
}

TEST(placement, MaxInCpuKeepsWholeSubGroupsInHostMemoryUntilOneDoesNotFit) {
  // Shards of 2048, 8192, 2048 and 2048 elements; sub_group_size 1 makes each parameter its own
  // sub-group. max_in_cpu 4096: the first fits, the second does not, and DeepSpeed stops there,
  // so the third and fourth go to nvme although they would fit.
  const auto layout = layout_of({{2048, 8192}, {2048, 2048}});
  auto config = offload_config(offload_device::nvme, offload_device::none);
  config.zero.sub_group_size = 1;
  config.zero.offload_param->max_in_cpu = 4096;
  const placement where(layout, config);
  EXPECT_EQ(tiers_of(where, layout, state_kind::working),
            (std::vector<tier>{tier::host, tier::nvme, tier::nvme, tier::nvme}));
  EXPECT_EQ(where.bytes(state_kind::working, tier::host), 2048U * 2);
  EXPECT_EQ(where.where(0, state_kind::master), tier::device) << "max_in_cpu moves the working copy only";
}

TEST(placement, MaxInCpuCountsWholeSubGroups) {
  // sub_group_size 4096 cuts {p0, p1} (4096) and {p2, p3} (4096): 6000 elements hold the first only.
  const auto layout = layout_of({{2048, 2048, 2048, 2048}});
  auto config = offload_config(offload_device::nvme, offload_device::none);
  config.zero.sub_group_size = 4096;
  config.zero.offload_param->max_in_cpu = 6000;
  EXPECT_EQ(tiers_of(placement(layout, config), layout, state_kind::working),
            (std::vector<tier>{tier::host, tier::host, tier::nvme, tier::nvme}));
  config.zero.offload_param->max_in_cpu = 8192;
  EXPECT_EQ(placement(layout, config).bytes(state_kind::working, tier::nvme), 0U) << "all of it fits";
  config.zero.offload_param->max_in_cpu = 0;
  EXPECT_EQ(placement(layout, config).bytes(state_kind::working, tier::host), 0U) << "none of it fits";
}

TEST(placement, SubGroupsCloseOnceTheyReachTheSize) {
  const auto layout = layout_of({{2048, 4096}, {2048, 2048, 2048}});
  const auto groups = sub_groups(layout, 4096);
  ASSERT_EQ(groups.size(), 3U);
  EXPECT_EQ(groups[0].first, 0U);
  EXPECT_EQ(groups[0].last, 2U);  // 2048 + 4096 >= 4096
  EXPECT_EQ(groups[0].shard_numel, 6144U);
  EXPECT_EQ(groups[1].last, 4U);  // 2048 + 2048
  EXPECT_EQ(groups[2].first, 4U);
  EXPECT_EQ(groups[2].shard_numel, 2048U) << "the last one may hold fewer";
  EXPECT_EQ(sub_groups(layout, 1'000'000'000).size(), 1U);
}

TEST(placement, OffloadOptimizerRatioOffloadsTheLastSubGroupsByCount) {
  // Ten shards of 2048 elements, one sub-group each: ratio 0.3 keeps int(0.7 * 10) = 7 sub-groups
  // on the device and puts the last three in host memory.
  const auto layout = layout_of({std::vector<std::uint64_t>(10, 2048)});
  auto config = offload_config(offload_device::none, offload_device::cpu);
  config.zero.sub_group_size = 2048;
  config.zero.offload_optimizer->ratio = 0.3;
  const placement where(layout, config);
  for (const state_kind s : {state_kind::gradient, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    EXPECT_EQ(tiers_of(where, layout, s),
              (std::vector<tier>{tier::device, tier::device, tier::device, tier::device, tier::device, tier::device,
                                 tier::device, tier::host, tier::host, tier::host}))
        << state_kind_name(s);
  }
  EXPECT_EQ(where.bytes(state_kind::working, tier::device), 10U * 2048 * 2) << "the working copy is not moved";

  // Five sub-groups of two shards: int(0.7 * 5) = 3 stay, so 40% of the bytes go to the host:
  // DeepSpeed counts sub-groups, not bytes.
  config.zero.sub_group_size = 4096;
  EXPECT_EQ(placement(layout, config).bytes(state_kind::master, tier::host), 4U * 2048 * 4);
  // One sub-group (the default size): int(0.7 * 1) = 0 stay, all of it goes to the host.
  config.zero.sub_group_size = 1'000'000'000;
  EXPECT_EQ(placement(layout, config).bytes(state_kind::master, tier::device), 0U);
}

TEST(placement, OffloadOptimizerRatioHasNoEffectWithNvme) {
  // DeepSpeed swaps every swappable sub-group to nvme whatever the ratio; CONFIG.md says so.
  const auto layout = layout_of({std::vector<std::uint64_t>(10, 2048)});
  auto config = offload_config(offload_device::none, offload_device::nvme, "/tmp");
  config.zero.sub_group_size = 2048;
  config.zero.offload_optimizer->ratio = 0.3;
  const placement where(layout, config);
  EXPECT_EQ(where.bytes(state_kind::master, tier::device), 0U);
  EXPECT_EQ(where.bytes(state_kind::master, tier::nvme), 10U * 2048 * 4);
  EXPECT_EQ(where.bytes(state_kind::gradient, tier::host), 10U * 2048 * 4) << "the gradient is fp32";
}

TEST(placement, OffloadOptimizerNvmePutsTheGradientInHostMemory) {
  const auto layout = layout_of({{2048, 4096}});
  const placement where(layout, offload_config(offload_device::none, offload_device::nvme, "/tmp"));
  for (const auto& p : layout.parameters()) {
    EXPECT_EQ(where.where(p.id, state_kind::gradient), tier::host);
    EXPECT_EQ(where.where(p.id, state_kind::master), tier::nvme);
    EXPECT_EQ(where.where(p.id, state_kind::exp_avg), tier::nvme);
    EXPECT_EQ(where.where(p.id, state_kind::exp_avg_sq), tier::nvme);
    EXPECT_EQ(where.where(p.id, state_kind::working), tier::device);
  }
}

TEST(placement, ZoePlacementOverridesTheOffloadBlocks) {
  // exp_avg_sq 30% host, 70% nvme over ten equal shards, while offload_optimizer says cpu.
  const auto layout = layout_of({std::vector<std::uint64_t>(10, 2048)});
  auto config = offload_config(offload_device::cpu, offload_device::cpu, "/tmp");
  config.zero.offload_optimizer->nvme_path = "/tmp";
  config.zoe.placement[static_cast<std::size_t>(state_kind::exp_avg_sq)] =
      tier_fractions{.device = 0, .host = 0.3, .nvme = 0.7};
  config.zoe.placement[static_cast<std::size_t>(state_kind::working)] =
      tier_fractions{.device = 1, .host = 0, .nvme = 0};
  const placement where(layout, config);
  EXPECT_EQ(where.bytes(state_kind::exp_avg_sq, tier::host), 3U * 2048 * 4);
  EXPECT_EQ(where.bytes(state_kind::exp_avg_sq, tier::nvme), 7U * 2048 * 4);
  EXPECT_EQ(where.bytes(state_kind::exp_avg, tier::host), 10U * 2048 * 4) << "the others follow the block";
  EXPECT_EQ(where.bytes(state_kind::working, tier::device), 10U * 2048 * 2) << "over offload_param cpu";
  EXPECT_EQ(where.keys(state_kind::exp_avg_sq)[0], "zoe.placement.exp_avg_sq");
  EXPECT_EQ(where.keys(state_kind::exp_avg)[0], "zero_optimization.offload_optimizer.device");
}

TEST(placement, ZoePlacementAppliesBelowStageThree) {
  const auto layout = layout_of({{2048}});
  engine_config config;
  config.zero.stage = 1;
  config.zoe.placement[static_cast<std::size_t>(state_kind::working)] =
      tier_fractions{.device = 0, .host = 1, .nvme = 0};
  EXPECT_EQ(placement(layout, config).where(0, state_kind::working), tier::host);
}

TEST(placement, FractionsAreExactToWithinOneShard) {
  // Unequal shards: 2048, 6144, 2048, 2048 elements of fp32 master; a 50% host share.
  const auto layout = layout_of({{2048, 6144, 2048, 2048}});
  engine_config config;
  config.zoe.placement[static_cast<std::size_t>(state_kind::master)] =
      tier_fractions{.device = 0.5, .host = 0.5, .nvme = 0};
  const placement where(layout, config);
  const std::uint64_t total = 12288U * 4;
  const std::uint64_t shard_max = 6144U * 4;
  const auto host = static_cast<std::int64_t>(where.bytes(state_kind::master, tier::host));
  EXPECT_LE(std::abs(host - static_cast<std::int64_t>(total / 2)), static_cast<std::int64_t>(shard_max));
  EXPECT_EQ(where.bytes(state_kind::master, tier::host) + where.bytes(state_kind::master, tier::device), total);
}

TEST(placement, BadFractionsNameTheirKey) {
  const auto layout = layout_of({{2048}});
  engine_config config;
  config.zoe.placement[static_cast<std::size_t>(state_kind::exp_avg)] = tier_fractions{.device = 0.5, .host = 0.4};
  const std::string sum = message_of([&] { (void)placement(layout, config); });
  EXPECT_NE(sum.find("zoe.placement.exp_avg"), std::string::npos) << sum;
  EXPECT_NE(sum.find("sum to 1"), std::string::npos) << sum;
  config.zoe.placement[static_cast<std::size_t>(state_kind::exp_avg)] = tier_fractions{.device = 1.5, .host = -0.5};
  const std::string range = message_of([&] { (void)placement(layout, config); });
  EXPECT_NE(range.find("zoe.placement.exp_avg.device"), std::string::npos) << range;
}

TEST(placement, NvmeWithoutASwapPathNamesTheKeyThatAskedForIt) {
  const auto layout = layout_of({{2048}});
  engine_config config;
  config.zoe.placement[static_cast<std::size_t>(state_kind::exp_avg_sq)] = tier_fractions{.nvme = 1};
  const std::string text = message_of([&] { (void)placement(layout, config); });
  EXPECT_NE(text.find("zoe.placement.exp_avg_sq"), std::string::npos) << text;
  EXPECT_NE(text.find("zoe.swap.extra_paths"), std::string::npos) << text;
  config.zoe.extra_swap_paths = {"/tmp"};
  EXPECT_EQ(placement(layout, config).where(0, state_kind::exp_avg_sq), tier::nvme);
}

TEST(placement, AnFp32ParameterHasNoSeparateWorkingCopy) {
  const auto layout = layout_of({{2048}}, kernels::dtype::fp32);
  auto config = offload_config(offload_device::cpu, offload_device::nvme, "/tmp");
  const placement where(layout, config);
  EXPECT_EQ(state_bytes(layout.parameter(0), state_kind::working), 0U);
  EXPECT_EQ(state_bytes(layout.parameter(0), state_kind::gradient), 2048U * 4);
  EXPECT_EQ(where.where(0, state_kind::working), where.where(0, state_kind::master))
      << "the master is the working copy";
  EXPECT_EQ(where.bytes(state_kind::working, tier::host), 0U);
}

// offload_param that cannot move an fp32 model (its working copy is the master, which follows
// offload_optimizer) is said, with both keys, rather than dropped without a word.
TEST(placement, OffloadParamThatCannotMoveFp32ParametersIsAWarningNamingBothKeys) {
  const auto fp32 = layout_of({{2048, 4096}}, kernels::dtype::fp32);
  ::testing::internal::CaptureStderr();
  const placement where(fp32, offload_config(offload_device::nvme, offload_device::none, "/tmp"));
  const std::string text = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(where.where(0, state_kind::working), tier::device) << "the master's home serves as the working copy";
  EXPECT_NE(text.find("zero_optimization.offload_param.device"), std::string::npos) << text;
  EXPECT_NE(text.find("zero_optimization.offload_optimizer.device"), std::string::npos) << text;
  EXPECT_NE(text.find("2 fp32 parameters"), std::string::npos) << text;
  EXPECT_NE(text.find("m0.p0"), std::string::npos) << text;

  // Nothing to say when the two blocks agree, or when the parameters have a working copy of their own.
  ::testing::internal::CaptureStderr();
  (void)placement(fp32, offload_config(offload_device::cpu, offload_device::cpu));
  (void)placement(layout_of({{2048}}), offload_config(offload_device::nvme, offload_device::none, "/tmp"));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(placement, PinnedFollowsTheBlockGoverningEachState) {
  const auto layout = layout_of({{2048}});
  auto config = offload_config(offload_device::cpu, offload_device::cpu);
  config.zero.offload_param->pin_memory = false;
  config.zero.offload_optimizer->pin_memory = true;
  const placement where(layout, config);
  EXPECT_FALSE(where.host_pinned(state_kind::working));
  EXPECT_TRUE(where.host_pinned(state_kind::exp_avg));
  engine_config none;
  EXPECT_EQ(placement(layout, none).host_pinned(state_kind::working), offload_param_config{}.pin_memory)
      << "without a block, DeepSpeed's default";
}

TEST(placement, SwapPathsAreEachOnceInOrder) {
  auto config = offload_config(offload_device::nvme, offload_device::nvme, "/a");
  config.zero.offload_optimizer->nvme_path = "/b";
  config.zoe.extra_swap_paths = {"/c", "/a"};
  EXPECT_EQ(swap_paths(config), (std::vector<std::filesystem::path>{"/a", "/b", "/c"}));
  config.zero.stage = 2;
  EXPECT_EQ(swap_paths(config), (std::vector<std::filesystem::path>{"/b", "/c", "/a"}))
      << "offload_param's path is ignored below stage 3";
}

TEST(placement, AnUnknownParameterIsAUsageError) {
  const auto layout = layout_of({{2048}});
  const placement where(layout, engine_config{});
  EXPECT_THROW((void)where.where(1, state_kind::working), usage_error);
}

}  // namespace
}  // namespace zoe::engine
