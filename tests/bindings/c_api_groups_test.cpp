// Parameter groups (zoe_parameter_desc.group, zoe_step_groups) through the C API: each group steps
// with its own learning rate and weight decay as torch.optim.AdamW does (a scalar reference in
// double, up to float rounding); zoe_step is every group at one lr and the configuration's decay;
// bad settings are refused naming the group; the checkpoint keeps the last step's settings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "c_api_rig.hpp"
#include "zoe/zoe.h"

namespace zoe::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Group 0: a and c, group 1: b; an empty group 2 in between group 1 and group 3 (d).
std::vector<c_module> grouped() {
  return {{"layer0", {{"a", {300}, ZOE_FP32, 0, 0}, {"b", {200}, ZOE_FP32, 0, 1}}},
          {"layer1", {{"c", {100}, ZOE_FP32, 0, 0}, {"d", {50}, ZOE_FP32, 0, 3}}}};
}

// torch.optim.AdamW on one element, in double: decoupled decay first, then the bias-corrected update.
struct adamw_reference {
  double p, m = 0, v = 0;
  void step(double g, double lr, double wd, int t, double b1 = 0.9, double b2 = 0.999, double eps = 1e-8) {
    p -= lr * wd * p;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    p -= lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + eps);
  }
};

// Writes seeded starting values into every parameter and a reference element for each value.
void start_with_reference(c_rig& r, std::vector<std::vector<adamw_reference>>& ref) {
  const auto start = r.values(1, 1.0F);
  for (zoe_parameter_id p = 0; p < start.size(); ++p) {
    ASSERT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_PARAMETER, start[p].data(), start[p].size()), ZOE_SUCCESS);
    ref.emplace_back();
    for (const float x : start[p]) ref.back().push_back({.p = x});
  }
}

TEST(groups, EachGroupStepsAsTorchAdamWWithItsOwnLearningRateAndWeightDecay) {
  c_rig r(grouped(), {});
  ASSERT_NE(r.engine(), nullptr);
  std::vector<std::vector<adamw_reference>> ref;
  ASSERT_NO_FATAL_FAILURE(start_with_reference(r, ref));
  const std::uint32_t group_of[4] = {0, 1, 0, 3};
  const zoe_group_hyper settings[2][4] = {{{sizeof(zoe_group_hyper), 0.01, 0.1},
                                           {sizeof(zoe_group_hyper), 0.002, 0.0},
                                           {sizeof(zoe_group_hyper), 5.0, 5.0},
                                           {sizeof(zoe_group_hyper), 0.05, 0.5}},
                                          {{sizeof(zoe_group_hyper), 0.02, 0.2},
                                           {sizeof(zoe_group_hyper), 0.001, 0.01},
                                           {sizeof(zoe_group_hyper), 5.0, 5.0},
                                           {sizeof(zoe_group_hyper), 0.03, 0.0}}};
  for (int t = 1; t <= 2; ++t) {
    const auto grads = r.values(static_cast<std::uint64_t>(10 + t), 0.1F);
    r.micro_batch(grads);
    zoe_step_result result = ZOE_STEP_RESULT_INIT;
    ASSERT_EQ(zoe_step_groups(r.engine(), settings[t - 1], 4, &result), ZOE_SUCCESS) << zoe_last_error();
    for (std::size_t p = 0; p < ref.size(); ++p) {
      const zoe_group_hyper& h = settings[t - 1][group_of[p]];
      for (std::size_t i = 0; i < ref[p].size(); ++i) ref[p][i].step(grads[p][i], h.lr, h.weight_decay, t);
    }
  }
  for (zoe_parameter_id p = 0; p < ref.size(); ++p) {
    const std::vector<float> got = r.read(p, ZOE_STATE_PARAMETER);
    ASSERT_EQ(got.size(), ref[p].size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], ref[p][i].p, 2e-6 * (1 + std::abs(ref[p][i].p))) << "parameter " << p << " element " << i;
    }
  }
  // The checkpoint keeps each group's settings of the last step.
  ASSERT_EQ(zoe_checkpoint_save(r.engine(), r.dir().c_str(), "groups"), ZOE_SUCCESS) << zoe_last_error();
  std::string all;
  for (const auto& f : std::filesystem::directory_iterator(r.dir() / "groups")) {
    std::ifstream in(f.path());
    all += std::string(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_THAT(all, AllOf(HasSubstr("\"groups\""), HasSubstr("0.001"), HasSubstr("0.03")));
  ASSERT_EQ(zoe_checkpoint_load(r.engine(), r.dir().c_str(), "groups"), ZOE_SUCCESS) << zoe_last_error();
}

// Each group with betas and eps of its own, the second step changing them (as a scheduler cycling
// momentum does), against the reference with those settings.
TEST(groups, EachGroupStepsWithItsOwnBetasAndEps) {
  c_rig r(grouped(), {});
  ASSERT_NE(r.engine(), nullptr);
  std::vector<std::vector<adamw_reference>> ref;
  ASSERT_NO_FATAL_FAILURE(start_with_reference(r, ref));
  const std::uint32_t group_of[4] = {0, 1, 0, 3};
  const std::size_t size = sizeof(zoe_group_hyper);
  const zoe_group_hyper settings[2][4] = {{{size, 0.01, 0.1, 0.8, 0.99, 1e-6},
                                           {size, 0.002, 0.0, 0.0, 0.5, 1e-3},
                                           {size, 5.0, 5.0, 0.9, 0.9, 1.0},
                                           {size, 0.05, 0.5, 0.95, 0.9999, 1e-8}},
                                          {{size, 0.02, 0.2, 0.85, 0.98, 1e-5},
                                           {size, 0.001, 0.01, 0.0, 0.5, 1e-3},
                                           {size, 5.0, 5.0, 0.9, 0.9, 1.0},
                                           {size, 0.03, 0.0, 0.6, 0.7, 0.1}}};
  for (int t = 1; t <= 2; ++t) {
    const auto grads = r.values(static_cast<std::uint64_t>(10 + t), 0.1F);
    r.micro_batch(grads);
    zoe_step_result result = ZOE_STEP_RESULT_INIT;
    ASSERT_EQ(zoe_step_groups(r.engine(), settings[t - 1], 4, &result), ZOE_SUCCESS) << zoe_last_error();
    for (std::size_t p = 0; p < ref.size(); ++p) {
      const zoe_group_hyper& h = settings[t - 1][group_of[p]];
      for (std::size_t i = 0; i < ref[p].size(); ++i) {
        ref[p][i].step(grads[p][i], h.lr, h.weight_decay, t, h.beta1, h.beta2, h.eps);
      }
    }
  }
  for (zoe_parameter_id p = 0; p < ref.size(); ++p) {
    const std::vector<float> got = r.read(p, ZOE_STATE_PARAMETER);
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], ref[p][i].p, 2e-6 * (1 + std::abs(ref[p][i].p))) << "parameter " << p << " element " << i;
    }
  }
  // The checkpoint gives each group's betas and eps back.
  ASSERT_EQ(zoe_checkpoint_save(r.engine(), r.dir().c_str(), "betas"), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_checkpoint_load(r.engine(), r.dir().c_str(), "betas"), ZOE_SUCCESS) << zoe_last_error();
  zoe_group_hyper back[4] = {ZOE_GROUP_HYPER_INIT, ZOE_GROUP_HYPER_INIT, ZOE_GROUP_HYPER_INIT, ZOE_GROUP_HYPER_INIT};
  ASSERT_EQ(zoe_checkpoint_groups(r.engine(), back, 4), ZOE_SUCCESS) << zoe_last_error();
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(back[g].beta1, settings[1][g].beta1) << "group " << g;
    EXPECT_EQ(back[g].beta2, settings[1][g].beta2) << "group " << g;
    EXPECT_EQ(back[g].eps, settings[1][g].eps) << "group " << g;
  }
}

// A caller built against a zoe.h whose struct ended at weight_decay: its array is read with its
// own stride, and its groups (like eps 0 in today's struct) step with the configuration's betas
// and eps.
TEST(groups, AnOlderShorterStructStepsWithTheConfiguredBetasAndEps) {
  struct older_group_hyper {
    std::size_t struct_size;
    double lr;
    double weight_decay;
  };
  c_rig older(grouped(), {});
  c_rig today(grouped(), {});
  ASSERT_NE(older.engine(), nullptr);
  ASSERT_NE(today.engine(), nullptr);
  const auto grads = older.values(3, 0.1F);
  older.micro_batch(grads);
  today.micro_batch(grads);
  older_group_hyper old[4];
  zoe_group_hyper now[4];
  for (int g = 0; g < 4; ++g) {
    old[g] = {sizeof(older_group_hyper), 0.01 * (g + 1), 0.01};
    now[g] = ZOE_GROUP_HYPER_INIT;
    now[g].lr = 0.01 * (g + 1);
    now[g].weight_decay = 0.01;
  }
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  ASSERT_EQ(zoe_step_groups(older.engine(), reinterpret_cast<const zoe_group_hyper*>(old), 4, &result), ZOE_SUCCESS)
      << zoe_last_error();
  ASSERT_EQ(zoe_step_groups(today.engine(), now, 4, &result), ZOE_SUCCESS) << zoe_last_error();
  for (zoe_parameter_id p = 0; p < 4; ++p) {
    EXPECT_EQ(older.read(p, ZOE_STATE_PARAMETER), today.read(p, ZOE_STATE_PARAMETER)) << "parameter " << p;
  }
}

TEST(groups, ZoeStepIsEveryGroupAtOneRateAndTheConfiguredDecay) {
  c_rig one(grouped(), {});
  c_rig each(grouped(), {});
  ASSERT_NE(one.engine(), nullptr);
  ASSERT_NE(each.engine(), nullptr);
  const auto grads = one.values(3, 0.1F);
  one.micro_batch(grads);
  each.micro_batch(grads);
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  ASSERT_EQ(zoe_step(one.engine(), 0.01, &result), ZOE_SUCCESS) << zoe_last_error();
  zoe_group_hyper h[4];
  for (zoe_group_hyper& g : h) g = {sizeof(zoe_group_hyper), 0.01, 0.01};  // the rig's weight_decay
  ASSERT_EQ(zoe_step_groups(each.engine(), h, 4, &result), ZOE_SUCCESS) << zoe_last_error();
  for (zoe_parameter_id p = 0; p < 4; ++p)
    EXPECT_EQ(one.read(p, ZOE_STATE_PARAMETER), each.read(p, ZOE_STATE_PARAMETER));
}

TEST(groups, BadSettingsAreRefusedNamingTheGroupAndChangeNothing) {
  c_rig r(grouped(), {});
  ASSERT_NE(r.engine(), nullptr);
  r.micro_batch(r.values(3, 0.1F));
  const std::vector<float> before = r.read(0, ZOE_STATE_PARAMETER);
  zoe_group_hyper h[4];
  for (zoe_group_hyper& g : h) g = {sizeof(zoe_group_hyper), 0.01, 0.0};
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  EXPECT_EQ(zoe_step_groups(r.engine(), h, 3, &result), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr("count is 3"), HasSubstr("4 parameter groups")));
  h[2].weight_decay = -1;
  EXPECT_EQ(zoe_step_groups(r.engine(), h, 4, &result), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr("weight_decay"), HasSubstr("group 2")));
  h[2].weight_decay = std::numeric_limits<double>::infinity();
  EXPECT_EQ(zoe_step_groups(r.engine(), h, 4, &result), ZOE_ERROR_USAGE);
  h[2].weight_decay = 0;
  h[3].lr = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(zoe_step_groups(r.engine(), h, 4, &result), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr("lr"), HasSubstr("group 3")));
  h[3].lr = 0.01;
  h[1].struct_size = sizeof(size_t);
  EXPECT_EQ(zoe_step_groups(r.engine(), h, 4, &result), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("groups[1]"));
  h[0].struct_size = sizeof(size_t);
  EXPECT_EQ(zoe_step_groups(r.engine(), h, 4, &result), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("groups[0]"));
  h[0].struct_size = sizeof(zoe_group_hyper);
  h[1].struct_size = sizeof(zoe_group_hyper);
  const auto refused = [&](int g, double beta1, double beta2, double eps, const char* words) {
    h[g].beta1 = beta1;
    h[g].beta2 = beta2;
    h[g].eps = eps;
    EXPECT_EQ(zoe_step_groups(r.engine(), h, 4, &result), ZOE_ERROR_USAGE) << words;
    EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr(words), HasSubstr(::testing::PrintToString(g))));
    h[g].beta1 = h[g].beta2 = h[g].eps = 0;
  };
  refused(1, 1.0, 0.999, 1e-8, "betas[0] 1 of parameter group 1");
  refused(2, 0.9, 0.99999999, 1e-8, "betas[1]");  // 1 as a float
  refused(3, -0.1, 0.999, 1e-8, "betas[0] -0.1");
  refused(1, 0.9, 0.999, -1e-8, "eps -1e-08 of parameter group 1");
  refused(1, 0.9, 0.999, 1e-50, "eps 1e-50");  // 0 as a float
  refused(1, 0.9, std::numeric_limits<double>::quiet_NaN(), 1e-8, "betas[1] nan");
  EXPECT_EQ(r.read(0, ZOE_STATE_PARAMETER), before);
  EXPECT_EQ(zoe_step_groups(r.engine(), h, 4, &result), ZOE_SUCCESS) << zoe_last_error();
}

TEST(groups, AGroupAboveTheBoundIsRefusedNamingTheParameterAndTheBound) {
  zoe_model* model = nullptr;
  ASSERT_EQ(zoe_model_create(&model), ZOE_SUCCESS);
  zoe_module_id m = 0;
  ASSERT_EQ(zoe_model_add_module(model, "m", &m), ZOE_SUCCESS);
  const std::uint64_t shape[1] = {8};
  zoe_parameter_desc d = ZOE_PARAMETER_DESC_INIT;
  d.name = "w";
  d.ndim = 1;
  d.shape = shape;
  d.group = ZOE_MAX_PARAMETER_GROUP + 1;
  zoe_parameter_id p = 0;
  EXPECT_EQ(zoe_model_add_parameter(model, m, &d, &p), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr("'w'"), HasSubstr("group is 65536"), HasSubstr("above 65535")));
  d.group = 4000000000U;  // a parameter id or a pointer's bits, say
  EXPECT_EQ(zoe_model_add_parameter(model, m, &d, &p), ZOE_ERROR_USAGE);
  d.group = ZOE_MAX_PARAMETER_GROUP;
  EXPECT_EQ(zoe_model_add_parameter(model, m, &d, &p), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(p, 0U) << "the refused ones were not added";
  zoe_model_destroy(model);
}

}  // namespace
}  // namespace zoe::testing
