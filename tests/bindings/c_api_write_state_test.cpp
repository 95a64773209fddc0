// zoe_write_state through the C API: a parameter's value and Adam moments set between steps and
// read back on every placement (device, cpu, nvme), fp32 and bf16 working copies; what it refuses
// leaves the states as they were.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "c_api_rig.hpp"
#include "zoe/zoe.h"

namespace zoe::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::vector<c_module> two_modules = {
    {"layer0", {{"layer0.w", {37, 53}, ZOE_BF16}, {"layer0.b", {53}, ZOE_FP32}}},
    {"layer1", {{"layer1.w", {53, 29}, ZOE_FP32}, {"layer1.b", {29}, ZOE_BF16}}}};

class write_state_placements : public ::testing::TestWithParam<const char*> {};

TEST_P(write_state_placements, ValuesAndMomentsRoundTrip) {
  c_rig r(two_modules, {.placement = GetParam()});
  ASSERT_NE(r.engine(), nullptr);
  const auto value = r.values(1, 2.0F);
  const auto avg = r.values(2, 0.1F);
  auto avg_sq = r.values(3, 0.1F);
  for (auto& v : avg_sq) {
    for (float& x : v) x *= x;
  }
  for (zoe_parameter_id p = 0; p < r.parameter_count(); ++p) {
    ASSERT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_PARAMETER, value[p].data(), value[p].size()), ZOE_SUCCESS)
        << zoe_last_error();
    ASSERT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_EXP_AVG, avg[p].data(), avg[p].size()), ZOE_SUCCESS)
        << zoe_last_error();
    ASSERT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_EXP_AVG_SQ, avg_sq[p].data(), avg_sq[p].size()), ZOE_SUCCESS)
        << zoe_last_error();
  }
  for (zoe_parameter_id p = 0; p < r.parameter_count(); ++p) {
    EXPECT_EQ(r.read(p, ZOE_STATE_PARAMETER), value[p]) << p;
    EXPECT_EQ(r.read(p, ZOE_STATE_EXP_AVG), avg[p]) << p;
    EXPECT_EQ(r.read(p, ZOE_STATE_EXP_AVG_SQ), avg_sq[p]) << p;
  }
  // A step runs from the written states: with lr 0 and no decay, Adam leaves the value as written.
  r.micro_batch(r.values(4, 0.01F));
  r.step(0.0);
  for (zoe_parameter_id p = 0; p < r.parameter_count(); ++p) EXPECT_EQ(r.read(p, ZOE_STATE_PARAMETER), value[p]) << p;
}

INSTANTIATE_TEST_SUITE_P(placements, write_state_placements, ::testing::Values("device", "cpu", "nvme"));

TEST(write_state, RefusesTheGradientBadValuesAndCallsInsideAMicroBatch) {
  c_rig r(two_modules, {});
  ASSERT_NE(r.engine(), nullptr);
  const zoe_parameter_id p = 1;
  const std::vector<float> before = r.read(p, ZOE_STATE_PARAMETER);
  std::vector<float> values(before.size(), 0.25F);
  EXPECT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_GRADIENT, values.data(), values.size()), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("gradient"));
  EXPECT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_PARAMETER, values.data(), values.size() - 1), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("layer0.b"));
  EXPECT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_PARAMETER, nullptr, values.size()), ZOE_ERROR_USAGE);
  EXPECT_EQ(zoe_write_state(r.engine(), 99, ZOE_STATE_PARAMETER, values.data(), values.size()), ZOE_ERROR_USAGE);
  values[5] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_PARAMETER, values.data(), values.size()), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr("layer0.b"), HasSubstr("index 5")));
  values[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_EXP_AVG_SQ, values.data(), values.size()), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("index 5"));
  values[5] = 0.25F;
  ASSERT_EQ(zoe_begin_micro_batch(r.engine()), ZOE_SUCCESS);
  EXPECT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_PARAMETER, values.data(), values.size()), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("micro-batch"));
  ASSERT_EQ(zoe_end_micro_batch(r.engine()), ZOE_SUCCESS);
  EXPECT_EQ(r.read(p, ZOE_STATE_PARAMETER), before);
}

}  // namespace
}  // namespace zoe::testing
