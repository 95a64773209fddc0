// offload_engine::measure_stages: each offload stage of a step timed alone over the real states. It
// must change nothing: no state, no loss scale, not the prefetch trace, not the steps after it;
// and it is refused where there is no step to measure.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine_rig.hpp"
#include "usage_message.hpp"
#include "zoe/engine/engine.hpp"

namespace zoe::testing {
namespace {

using engine::state_kind;

constexpr state_kind every_state[] = {state_kind::working, state_kind::gradient, state_kind::master,
                                      state_kind::exp_avg, state_kind::exp_avg_sq};

// fp16 on NVMe, no persistent parameters (so every fetch reads its parameters), `k` micro-batches.
rig nvme_rig(std::size_t k = 1) {
  return rig("nvme", kernels::dtype::fp16, [k](engine::engine_config& c) {
    c.fp16.enabled = true;
    c.gradient_accumulation_steps = k;
    c.zero.param_persistence_threshold = 0;
  });
}

void train_step(rig& r, std::uint64_t step, std::size_t k = 1) {
  for (std::size_t i = 0; i < k; ++i) r.micro_batch(gradients(r.e->layout(), step * 7 + i, 0.01F));
  (void)r.e->step(1e-3);
}

std::vector<std::vector<std::vector<float>>> every_state_of(rig& r) {
  std::vector<std::vector<std::vector<float>>> out;
  for (const state_kind s : every_state) out.push_back(r.state(s));
  return out;
}

std::vector<engine::module_id> trace_of(rig& r) {
  const auto t = r.e->resources().coord().policy().trace();
  return {t.begin(), t.end()};
}

TEST(measure_stages, TimesEveryStageOfAnNvmeModelAndChangesNoState) {
  rig r = nvme_rig();
  train_step(r, 0);
  train_step(r, 1);
  const auto before = every_state_of(r);
  const engine::loss_scaler_state scaler = r.e->scaler().state();
  const std::vector<engine::module_id> trace = trace_of(r);
  ASSERT_EQ(trace.size(), 4U);  // forward over two modules, backward over them

  const engine::stage_times t = r.e->measure_stages();
  EXPECT_GT(t.param_io_s, 0);
  EXPECT_GT(t.adam_s, 0);
  EXPECT_GT(t.optimizer_io_s, 0);

  EXPECT_EQ(every_state_of(r), before);
  EXPECT_EQ(r.e->scaler().state(), scaler);
  EXPECT_FALSE(r.e->resources().coord().policy().recording());
  EXPECT_EQ(trace_of(r), trace);
}

TEST(measure_stages, ReadsTheParametersAsAStepOfKMicroBatchesDoesWithPrefetch) {
  constexpr std::size_t k = 2;
  rig r = nvme_rig(k);
  train_step(r, 0, k);
  const engine::coordinator_stats fetches_before = r.e->resources().coord().stats();
  const engine::parameter_swapper_stats reads_before = r.e->resources().swapper().stats();
  const engine::optimizer_step_totals optimizer_before = r.e->optimizer().totals();

  (void)r.e->measure_stages();
  const engine::coordinator_stats fetches = r.e->resources().coord().stats();
  // The trace's four fetches once per micro-batch, prefetching along it as a step does.
  EXPECT_EQ(fetches.fetches - fetches_before.fetches, k * 4);
  EXPECT_GT(fetches.prefetches, fetches_before.prefetches);
  EXPECT_GT(r.e->resources().swapper().stats().bytes_read, reads_before.bytes_read);
  // The optimizer's two stage runs, and no step.
  EXPECT_EQ(r.e->optimizer().totals().stage_runs, optimizer_before.stage_runs + 2);
  EXPECT_EQ(r.e->optimizer().totals().steps, optimizer_before.steps);
  // Not a micro-batch of the next step: it still takes k of them.
  r.micro_batch(gradients(r.e->layout(), 3, 0.01F));
  EXPECT_NE(usage_message([&] { (void)r.e->step(1e-3); }).find("1 of the step's 2 micro-batches"), std::string::npos);
}

TEST(measure_stages, StepsAfterMeasuringEqualStepsWithoutBitForBit) {
  rig measured = nvme_rig();
  rig clean = nvme_rig();
  for (std::uint64_t step = 0; step < 3; ++step) {
    train_step(measured, step);
    train_step(clean, step);
    (void)measured.e->measure_stages();
  }
  train_step(measured, 3);
  train_step(clean, 3);
  EXPECT_EQ(every_state_of(measured), every_state_of(clean));
  EXPECT_EQ(measured.e->scaler().state(), clean.e->scaler().state());
  EXPECT_EQ(trace_of(measured), trace_of(clean));
}

TEST(measure_stages, ReplaysTheLastStepsNvmeBytesThroughTheRawEngine) {
  rig r = nvme_rig();
  train_step(r, 0);
  const engine::mover_stats before = r.e->resources().movers().stats();
  train_step(r, 1);
  const engine::mover_stats after = r.e->resources().movers().stats();

  const engine::stage_times t = r.e->measure_stages();
  // Every byte the step moved, whichever stage moved it: the parameters' reads, the optimizer's
  // reads and writes (the step inside backward's included).
  EXPECT_EQ(t.io_read_bytes, after.bytes_read - before.bytes_read);
  EXPECT_EQ(t.io_write_bytes, after.bytes_written - before.bytes_written);
  EXPECT_GT(t.io_read_bytes, 0U);
  EXPECT_GT(t.io_write_bytes, 0U);
  EXPECT_GT(t.io_s, 0);
  // The replay goes through files of its own: the mover moved only the stages' bytes meanwhile,
  // and the next measure replays the same step.
  EXPECT_EQ(r.e->measure_stages().io_read_bytes, t.io_read_bytes);
}

TEST(measure_stages, HasNoIoToReplayWithoutNvme) {
  rig r("host");
  train_step(r, 0);
  const engine::stage_times t = r.e->measure_stages();
  EXPECT_EQ(t.io_read_bytes, 0U);
  EXPECT_EQ(t.io_write_bytes, 0U);
  EXPECT_EQ(t.io_s, 0);
}

TEST(measure_stages, IsRefusedOutsideTheTimeBetweenTwoSteps) {
  rig r = nvme_rig();
  EXPECT_NE(usage_message([&] { (void)r.e->measure_stages(); }).find("no step has handed in its gradients"),
            std::string::npos);
  r.e->begin_micro_batch();
  EXPECT_NE(usage_message([&] { (void)r.e->measure_stages(); }).find("while a micro-batch is open"), std::string::npos);
  r.e->end_micro_batch();
  EXPECT_NE(usage_message([&] { (void)r.e->measure_stages(); }).find("step() has not run"), std::string::npos);
  (void)r.e->step(1e-3);
  EXPECT_GE(r.e->measure_stages().optimizer_io_s, 0);
}

}  // namespace
}  // namespace zoe::testing
