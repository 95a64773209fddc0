// The engine end to end on the host device: micro-batches with real fetches and gradients handed
// in through zoe's buffers, then step(); the arithmetic between the stages (averaging over
// micro-batches, loss scale, clipping) against references; the same steps on every tier give the
// same bits; a failed step changes nothing; a checkpoint resumes bit for bit.
#include "zoe/engine/engine.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine_rig.hpp"
#include "fault_injecting_backend.hpp"
#include "io_test_support.hpp"
#include "usage_message.hpp"
#include "zoe/engine/checkpoint/checkpoint.hpp"
#include "zoe/core/str.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::testing {
namespace {

using engine::module_id;
using engine::parameter_id;
using engine::state_kind;

std::vector<std::vector<float>> mean_of(const std::vector<std::vector<std::vector<float>>>& parts) {
  std::vector<std::vector<float>> out = parts.front();
  for (std::size_t p = 0; p < out.size(); ++p) {
    for (std::size_t i = 0; i < out[p].size(); ++i) {
      double sum = 0;
      for (const auto& part : parts) sum += part[p][i];
      out[p][i] = static_cast<float>(sum / static_cast<double>(parts.size()));
    }
  }
  return out;
}

void expect_near_all(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b, double rel,
                     double abs_floor) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t p = 0; p < a.size(); ++p) {
    ASSERT_EQ(a[p].size(), b[p].size());
    for (std::size_t i = 0; i < a[p].size(); ++i) {
      ASSERT_NEAR(a[p][i], b[p][i], std::max(abs_floor, rel * std::abs(static_cast<double>(b[p][i]))))
          << "parameter " << p << " element " << i;
    }
  }
}

TEST(offload_engine, AccumulatingKMicroBatchesStepsLikeOneBatchKTimesLarger) {
  constexpr std::size_t k = 4;
  rig accumulated("host", kernels::dtype::fp32, [](engine::engine_config& c) { c.gradient_accumulation_steps = k; });
  rig whole("host");
  for (std::uint64_t step = 0; step < 3; ++step) {
    std::vector<std::vector<std::vector<float>>> parts;
    for (std::size_t j = 0; j < k; ++j) parts.push_back(gradients(whole.e->layout(), step * 10 + j));
    for (const auto& g : parts) accumulated.micro_batch(g);
    whole.micro_batch(mean_of(parts));
    const engine::step_result a = accumulated.e->step(1e-2);
    const engine::step_result b = whole.e->step(1e-2);
    EXPECT_FALSE(a.skipped);
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-6 * b.grad_norm);
  }
  expect_near_all(accumulated.state(state_kind::master), whole.state(state_kind::master), 1e-6, 1e-7);
  expect_near_all(accumulated.state(state_kind::exp_avg_sq), whole.state(state_kind::exp_avg_sq), 1e-5, 1e-12);
}

TEST(offload_engine, ClippingMatchesAnFp64Reference) {
  constexpr double max_norm = 0.5;
  constexpr double lr = 1e-2;
  rig r("host", kernels::dtype::fp32, [](engine::engine_config& c) { c.gradient_clipping = max_norm; });
  const std::vector<std::vector<float>> before = r.state(state_kind::master);
  const std::vector<std::vector<float>> g = gradients(r.e->layout(), 7, 3.0F);
  r.micro_batch(g);
  const engine::step_result out = r.e->step(lr);

  double sum = 0;
  for (const auto& v : g) {
    for (const float x : v) sum += static_cast<double>(x) * x;
  }
  const double norm = std::sqrt(sum);
  const double clip = max_norm / (norm + 1e-6);  // DeepSpeed divides by (norm + 1e-6) / max_norm
  EXPECT_NEAR(out.grad_norm, norm, 1e-6 * norm);
  EXPECT_NEAR(out.clip_coefficient, clip, 1e-6 * clip);
  ASSERT_LT(out.clip_coefficient, 1.0);
  // Adam's first step in fp64: m = (1-b1) g, v = (1-b2) g^2, both bias-corrected back to g and g^2.
  const engine::optimizer_config o = *r.e->config().optimizer;
  std::vector<std::vector<float>> expected = before;
  for (std::size_t p = 0; p < g.size(); ++p) {
    for (std::size_t i = 0; i < g[p].size(); ++i) {
      const double gi = g[p][i] * clip;
      const double w = before[p][i];
      const double update = gi / (std::sqrt(gi * gi) + o.eps);
      expected[p][i] = static_cast<float>(w - lr * update - lr * o.weight_decay * w);
    }
  }
  expect_near_all(r.state(state_kind::master), expected, 1e-5, 1e-6);
}

TEST(offload_engine, AnOverflowSkipsTheStepLowersTheScaleAndDoesNotCountTheStep) {
  const auto fp16 = [](engine::engine_config& c) {
    c.fp16.enabled = true;
    c.fp16.initial_scale_power = 8;
    c.fp16.hysteresis = 1;
  };
  rig disturbed("nvme", kernels::dtype::fp16, fp16);
  rig clean("nvme", kernels::dtype::fp16, fp16);
  EXPECT_EQ(disturbed.e->loss_scale(), 256);
  // Unit-scale gradients: times any loss scale here they stay normal fp16 numbers, so handing
  // them in at 256 or at 128 gives the same unscaled values.
  const auto g1 = gradients(clean.e->layout(), 1);
  const auto g3 = gradients(clean.e->layout(), 3);
  disturbed.micro_batch(g1);
  clean.micro_batch(g1);
  EXPECT_EQ(disturbed.e->step(1e-3).optimizer_steps, 1);
  EXPECT_EQ(clean.e->step(1e-3).optimizer_steps, 1);

  auto bad = g3;
  bad[2][5] = std::numeric_limits<float>::infinity();
  const auto master = disturbed.state(state_kind::master);
  const auto moments = disturbed.state(state_kind::exp_avg);
  disturbed.micro_batch(bad);
  const engine::step_result skipped = disturbed.e->step(1e-3);
  EXPECT_TRUE(skipped.skipped);
  EXPECT_EQ(skipped.loss_scale, 128);
  EXPECT_EQ(skipped.optimizer_steps, 1);
  EXPECT_EQ(disturbed.state(state_kind::master), master);
  EXPECT_EQ(disturbed.state(state_kind::exp_avg), moments);

  // The next step is the second for bias correction, as if the overflow had never come (the
  // gradients are handed in scaled by each engine's own loss scale, so the unscaled values match).
  disturbed.micro_batch(g3);
  clean.micro_batch(g3);
  EXPECT_EQ(disturbed.e->step(1e-3).optimizer_steps, 2);
  EXPECT_EQ(clean.e->step(1e-3).optimizer_steps, 2);
  EXPECT_EQ(disturbed.state(state_kind::master), clean.state(state_kind::master));
  EXPECT_EQ(disturbed.state(state_kind::working), clean.state(state_kind::working));
}

class engine_tiers : public ::testing::TestWithParam<const char*> {};

TEST_P(engine_tiers, StepsOnEveryTierAreBitIdenticalToStepsOnTheDevice) {
  for (const kernels::dtype t : {kernels::dtype::fp32, kernels::dtype::bf16}) {
    rig here(GetParam(), t);
    rig device("device", t);
    for (std::uint64_t step = 0; step < 3; ++step) {
      const auto g = gradients(device.e->layout(), step);
      here.micro_batch(g);
      device.micro_batch(g);
      here.e->step(1e-2);
      device.e->step(1e-2);
    }
    for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
      EXPECT_EQ(here.state(k), device.state(k)) << engine::state_kind_name(k) << " " << kernels::dtype_name(t);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(tiers, engine_tiers, ::testing::Values("host", "nvme", "split"));

TEST(offload_engine, AFailedStepChangesNothingAndItsRetryGivesTheUndisturbedBits) {
  auto faults = std::make_shared<fault_plan>();
  const auto fp16 = [](engine::engine_config& c) {
    c.fp16.enabled = true;
    // The step after backward writes the shards on nvme (speculation would have written them in
    // backward: speculative_step_test.cpp fails those writes).
    c.zoe.optimizer_in_backward = false;
  };
  rig disturbed("split", kernels::dtype::fp16, fp16, faults);
  rig clean("split", kernels::dtype::fp16, fp16);
  const auto g = gradients(clean.e->layout(), 5, 0.01F);
  disturbed.micro_batch(g);
  clean.micro_batch(g);
  std::vector<std::vector<std::vector<float>>> before;
  for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    before.push_back(disturbed.state(k));
  }
  const engine::loss_scaler_state scaler = disturbed.e->scaler().state();
  faults->add({.op = io::io_op::write, .inject_errno = EIO});
  EXPECT_THROW(disturbed.e->step(1e-3), io_error);
  EXPECT_EQ(faults->fired(), 1);
  EXPECT_EQ(disturbed.e->scaler().state(), scaler);
  std::size_t i = 0;
  for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    EXPECT_EQ(disturbed.state(k), before[i++]) << engine::state_kind_name(k);
  }
  disturbed.e->step(1e-3);
  clean.e->step(1e-3);
  EXPECT_EQ(disturbed.state(state_kind::master), clean.state(state_kind::master));
  EXPECT_EQ(disturbed.state(state_kind::working), clean.state(state_kind::working));
}

TEST(offload_engine, ACheckpointResumesBitForBitOnAnotherPlacement) {
  scratch_dir checkpoints;
  const auto fp16 = [](engine::engine_config& c) { c.fp16.enabled = true; };
  rig first("nvme", kernels::dtype::fp16, fp16);
  for (std::uint64_t step = 0; step < 2; ++step) {
    first.micro_batch(gradients(first.e->layout(), step, 0.01F));
    first.e->step(1e-3);
  }
  const std::string tag = first.e->save_checkpoint(checkpoints.path());
  EXPECT_EQ(tag, "step-2");
  rig resumed("host", kernels::dtype::fp16, fp16);
  resumed.e->load_checkpoint(checkpoints.path());
  EXPECT_EQ(resumed.e->scaler().state(), first.e->scaler().state());
  for (std::uint64_t step = 2; step < 4; ++step) {
    const auto g = gradients(first.e->layout(), step, 0.01F);
    first.micro_batch(g);
    resumed.micro_batch(g);
    first.e->step(1e-3);
    resumed.e->step(1e-3);
  }
  for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    EXPECT_EQ(resumed.state(k), first.state(k)) << engine::state_kind_name(k);
  }
}

// A checkpoint is loaded between steps: between two micro-batches of a step the gradient path
// expects the step's next micro-batch, so a load there would leave no micro-batch able to begin.
TEST(offload_engine, ACheckpointLoadsBetweenStepsNotBetweenMicroBatches) {
  scratch_dir checkpoints;
  const auto two = [](engine::engine_config& c) { c.gradient_accumulation_steps = 2; };
  rig r("host", kernels::dtype::fp32, two);
  rig clean("host", kernels::dtype::fp32, two);
  (void)r.e->save_checkpoint(checkpoints.path());
  const auto g1 = gradients(r.e->layout(), 1);
  const auto g2 = gradients(r.e->layout(), 2);
  r.micro_batch(g1);
  EXPECT_NE(usage_message([&] { r.e->load_checkpoint(checkpoints.path()); }).find("1 of the step's 2 micro-batches"),
            std::string::npos);
  // The step goes on as if the load had never been tried.
  r.micro_batch(g2);
  clean.micro_batch(g1);
  clean.micro_batch(g2);
  r.e->step(1e-2);
  clean.e->step(1e-2);
  EXPECT_EQ(r.state(state_kind::master), clean.state(state_kind::master));
  // Between steps it loads, and the next step starts at micro-batch 0.
  r.e->load_checkpoint(checkpoints.path());
  r.micro_batch(g1);
  r.micro_batch(g2);
  EXPECT_FALSE(r.e->step(1e-2).skipped);
}

// A checkpoint whose scaler state this configuration cannot take (saved with fp16.hysteresis 2,
// loaded with 1) is refused naming its manifest before any state changes.
TEST(offload_engine, ACheckpointWhoseScalerStateTheConfigurationRefusesChangesNothing) {
  scratch_dir checkpoints;
  rig saved("nvme", kernels::dtype::fp16, [](engine::engine_config& c) {
    c.fp16.enabled = true;
    c.fp16.hysteresis = 2;
  });
  saved.micro_batch(gradients(saved.e->layout(), 1, 0.01F));
  saved.e->step(1e-3);  // its states now differ from a new engine's
  (void)saved.e->save_checkpoint(checkpoints.path());
  ASSERT_EQ(saved.e->scaler().state().cur_hysteresis, 2);
  rig other("nvme", kernels::dtype::fp16, [](engine::engine_config& c) {
    c.fp16.enabled = true;
    c.fp16.hysteresis = 1;
  });
  const auto master = other.state(state_kind::master);
  const auto working = other.state(state_kind::working);
  const engine::loss_scaler_state scaler = other.e->scaler().state();
  try {
    other.e->load_checkpoint(checkpoints.path());
    FAIL() << "the scaler state must be refused";
  } catch (const engine::checkpoint_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("manifest.json"), std::string::npos) << m;
    EXPECT_NE(m.find("cur_hysteresis"), std::string::npos) << m;
  }
  EXPECT_EQ(other.state(state_kind::master), master);
  EXPECT_EQ(other.state(state_kind::working), working);
  EXPECT_EQ(other.e->scaler().state(), scaler);
}

// Ending a micro-batch with a fetch still open is refused naming the module, and changes nothing:
// once the fetch is released the same micro-batch ends, and the step is the undisturbed one.
TEST(offload_engine, EndingAMicroBatchWithAFetchOpenIsRefusedAndItEndsOnceReleased) {
  const auto two = [](engine::engine_config& c) { c.gradient_accumulation_steps = 2; };
  rig r("host", kernels::dtype::fp32, two);
  rig clean("host", kernels::dtype::fp32, two);
  const auto g1 = gradients(r.e->layout(), 1);
  const auto g2 = gradients(r.e->layout(), 2);
  r.e->begin_micro_batch();
  const engine::fetch_handle open = r.e->fetch(0);
  open.wait();
  EXPECT_NE(usage_message([&] { r.e->end_micro_batch(); }).find("layer0"), std::string::npos);
  r.e->release(0);
  r.e->end_micro_batch();  // micro-batch 0, with no gradients handed in
  r.micro_batch(g2);
  std::vector<std::vector<float>> zeros;
  for (const auto& v : g1) zeros.emplace_back(v.size(), 0.0F);
  clean.micro_batch(zeros);
  clean.micro_batch(g2);
  r.e->step(1e-2);
  clean.e->step(1e-2);
  EXPECT_EQ(r.state(state_kind::master), clean.state(state_kind::master));
}

// Ending a micro-batch with a module's gradients acquired and not reduced is refused naming it;
// once reduced the same micro-batch ends.
TEST(offload_engine, EndingAMicroBatchWithGradientsNotReducedIsRefusedAndItEndsOnceReduced) {
  const auto two = [](engine::engine_config& c) { c.gradient_accumulation_steps = 2; };
  rig r("host", kernels::dtype::fp32, two);
  const device_stream s = r.dev->create_stream();
  r.e->begin_micro_batch();
  (void)r.e->gradient_buffers(1, s.view());
  EXPECT_NE(usage_message([&] { r.e->end_micro_batch(); }).find("layer1"), std::string::npos);
  r.e->reduce_gradients(1, s.view());
  r.e->end_micro_batch();
  r.micro_batch(gradients(r.e->layout(), 2));
  EXPECT_FALSE(r.e->step(1e-2).skipped);
}

TEST(offload_engine, CallsOutOfOrderAreRefusedNamingWhatIsMissing) {
  rig r("host");
  EXPECT_NE(usage_message([&] { r.e->step(1e-3); }).find("0 of the step's 1 micro-batches"), std::string::npos);
  r.e->begin_micro_batch();
  EXPECT_NE(usage_message([&] { r.e->begin_micro_batch(); }).find("while a micro-batch is open"), std::string::npos);
  EXPECT_NE(usage_message([&] { (void)r.e->save_checkpoint(r.dir.path()); }).find("while a micro-batch is open"),
            std::string::npos);
  r.e->end_micro_batch();
  EXPECT_NE(usage_message([&] { r.e->begin_micro_batch(); }).find("call step() first"), std::string::npos);
  const std::vector<float> wrong(3);
  EXPECT_NE(usage_message([&] { r.e->set_parameter(0, wrong); }).find("'layer0.w' has 1961 elements"),
            std::string::npos);
}

}  // namespace
}  // namespace zoe::testing
