// zoe_announce_step_groups through the C API: under a learning rate that changes every step, the
// step inside backward speculates with the announced settings and the step commits it (without the
// announcement every speculation is dropped); a step given other settings than announced drops it;
// either way every state is bit for bit the step's after backward (zoe.optimizer_in_backward off).
// Bad settings are refused naming what is wrong, changing nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "c_api_rig.hpp"
#include "zoe/zoe.h"

namespace zoe::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Two groups (a and c in group 0, b in group 1), every state on NVMe: each shard may be speculated.
std::vector<c_module> two_groups() {
  return {{"layer0", {{"a", {300}, ZOE_FP32, 0, 0}, {"b", {200}, ZOE_FP32, 0, 1}}},
          {"layer1", {{"c", {100}, ZOE_FP32, 0, 0}}}};
}

constexpr zoe_parameter_id parameters = 3;

// Step t's settings: a warm-up, so that no step's settings are the last step's.
std::vector<zoe_group_hyper> warm_up(int t) {
  return {{sizeof(zoe_group_hyper), 0.001 * t, 0.01}, {sizeof(zoe_group_hyper), 0.0005 * t, 0.0}};
}

nlohmann::json speculation(zoe_engine* e) {
  std::size_t length = 0;
  EXPECT_EQ(zoe_statistics(e, nullptr, 0, &length), ZOE_SUCCESS) << zoe_last_error();
  std::string text(length, '\0');
  EXPECT_EQ(zoe_statistics(e, text.data(), text.size() + 1, &length), ZOE_SUCCESS) << zoe_last_error();
  return nlohmann::json::parse(text.c_str())["optimizer"]["speculation"];
}

void expect_same_bits(const c_rig& a, const c_rig& b, const std::string& when) {
  for (zoe_parameter_id p = 0; p < parameters; ++p) {
    for (const zoe_state s : {ZOE_STATE_PARAMETER, ZOE_STATE_EXP_AVG, ZOE_STATE_EXP_AVG_SQ}) {
      const std::vector<float> x = a.read(p, s);
      const std::vector<float> y = b.read(p, s);
      ASSERT_EQ(x.size(), y.size());
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
          << "parameter " << p << " state " << s << " " << when;
    }
  }
}

void announce(const c_rig& r, const std::vector<zoe_group_hyper>& groups) {
  ASSERT_EQ(zoe_announce_step_groups(r.engine(), groups.data(), groups.size()), ZOE_SUCCESS) << zoe_last_error();
}

void step(const c_rig& r, const std::vector<zoe_group_hyper>& groups) {
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  ASSERT_EQ(zoe_step_groups(r.engine(), groups.data(), groups.size(), &result), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(result.skipped, 0);
}

TEST(announce, TheAnnouncedSettingsAreCommittedOtherSettingsDroppedBitForBitTheStepAfterBackward) {
  const c_rig_options nvme{.placement = "nvme"};
  c_rig announced(two_groups(), nvme);
  c_rig unannounced(two_groups(), nvme);
  c_rig after(two_groups(), {.placement = "nvme", .overrides = R"({"zoe": {"optimizer_in_backward": false}})"});
  ASSERT_NE(announced.engine(), nullptr);
  ASSERT_NE(unannounced.engine(), nullptr);
  ASSERT_NE(after.engine(), nullptr);
  const auto run = [&](int t, const auto& announce_in_micro_batch) {
    const auto grads = announced.values(static_cast<std::uint64_t>(20 + t), 0.01F);
    announce_in_micro_batch(grads);
    unannounced.micro_batch(grads);
    after.micro_batch(grads);
    for (const c_rig* r : {&announced, &unannounced, &after}) step(*r, warm_up(t));
    expect_same_bits(announced, after, "after step " + std::to_string(t) + " (announced)");
    expect_same_bits(unannounced, after, "after step " + std::to_string(t) + " (not announced)");
  };
  // Step 1: announced before the micro-batch; step 2: during it, before backward hands in a
  // gradient (the speculation is armed then). Both are committed.
  run(1, [&](const auto& grads) {
    announce(announced, warm_up(1));
    announced.micro_batch(grads);
  });
  run(2, [&](const auto& grads) {
    announced.forward();
    announce(announced, warm_up(2));
    announced.backward(grads);
  });
  EXPECT_EQ(speculation(announced.engine())["committed"], 2 * parameters);
  EXPECT_EQ(speculation(announced.engine())["dropped"], 0U);
  // Step 3: the step is given another lr for group 1 than announced: b is dropped, a and c (group
  // 0, as announced) are committed. Step 4: the announcement was step 3's alone, so step 4
  // speculates with step 3's settings again: all three dropped.
  run(3, [&](const auto& grads) {
    std::vector<zoe_group_hyper> other = warm_up(3);
    other[1].lr *= 2;  // not what the step is given
    announce(announced, other);
    announced.micro_batch(grads);
  });
  run(4, [&](const auto& grads) { announced.micro_batch(grads); });
  EXPECT_EQ(speculation(announced.engine())["committed"], 2 * parameters + 2);
  EXPECT_EQ(speculation(announced.engine())["dropped"], 1 + parameters);
  // Without the announcement the changing learning rate drops every speculation.
  EXPECT_EQ(speculation(unannounced.engine())["speculated"], 4 * parameters);
  EXPECT_EQ(speculation(unannounced.engine())["committed"], 0U);
  EXPECT_EQ(speculation(unannounced.engine())["dropped"], 4 * parameters);
  EXPECT_EQ(speculation(after.engine())["speculated"], 0U);
}

TEST(announce, BadSettingsAreRefusedNamingWhatIsWrongAndChangeNothing) {
  c_rig r(two_groups(), {.placement = "nvme"});
  ASSERT_NE(r.engine(), nullptr);
  std::vector<zoe_group_hyper> groups = warm_up(1);
  EXPECT_EQ(zoe_announce_step_groups(r.engine(), groups.data(), 1), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(),
              AllOf(HasSubstr("zoe_announce_step_groups"), HasSubstr("count is 1"), HasSubstr("2 parameter groups")));
  EXPECT_EQ(zoe_announce_step_groups(r.engine(), nullptr, 2), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("groups"));
  groups[1].lr = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(zoe_announce_step_groups(r.engine(), groups.data(), 2), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr("lr nan"), HasSubstr("parameter group 1")));
  groups = warm_up(1);
  groups[0].weight_decay = -1;
  EXPECT_EQ(zoe_announce_step_groups(r.engine(), groups.data(), 2), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr("weight_decay -1"), HasSubstr("parameter group 0")));
  groups = warm_up(1);
  groups[1].struct_size = 8;
  EXPECT_EQ(zoe_announce_step_groups(r.engine(), groups.data(), 2), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("groups[1]"));
  // Nothing was announced: the step speculates with the configuration's settings (lr 0.01, weight
  // decay 0.01 in every group) and commits them.
  r.micro_batch(r.values(1, 0.01F));
  step(r, {{sizeof(zoe_group_hyper), 0.01, 0.01}, {sizeof(zoe_group_hyper), 0.01, 0.01}});
  EXPECT_EQ(speculation(r.engine())["committed"], parameters);
}

}  // namespace
}  // namespace zoe::testing
