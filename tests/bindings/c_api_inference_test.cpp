// Inference fetches through the C API (zoe_fetch with ZOE_PASS_FORWARD outside a micro-batch): they
// hand out the parameters' values, take no gradient, count as no micro-batch, and leave training
// exactly as it is without them, the prefetch trace included; while one is open the calls that
// need the engine between steps are refused naming its module.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "c_api_rig.hpp"
#include "zoe/zoe.h"

namespace zoe::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::vector<c_module> three_modules = {
    {"embed", {{"embed.w", {37, 53}, ZOE_BF16}}},
    {"layer", {{"layer.w", {53, 29}}, {"layer.b", {29}, ZOE_BF16}}},
    {"head", {{"head.w", {29, 17}}, {"head.b", {17}}}},
};

// The module-fetch figures of zoe_statistics (fetches, gathers, prefetches, ...).
nlohmann::json fetch_figures(const c_rig& r) {
  std::size_t length = 0;
  EXPECT_EQ(zoe_statistics(r.engine(), nullptr, 0, &length), ZOE_SUCCESS) << zoe_last_error();
  std::string text(length + 1, '\0');
  EXPECT_EQ(zoe_statistics(r.engine(), text.data(), text.size(), &length), ZOE_SUCCESS) << zoe_last_error();
  text.resize(length);
  return nlohmann::json::parse(text).at("fetches");
}

// The value of parameter `p` as fetched (its working dtype widened to fp32).
std::vector<float> fetched_value(const c_rig& r, zoe_parameter_id p) {
  void* address = nullptr;
  EXPECT_EQ(zoe_parameter_address(r.engine(), p, &address), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(zoe_stream_synchronize(r.stream()), ZOE_SUCCESS);  // the host device: host memory
  std::vector<float> out(r.numel(p));
  for (std::size_t i = 0; i < out.size() && address != nullptr; ++i) {
    if (r.dtype(p) == ZOE_FP32) {
      out[i] = static_cast<const float*>(address)[i];
    } else {
      const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(address)[i]) << 16;
      std::memcpy(&out[i], &bits, sizeof bits);
    }
  }
  return out;
}

// An evaluation pass in an order unlike training's (head and embed open at once, then layer, then
// head again), each fetched value checked against the master's (rounded to the working dtype).
void evaluate(const c_rig& r) {
  std::vector<std::vector<float>> expected;
  for (zoe_parameter_id p = 0; p < r.parameter_count(); ++p) expected.push_back(r.read(p, ZOE_STATE_PARAMETER));
  const auto check = [&](zoe_parameter_id p) {
    std::vector<float> want = expected[p];
    if (r.dtype(p) == ZOE_BF16) {
      for (float& x : want) x = bf16_rounded(x);
    }
    EXPECT_EQ(fetched_value(r, p), want) << "parameter " << p;
  };
  ASSERT_EQ(zoe_fetch(r.engine(), 2, ZOE_PASS_FORWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_fetch(r.engine(), 0, ZOE_PASS_FORWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  check(3);
  check(0);
  ASSERT_EQ(zoe_release(r.engine(), 2, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_release(r.engine(), 0, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_fetch(r.engine(), 1, ZOE_PASS_FORWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  check(1);
  check(2);
  ASSERT_EQ(zoe_release(r.engine(), 1, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_fetch(r.engine(), 2, ZOE_PASS_FORWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  check(4);
  ASSERT_EQ(zoe_release(r.engine(), 2, r.stream()), ZOE_SUCCESS) << zoe_last_error();
}
constexpr std::uint64_t evaluation_fetches = 4;
constexpr std::uint64_t evaluation_gathers = 7;  // every parameter once, head's two twice

class inference_layouts : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

TEST_P(inference_layouts, TrainingAroundInferenceIsBitIdenticalToTrainingWithout) {
  const c_rig_options o{.placement = std::get<1>(GetParam()),
                        .stage = std::get<0>(GetParam()),
                        .overrides = R"({"gradient_accumulation_steps": 2})"};
  c_rig with(three_modules, o);
  c_rig without(three_modules, o);
  ASSERT_NE(with.engine(), nullptr);
  ASSERT_NE(without.engine(), nullptr);
  // Before the first step (no trace recorded yet), after a step (a trace to follow), and between
  // two micro-batches of a step.
  evaluate(with);
  for (std::uint64_t step = 0; step < 3; ++step) {
    for (std::uint64_t k = 0; k < 2; ++k) {
      if (step == 1 && k == 1) evaluate(with);
      const auto grads = with.values(10 + step * 2 + k, 0.05F);
      with.micro_batch(grads);
      without.micro_batch(grads);
    }
    const zoe_step_result a = with.step(0.01);
    const zoe_step_result b = without.step(0.01);
    EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << step;
    EXPECT_EQ(a.optimizer_steps, b.optimizer_steps) << "inference counts as no micro-batch";
    if (step < 2) evaluate(with);
  }
  for (zoe_parameter_id p = 0; p < with.parameter_count(); ++p) {
    for (const zoe_state s : {ZOE_STATE_PARAMETER, ZOE_STATE_EXP_AVG, ZOE_STATE_EXP_AVG_SQ}) {
      EXPECT_EQ(with.read(p, s), without.read(p, s)) << "parameter " << p << " state " << s;
    }
  }
  // The evaluations added their own fetches and nothing else: the training steps prefetched as
  // without them (at stage 3, where every fetch gathers: below it an evaluation's gathers stay on the
  // device for training to find, which then needs no prefetch), so the trace neither learnt the
  // evaluations' order nor was departed from. The policy's prefetches are counted with those the
  // arena's momentary fill dropped (prefetch_backoffs, gathered at their use instead): at world size
  // 1 that fill is timing.
  const nlohmann::json a = fetch_figures(with);
  const nlohmann::json b = fetch_figures(without);
  const auto count = [](const nlohmann::json& j, const char* key) { return j.at(key).get<std::uint64_t>(); };
  const std::uint64_t evaluations = 4;
  EXPECT_EQ(count(a, "fetches"), count(b, "fetches") + evaluations * evaluation_fetches);
  if (o.stage == 3) {
    EXPECT_GT(count(b, "prefetches"), 0U) << "the steps after the first follow a trace";
    EXPECT_EQ(count(a, "prefetches") + count(a, "prefetch_backoffs"),
              count(b, "prefetches") + count(b, "prefetch_backoffs"));
    EXPECT_EQ(count(a, "gathers") + count(a, "prefetches"),
              count(b, "gathers") + count(b, "prefetches") + evaluations * evaluation_gathers);
  }
}

INSTANTIATE_TEST_SUITE_P(stages, inference_layouts,
                         ::testing::Values(std::make_tuple(3, "device"), std::make_tuple(3, "cpu"),
                                           std::make_tuple(3, "nvme"), std::make_tuple(2, "device"),
                                           std::make_tuple(0, "device")),
                         [](const auto& param_info) {
                           return "stage" + std::to_string(std::get<0>(param_info.param)) + "_" +
                                  std::get<1>(param_info.param);
                         });

TEST(inference, AnOpenInferenceFetchKeepsTheEngineFromTrainingNamingItsModule) {
  c_rig r(three_modules, {});
  ASSERT_NE(r.engine(), nullptr);
  ASSERT_EQ(zoe_fetch(r.engine(), 1, ZOE_PASS_FORWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(zoe_fetch(r.engine(), 1, ZOE_PASS_FORWARD, r.stream()), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("'layer' is already fetched (for inference)"));
  void* buffers[2] = {nullptr, nullptr};
  EXPECT_EQ(zoe_module_gradients(r.engine(), 1, r.stream(), buffers, 2), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), HasSubstr("no micro-batch is open"));
  EXPECT_EQ(zoe_fetch(r.engine(), 0, ZOE_PASS_BACKWARD, r.stream()), ZOE_ERROR_USAGE);
  EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr("'embed'"), HasSubstr("only a ZOE_PASS_FORWARD fetch")));
  EXPECT_EQ(zoe_release(r.engine(), 0, r.stream()), ZOE_ERROR_USAGE);

  std::vector<float> values(r.numel(0), 0.5F);
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  zoe_stage_times times = ZOE_STAGE_TIMES_INIT;
  const auto refused = [&](zoe_status s, const char* call) {
    EXPECT_EQ(s, ZOE_ERROR_USAGE) << call;
    EXPECT_THAT(zoe_last_error(), AllOf(HasSubstr(call), HasSubstr("module 'layer' is fetched for inference")));
  };
  refused(zoe_begin_micro_batch(r.engine()), "zoe_begin_micro_batch");
  refused(zoe_read_state(r.engine(), 0, ZOE_STATE_PARAMETER, values.data(), values.size()), "zoe_read_state");
  refused(zoe_write_state(r.engine(), 0, ZOE_STATE_PARAMETER, values.data(), values.size()), "zoe_write_state");
  refused(zoe_checkpoint_save(r.engine(), r.dir().c_str(), "a"), "zoe_checkpoint_save");
  refused(zoe_checkpoint_load(r.engine(), r.dir().c_str(), "a"), "zoe_checkpoint_load");
  refused(zoe_measure_stages(r.engine(), &times), "zoe_measure_stages");

  ASSERT_EQ(zoe_release(r.engine(), 1, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(zoe_release(r.engine(), 1, r.stream()), ZOE_ERROR_USAGE);
  // Released, training goes on; an inference fetch after the step's micro-batch keeps it from
  // stepping until released.
  r.micro_batch(r.values(1, 0.05F));
  ASSERT_EQ(zoe_fetch(r.engine(), 1, ZOE_PASS_FORWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  refused(zoe_step(r.engine(), 0.01, &result), "zoe_step");
  ASSERT_EQ(zoe_release(r.engine(), 1, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_step(r.engine(), 0.01, &result), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(result.optimizer_steps, 1);
  // An engine destroyed with an inference fetch open releases it (the rig checks the destroy).
  ASSERT_EQ(zoe_fetch(r.engine(), 2, ZOE_PASS_FORWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
}

}  // namespace
}  // namespace zoe::testing
