// Frozen parameters (zoe_parameter_desc.frozen) through the C API: they keep their value through
// steps, take no gradient (a NULL buffer, a module of them fetched for backward needs no hand-in),
// and the trainable ones step exactly as in a model without them, at every stage and placement;
// the footprint plan counts no gradient or optimizer memory for them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <tuple>
#include <vector>

#include "c_api_rig.hpp"
#include "zoe/zoe.h"

namespace zoe::testing {
namespace {

using ::testing::HasSubstr;

// embed (frozen, bf16) and head.w (trainable, bf16) share a module; norm is all frozen (fp32).
std::vector<c_module> with_frozen() {
  return {{"layer0", {{"embed", {37, 53}, ZOE_BF16, 1}, {"layer0.w", {53, 29}, ZOE_BF16}}},
          {"norm", {{"norm.scale", {29}, ZOE_FP32, 1}}},
          {"head", {{"head.w", {29, 17}, ZOE_FP32}, {"head.b", {17}, ZOE_FP32}}}};
}
// The same trainable parameters alone.
std::vector<c_module> trainable_only() {
  return {{"layer0", {{"layer0.w", {53, 29}, ZOE_BF16}}},
          {"head", {{"head.w", {29, 17}, ZOE_FP32}, {"head.b", {17}, ZOE_FP32}}}};
}
// with_frozen()'s id of each of trainable_only()'s parameters, and its frozen ones.
const std::vector<zoe_parameter_id> trainable_ids = {1, 3, 4};
const std::vector<zoe_parameter_id> frozen_ids = {0, 2};

void write_all(const c_rig& r, const std::vector<std::vector<float>>& values) {
  for (zoe_parameter_id p = 0; p < values.size(); ++p) {
    ASSERT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_PARAMETER, values[p].data(), values[p].size()), ZOE_SUCCESS)
        << zoe_last_error();
  }
}

class frozen_layouts : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(frozen_layouts, FrozenKeepTheirValueAndTheOthersStepAsWithoutThem) {
  const c_rig_options o{.placement = std::get<1>(GetParam()), .stage = std::get<0>(GetParam())};
  c_rig mixed(with_frozen(), o);
  c_rig alone(trainable_only(), o);
  ASSERT_NE(mixed.engine(), nullptr);
  ASSERT_NE(alone.engine(), nullptr);
  const auto values = mixed.values(1, 1.0F);
  write_all(mixed, values);
  std::vector<std::vector<float>> alone_values;
  for (const zoe_parameter_id p : trainable_ids) alone_values.push_back(values[p]);
  write_all(alone, alone_values);
  std::vector<std::vector<float>> frozen_before;
  for (const zoe_parameter_id p : frozen_ids) frozen_before.push_back(mixed.read(p, ZOE_STATE_PARAMETER));

  for (std::uint64_t step = 0; step < 2; ++step) {
    const auto grads = mixed.values(10 + step, 0.05F);
    std::vector<std::vector<float>> alone_grads;
    for (const zoe_parameter_id p : trainable_ids) alone_grads.push_back(grads[p]);
    mixed.micro_batch(grads);
    alone.micro_batch(alone_grads);
    EXPECT_EQ(mixed.step(0.01).grad_norm, alone.step(0.01).grad_norm);
  }
  for (std::size_t i = 0; i < trainable_ids.size(); ++i) {
    const auto id = static_cast<zoe_parameter_id>(i);
    for (const zoe_state s : {ZOE_STATE_PARAMETER, ZOE_STATE_EXP_AVG, ZOE_STATE_EXP_AVG_SQ}) {
      EXPECT_EQ(mixed.read(trainable_ids[i], s), alone.read(id, s)) << "parameter " << i << " state " << s;
    }
  }
  for (std::size_t i = 0; i < frozen_ids.size(); ++i) {
    EXPECT_EQ(mixed.read(frozen_ids[i], ZOE_STATE_PARAMETER), frozen_before[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(stages, frozen_layouts,
                         ::testing::Values(std::make_tuple(3, "device"), std::make_tuple(3, "cpu"),
                                           std::make_tuple(3, "nvme"), std::make_tuple(2, "device"),
                                           std::make_tuple(1, "device"), std::make_tuple(1, "cpu"),
                                           std::make_tuple(0, "device")));

TEST(frozen, HasOnlyItsValueRoundedToItsWorkingTypeAndTakesNoGradient) {
  c_rig r(with_frozen(), {});
  ASSERT_NE(r.engine(), nullptr);
  const zoe_parameter_id embed = 0;
  std::vector<float> v = r.values(2, 1.0F)[embed];
  ASSERT_EQ(zoe_write_state(r.engine(), embed, ZOE_STATE_PARAMETER, v.data(), v.size()), ZOE_SUCCESS)
      << zoe_last_error();
  std::vector<float> rounded = v;
  for (float& x : rounded) x = bf16_rounded(x);
  EXPECT_EQ(r.read(embed, ZOE_STATE_PARAMETER), rounded);
  std::vector<float> out(v.size());
  for (const zoe_state s : {ZOE_STATE_GRADIENT, ZOE_STATE_EXP_AVG, ZOE_STATE_EXP_AVG_SQ}) {
    EXPECT_EQ(zoe_read_state(r.engine(), embed, s, out.data(), out.size()), ZOE_ERROR_USAGE) << s;
    EXPECT_THAT(zoe_last_error(), HasSubstr("embed"));
  }
  EXPECT_EQ(zoe_write_state(r.engine(), embed, ZOE_STATE_EXP_AVG, v.data(), v.size()), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("frozen"));

  // layer0 has a trainable parameter: fetched for backward, it must hand its gradients in; norm
  // (all frozen) need not.
  ASSERT_EQ(zoe_begin_micro_batch(r.engine()), ZOE_SUCCESS);
  ASSERT_EQ(zoe_fetch(r.engine(), 1, ZOE_PASS_BACKWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_release(r.engine(), 1, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_fetch(r.engine(), 0, ZOE_PASS_BACKWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  void* buffers[2] = {&out, &out};
  ASSERT_EQ(zoe_module_gradients(r.engine(), 0, r.stream(), buffers, 2), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(buffers[0], nullptr);
  EXPECT_NE(buffers[1], nullptr);
  EXPECT_EQ(zoe_release(r.engine(), 0, r.stream()), ZOE_ERROR_USAGE);
  ASSERT_EQ(zoe_reduce_gradients(r.engine(), 0, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_release(r.engine(), 0, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_fetch(r.engine(), 2, ZOE_PASS_BACKWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_release(r.engine(), 2, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(zoe_end_micro_batch(r.engine()), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("head"));
}

// The footprint of the same model with some parameters frozen, against all trainable.
zoe_footprint plan_of(const std::vector<c_module>& modules, const std::string& placement) {
  zoe_model* model = make_model(modules);
  const std::string json = c_rig::config({.placement = placement}, "/tmp");
  zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
  e.config_json = json.c_str();
  e.model = model;
  zoe_footprint f = ZOE_FOOTPRINT_INIT;
  EXPECT_EQ(zoe_footprint_plan(&e, 1, &f), ZOE_SUCCESS) << zoe_last_error();
  zoe_model_destroy(model);
  return f;
}

std::vector<c_module> thawed(std::vector<c_module> modules) {
  for (c_module& m : modules) {
    for (c_parameter& p : m.parameters) p.frozen = 0;
  }
  return modules;
}

TEST(frozen, TheFootprintPlanCountsNoGradientOrOptimizerMemoryForThem) {
  // All on the device: a frozen bf16 parameter saves its master, moments and gradient (14 bytes an
  // element of the 16 it costs trainable); a frozen fp32 one its moments and gradient.
  const zoe_footprint on_device = plan_of(with_frozen(), "device");
  const zoe_footprint on_device_trainable = plan_of(thawed(with_frozen()), "device");
  EXPECT_LT(on_device.device_bytes, on_device_trainable.device_bytes);
  const std::uint64_t saved = on_device_trainable.device_bytes - on_device.device_bytes;
  EXPECT_GE(saved, std::uint64_t{37 * 53} * 14 + 29 * 12);
  // Offloaded to pinned host memory: the optimizer states there shrink alike.
  const zoe_footprint on_cpu = plan_of(with_frozen(), "cpu");
  const zoe_footprint on_cpu_trainable = plan_of(thawed(with_frozen()), "cpu");
  EXPECT_GE(on_cpu_trainable.pinned_bytes - on_cpu.pinned_bytes, std::uint64_t{37 * 53} * 12 + 29 * 8);
}

TEST(frozen, ACallerBuiltBeforeTheFieldGetsTrainableParameters) {
  zoe_model* model = nullptr;
  ASSERT_EQ(zoe_model_create(&model), ZOE_SUCCESS);
  zoe_module_id m = 0;
  ASSERT_EQ(zoe_model_add_module(model, "m", &m), ZOE_SUCCESS);
  const std::uint64_t shape[1] = {8};
  zoe_parameter_desc d = ZOE_PARAMETER_DESC_INIT;
  d.struct_size = offsetof(zoe_parameter_desc, frozen);  // the struct as it was before `frozen`
  d.name = "w";
  d.ndim = 1;
  d.shape = shape;
  d.frozen = 1;  // past the caller's struct: not read
  zoe_parameter_id p = 0;
  ASSERT_EQ(zoe_model_add_parameter(model, m, &d, &p), ZOE_SUCCESS) << zoe_last_error();
  d.struct_size = sizeof d;
  d.name = "v";
  d.frozen = 2;
  EXPECT_EQ(zoe_model_add_parameter(model, m, &d, &p), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("frozen"));
  const std::string json = c_rig::config({}, "/tmp");
  zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
  e.config_json = json.c_str();
  e.model = model;
  zoe_engine* engine = nullptr;
  ASSERT_EQ(zoe_engine_create(&e, &engine), ZOE_SUCCESS) << zoe_last_error();
  zoe_model_destroy(model);
  std::vector<float> moment(8);
  EXPECT_EQ(zoe_read_state(engine, 0, ZOE_STATE_EXP_AVG, moment.data(), moment.size()), ZOE_SUCCESS)
      << zoe_last_error();
  EXPECT_EQ(zoe_engine_destroy(engine), ZOE_SUCCESS);
}

}  // namespace
}  // namespace zoe::testing
