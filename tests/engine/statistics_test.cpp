// statistics_json: after steps of a model on NVMe, the document parses, each stage's NVMe bytes
// are there, and the footprint section carries the plan's figures beside the peaks.
#include "zoe/engine/statistics.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "engine_rig.hpp"

namespace zoe::testing {
namespace {

using nlohmann::json;

rig nvme_rig() {
  return rig("nvme", kernels::dtype::fp16, [](engine::engine_config& c) {
    c.fp16.enabled = true;
    c.zero.param_persistence_threshold = 0;
  });
}

void train_step(rig& r, std::uint64_t step) {
  r.micro_batch(gradients(r.e->layout(), step, 0.01F));
  (void)r.e->step(1e-3);
}

TEST(statistics_json, AfterNvmeStepsCountsEachStagesBytesAndCarriesThePlan) {
  rig r = nvme_rig();
  train_step(r, 0);
  train_step(r, 1);
  const std::string text = engine::statistics_json(*r.e);
  EXPECT_EQ(text.find('\n'), std::string::npos);
  const json j = json::parse(text);

  EXPECT_GT(j.at("nvme_read_bytes").get<std::uint64_t>(), 0U);
  EXPECT_GT(j.at("nvme_write_bytes").get<std::uint64_t>(), 0U);
  EXPECT_GT(j.at("parameters").at("nvme_read_bytes").get<std::uint64_t>(), 0U);
  EXPECT_GT(j.at("parameters").at("nvme_read_gib_per_s").get<double>(), 0);
  EXPECT_GT(j.at("gradients").at("nvme_write_bytes").get<std::uint64_t>(), 0U);
  EXPECT_GT(j.at("gradients").at("device_to_host_bytes").get<std::uint64_t>(), 0U);
  EXPECT_EQ(j.at("host_device_copy_bytes").get<std::uint64_t>(),
            j.at("parameters").at("host_device_copy_bytes").get<std::uint64_t>() +
                j.at("gradients").at("device_to_host_bytes").get<std::uint64_t>());
  EXPECT_GT(j.at("optimizer").at("nvme_read_bytes").get<std::uint64_t>(), 0U);
  EXPECT_GT(j.at("optimizer").at("nvme_write_bytes").get<std::uint64_t>(), 0U);
  EXPECT_EQ(j.at("optimizer").at("steps").get<std::uint64_t>(), 2U);
  // Both steps ran inside backward (no clipping, no overflow): every shard committed twice.
  const json& ahead = j.at("optimizer").at("speculation");
  EXPECT_EQ(ahead.at("committed").get<std::uint64_t>(), 2 * r.e->layout().parameters().size());
  EXPECT_EQ(ahead.at("dropped").get<std::uint64_t>(), 0U);
  EXPECT_GT(ahead.at("nvme_write_bytes").get<std::uint64_t>(), 0U);
  EXPECT_EQ(j.at("optimizer_steps").get<std::int64_t>(), 2);
  // The totals are the sums of the stages'.
  EXPECT_EQ(j.at("nvme_read_bytes").get<std::uint64_t>(),
            j.at("parameters").at("nvme_read_bytes").get<std::uint64_t>() +
                j.at("gradients").at("nvme_read_bytes").get<std::uint64_t>() +
                j.at("optimizer").at("nvme_read_bytes").get<std::uint64_t>());
  const engine::optimizer_step_stats& last = r.e->optimizer().last_step();
  EXPECT_EQ(j.at("optimizer").at("last_step").at("nvme_write_bytes").get<std::uint64_t>(), last.bytes_written);
  EXPECT_GT(last.bytes_written, 0U);
  // Two steps of four fetches (forward and backward over two modules).
  EXPECT_EQ(j.at("fetches").at("fetches").get<std::uint64_t>(), 8U);
  EXPECT_GE(j.at("fetch_wait_seconds").get<double>(), 0);

  const engine::footprint_plan& plan = r.e->plan();
  const json& f = j.at("footprint");
  EXPECT_EQ(f.at("device").at("planned_bytes").get<std::uint64_t>(), plan.device_bytes);
  EXPECT_EQ(f.at("pinned_host").at("planned_bytes").get<std::uint64_t>(), plan.pinned_bytes);
  EXPECT_EQ(f.at("pageable_host").at("planned_bytes").get<std::uint64_t>(), plan.pageable_bytes);
  EXPECT_EQ(f.at("nvme").at("planned_bytes").get<std::uint64_t>(), plan.nvme_bytes);
  EXPECT_EQ(f.at("nvme").at("state_bytes").get<std::uint64_t>(),
            plan.state_bytes[static_cast<std::size_t>(engine::memory_kind::nvme)]);
  EXPECT_EQ(f.at("arena_bytes").get<std::uint64_t>(), plan.arena_bytes);
  EXPECT_EQ(f.at("optimizer_buffer_bytes").get<std::uint64_t>(), plan.optimizer_buffer_bytes);
  EXPECT_EQ(f.at("items").size(), plan.items.size());
  const std::uint64_t device_peak = f.at("device").at("peak_bytes").get<std::uint64_t>();
  EXPECT_GT(device_peak, 0U);
  EXPECT_LE(device_peak, f.at("device").at("budget_bytes").get<std::uint64_t>());
  EXPECT_GT(f.at("pinned_host").at("peak_bytes").get<std::uint64_t>(), 0U);
  EXPECT_LE(f.at("pinned_host").at("peak_bytes").get<std::uint64_t>(), plan.pinned_bytes);
  EXPECT_GT(f.at("nvme").at("used_bytes").get<std::uint64_t>(), 0U);
}

TEST(statistics_json, MeasuringTheStagesLeavesTheLastStepsFiguresAlone) {
  rig r = nvme_rig();
  train_step(r, 0);
  const json before = json::parse(engine::statistics_json(*r.e)).at("optimizer");
  (void)r.e->measure_stages();
  const json after = json::parse(engine::statistics_json(*r.e)).at("optimizer");
  EXPECT_EQ(after.at("last_step"), before.at("last_step"));
  EXPECT_EQ(after.at("steps"), before.at("steps"));
  EXPECT_EQ(after.at("stage_runs").get<std::uint64_t>(), before.at("stage_runs").get<std::uint64_t>() + 2);
  // The stage run with the reads and writes moved the bytes a step moves.
  EXPECT_EQ(after.at("nvme_read_bytes").get<std::uint64_t>(), 2 * before.at("nvme_read_bytes").get<std::uint64_t>());
}

// Activations saved in a micro-batch (one over the pinned share, so it goes to NVMe) and loaded
// back: their moves, in the activations' section and in the totals, and their shares as planned.
TEST(statistics_json, CountsTheActivationsMovesAndTheirPlannedShares) {
  constexpr std::size_t kib = 1024;
  rig r("nvme", kernels::dtype::fp32, [](engine::engine_config& c) {
    c.zoe.activations.host_bytes = 64 * kib;
    c.zoe.activations.nvme_bytes = 1024 * kib;
    c.zoe.optimizer_in_backward = false;  // the micro-batch's end would step the shards ahead, reading them
  });
  const device_stream s = r.dev->create_stream();
  const std::vector<std::byte> data(48 * kib, std::byte{7});
  void* src = r.dev->allocate(data.size(), s.view());
  r.dev->copy_async(src, data.data(), data.size(), copy_kind::host_to_device, s.view());
  r.e->begin_micro_batch();
  const engine::activation_id first = r.e->activations().save(src, data.size(), s.view());
  const engine::activation_id second = r.e->activations().save(src, data.size(), s.view());  // over the share
  (void)r.e->activations().load(second, s.view());
  (void)r.e->activations().load(first, s.view());
  r.dev->synchronize(s.view());
  r.e->end_micro_batch();
  r.dev->deallocate(src, data.size(), s.view());
  r.dev->synchronize(s.view());

  const json j = json::parse(engine::statistics_json(*r.e));
  const json& a = j.at("activations");
  EXPECT_EQ(a.at("saves").get<std::uint64_t>(), 2U);
  EXPECT_EQ(a.at("loads").get<std::uint64_t>(), 2U);
  EXPECT_GE(a.at("device_to_host_bytes").get<std::uint64_t>(), data.size());
  EXPECT_GE(a.at("host_to_device_bytes").get<std::uint64_t>(), data.size());
  EXPECT_GE(a.at("nvme_write_bytes").get<std::uint64_t>(), data.size());
  EXPECT_GE(a.at("nvme_read_bytes").get<std::uint64_t>(), data.size());
  EXPECT_EQ(a.at("host_planned_bytes").get<std::uint64_t>(), r.e->plan().activation_host_bytes);
  EXPECT_EQ(a.at("nvme_planned_bytes").get<std::uint64_t>(), r.e->plan().activation_nvme_bytes);
  EXPECT_LE(a.at("host_peak_bytes").get<std::uint64_t>(), r.e->plan().activation_host_bytes);
  EXPECT_GT(a.at("nvme_peak_bytes").get<std::uint64_t>(), 0U);
  // Nothing else read NVMe: no step ran and no module was fetched.
  EXPECT_EQ(j.at("nvme_read_bytes"), a.at("nvme_read_bytes"));
  EXPECT_EQ(j.at("host_device_copy_bytes").get<std::uint64_t>(),
            a.at("device_to_host_bytes").get<std::uint64_t>() + a.at("host_to_device_bytes").get<std::uint64_t>());
}

}  // namespace
}  // namespace zoe::testing
