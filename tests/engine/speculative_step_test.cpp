// The optimizer step inside backward (optimizer_step.hpp, "Speculation"): an engine that steps each
// shard speculatively at the end of backward and commits or drops it at step() leaves the same bits
// as one that steps after backward (zoe.optimizer_in_backward off), whether clipping is active or
// not, after an overflow, with accumulation, on every placement of the parameters and the optimizer
// states; and it speculates where it may (no state in device memory) as far as the pending memory
// reaches.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <cstdint>
#include <functional>
#include <memory>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine_rig.hpp"
#include "fault_injecting_backend.hpp"
#include "zoe/engine/engine.hpp"
#include "zoe/engine/statistics.hpp"

namespace zoe::testing {
namespace {

using engine::state_kind;

// Parameters (the working copy) on one tier, the optimizer's states (master, moments, gradient) on another.
struct tiers_case {
  const char* params;
  const char* optimizer;
};

engine::tier_fractions all_on(const std::string& where) {
  return {.device = where == "device" ? 1.0 : 0.0,
          .host = where == "host" ? 1.0 : 0.0,
          .nvme = where == "nvme" ? 1.0 : 0.0};
}

std::function<void(engine::engine_config&)> placed(const tiers_case& t, bool in_backward, bool fp16) {
  return [=](engine::engine_config& c) {
    for (const state_kind s : engine::all_states) {
      c.zoe.placement[static_cast<std::size_t>(s)] = all_on(s == state_kind::working ? t.params : t.optimizer);
    }
    c.zoe.optimizer_in_backward = in_backward;
    c.gradient_clipping = 1.0;
    c.gradient_accumulation_steps = 2;
    if (fp16) {
      c.fp16.enabled = true;
      c.fp16.initial_scale_power = 8;  // unit gradients times 256 are normal fp16 numbers
      c.fp16.hysteresis = 1;
    }
  };
}

bool speculates(const tiers_case& t, kernels::dtype d) {
  // An fp32 parameter's working copy is its master: it has no bytes of its own to place.
  const bool params_count = d != kernels::dtype::fp32;
  return std::string(t.optimizer) != "device" && (!params_count || std::string(t.params) != "device");
}

void expect_same_states(rig& a, rig& b, const std::string& when) {
  for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    EXPECT_EQ(a.state(k), b.state(k)) << engine::state_kind_name(k) << " " << when;
  }
}

// Two micro-batches of the same gradients (seeds first and first + 1) into both rigs.
void same_micro_batches(rig& a, rig& b, std::uint64_t first, float scale) {
  for (std::uint64_t j = 0; j < 2; ++j) {
    const auto g = gradients(b.e->layout(), first + j, scale);
    a.micro_batch(g);
    b.micro_batch(g);
  }
}

class speculative_step : public ::testing::TestWithParam<tiers_case> {};

TEST_P(speculative_step, EqualsTheStepAfterBackwardBitForBitWhetherCommittedOrDropped) {
  for (const kernels::dtype d : {kernels::dtype::fp16, kernels::dtype::fp32}) {
    const bool fp16 = d == kernels::dtype::fp16;
    const std::string what =
        std::string(GetParam().params) + "/" + GetParam().optimizer + " " + std::string(kernels::dtype_name(d));
    rig ahead("host", d, placed(GetParam(), true, fp16));
    rig after("host", d, placed(GetParam(), false, fp16));
    const double lr = ahead.e->lr();  // the step's settings are the speculation's
    const auto step = [&](float grad_scale, std::uint64_t seed, bool poison) {
      for (std::uint64_t j = 0; j < 2; ++j) {
        auto g = gradients(after.e->layout(), seed * 10 + j, grad_scale);
        if (poison && j == 1) g[1][3] = std::numeric_limits<float>::infinity();
        ahead.micro_batch(g);
        after.micro_batch(g);
      }
      const engine::step_result a = ahead.e->step(lr);
      const engine::step_result b = after.e->step(lr);
      EXPECT_EQ(a.skipped, b.skipped) << what;
      EXPECT_EQ(a.clip_coefficient, b.clip_coefficient) << what;
      return a;
    };
    const engine::speculation_totals& spec = ahead.e->optimizer().speculation();
    const std::uint64_t shards = ahead.e->layout().parameters().size();
    const bool may = speculates(GetParam(), d);

    // Small gradients: the norm stays under gradient_clipping, the speculation is committed.
    EXPECT_EQ(step(0.001F, 1, false).clip_coefficient, 1.0) << what;
    expect_same_states(ahead, after, "after a committed step, " + what);
    EXPECT_EQ(spec.committed, may ? shards : 0) << what;
    EXPECT_EQ(spec.dropped, 0U) << what;

    // Large gradients: clipping scales them, the speculation is dropped and the step runs after
    // backward; from the first final gradient that shows the step clips, none is speculated.
    EXPECT_LT(step(1.0F, 2, false).clip_coefficient, 1.0) << what;
    expect_same_states(ahead, after, "after a clipped step, " + what);
    EXPECT_EQ(spec.dropped + spec.forgone, may ? shards : 0) << what;

    if (fp16) {
      // An overflow skips the step: the speculation is dropped, no state changes.
      EXPECT_TRUE(step(0.001F, 3, true).skipped) << what;
      expect_same_states(ahead, after, "after an overflow, " + what);
      EXPECT_EQ(spec.dropped + spec.forgone, may ? 2 * shards : 0) << what;
    }

    // And committed again, at the step count the skipped step did not advance.
    EXPECT_EQ(step(0.001F, 4, false).clip_coefficient, 1.0) << what;
    expect_same_states(ahead, after, "after the last step, " + what);
    EXPECT_EQ(spec.committed, may ? 2 * shards : 0) << what;
    EXPECT_EQ(spec.speculated, spec.committed + spec.dropped) << what;
    EXPECT_EQ(ahead.e->optimizer().speculated(), 0U) << what;
    EXPECT_EQ(after.e->optimizer().speculation().speculated, 0U) << "zoe.optimizer_in_backward off, " << what;
  }
}

INSTANTIATE_TEST_SUITE_P(tiers, speculative_step,
                         ::testing::Values(tiers_case{"device", "device"}, tiers_case{"device", "host"},
                                           tiers_case{"device", "nvme"}, tiers_case{"host", "device"},
                                           tiers_case{"host", "host"}, tiers_case{"host", "nvme"},
                                           tiers_case{"nvme", "device"}, tiers_case{"nvme", "host"},
                                           tiers_case{"nvme", "nvme"}),
                         [](const ::testing::TestParamInfo<tiers_case>& c) {
                           return std::string("params_") + c.param.params + "_optimizer_" + c.param.optimizer;
                         });

TEST(speculative_step, ASettingTheStepChangesIsDroppedAndSteppedAfterBackward) {
  const tiers_case nvme{"nvme", "nvme"};
  rig ahead("nvme", kernels::dtype::bf16, placed(nvme, true, false));
  rig after("nvme", kernels::dtype::bf16, placed(nvme, false, false));
  same_micro_batches(ahead, after, 0, 0.001F);
  const double lr = ahead.e->lr() * 2;  // not the learning rate the shards were speculated with
  ahead.e->step(lr);
  after.e->step(lr);
  expect_same_states(ahead, after, "after a step at another learning rate");
  EXPECT_EQ(ahead.e->optimizer().speculation().committed, 0U);
  EXPECT_EQ(ahead.e->optimizer().speculation().dropped, ahead.e->layout().parameters().size());
}

TEST(speculative_step, ReadsTheMasterBackwardFetchedInsteadOfReadingItAgain) {
  // fp32: the working copy is the master, so backward's fetch brings it; on nvme, a second read
  // of it for the step is what the speculation saves.
  const tiers_case nvme{"nvme", "nvme"};
  rig ahead("nvme", kernels::dtype::fp32, placed(nvme, true, false));
  rig after("nvme", kernels::dtype::fp32, placed(nvme, false, false));
  same_micro_batches(ahead, after, 0, 0.001F);
  ahead.e->step(ahead.e->lr());
  after.e->step(after.e->lr());
  expect_same_states(ahead, after, "with the masters backward fetched");
  std::uint64_t masters = 0;
  for (const engine::parameter_layout& p : ahead.e->layout().parameters()) {
    masters += engine::state_bytes(p, state_kind::master);
  }
  EXPECT_EQ(ahead.e->optimizer().speculation().fetched_bytes, masters);
  EXPECT_EQ(ahead.e->optimizer().totals().bytes_read + masters, after.e->optimizer().totals().bytes_read)
      << "the step read every master but the ones backward fetched";
  EXPECT_EQ(ahead.e->optimizer().totals().bytes_written, after.e->optimizer().totals().bytes_written);

  // A step that clips forgoes the speculation: the step after backward reads the masters backward
  // fetched, not NVMe.
  same_micro_batches(ahead, after, 10, 1.0F);
  EXPECT_LT(ahead.e->step(ahead.e->lr()).clip_coefficient, 1.0);
  after.e->step(after.e->lr());
  expect_same_states(ahead, after, "after a clipped step with the masters backward fetched");
  EXPECT_EQ(ahead.e->optimizer().speculation().fetched_bytes, 2 * masters);
  EXPECT_EQ(ahead.e->optimizer().totals().bytes_read + 2 * masters, after.e->optimizer().totals().bytes_read);
  EXPECT_EQ(ahead.e->optimizer().totals().bytes_written, after.e->optimizer().totals().bytes_written);
}

// NVMe bytes of everything the engine moved (statistics_json's totals: what zoe-train-mlp reports).
std::pair<std::uint64_t, std::uint64_t> nvme_bytes(rig& r) {
  const nlohmann::json j = nlohmann::json::parse(engine::statistics_json(*r.e));
  return {j.at("nvme_read_bytes").get<std::uint64_t>(), j.at("nvme_write_bytes").get<std::uint64_t>()};
}

TEST(speculative_step, AStepKnownToClipOrSkipSpendsNoNvmeBytesOnSpeculation) {
  // fp16 on nvme: large gradients clip, an inf skips the step; either is known from the first final
  // gradient that shows it (here the first: every parameter's gradient alone has a norm above
  // gradient_clipping, and the inf lies in layer1.w, the parameter backward finishes first).
  const tiers_case nvme{"nvme", "nvme"};
  rig ahead("nvme", kernels::dtype::fp16, placed(nvme, true, true));
  rig after("nvme", kernels::dtype::fp16, placed(nvme, false, true));
  const std::uint64_t shards = ahead.e->layout().parameters().size();
  const auto step = [&](float grad_scale, std::uint64_t seed, bool poison) {
    for (std::uint64_t j = 0; j < 2; ++j) {
      auto g = gradients(after.e->layout(), seed * 10 + j, grad_scale);
      if (poison && j == 1) g[2][3] = std::numeric_limits<float>::infinity();
      ahead.micro_batch(g);
      after.micro_batch(g);
    }
    return std::pair{ahead.e->step(ahead.e->lr()), after.e->step(after.e->lr())};
  };
  const engine::speculation_totals& spec = ahead.e->optimizer().speculation();
  const auto before = nvme_bytes(after);
  EXPECT_EQ(nvme_bytes(ahead), before) << "the same set-up";

  const auto [clipped, clipped_too] = step(1.0F, 1, false);
  EXPECT_LT(clipped.clip_coefficient, 1.0);
  expect_same_states(ahead, after, "after a clipped step");
  EXPECT_EQ(nvme_bytes(ahead), nvme_bytes(after)) << "NVMe bytes read and written: a speculation was dropped";
  EXPECT_EQ(spec.forgone, shards);
  EXPECT_EQ(spec.speculated, 0U);

  const auto [skipped, skipped_too] = step(0.001F, 2, true);
  EXPECT_TRUE(skipped.skipped);
  EXPECT_TRUE(skipped_too.skipped);
  expect_same_states(ahead, after, "after an overflow");
  EXPECT_EQ(nvme_bytes(ahead), nvme_bytes(after)) << "NVMe bytes read and written: a speculation was dropped";
  EXPECT_EQ(spec.forgone, 2 * shards);

  // Small gradients: every shard stepped inside backward and committed, each master read once (by
  // backward's fetch), the step's bytes no more than after backward.
  const auto [committed, committed_too] = step(0.001F, 3, false);
  EXPECT_EQ(committed.clip_coefficient, 1.0);
  expect_same_states(ahead, after, "after a committed step");
  EXPECT_EQ(spec.committed, shards);
  EXPECT_EQ(spec.dropped, 0U);
  EXPECT_EQ(nvme_bytes(ahead).second, nvme_bytes(after).second);
  EXPECT_LE(nvme_bytes(ahead).first, nvme_bytes(after).first);
}

TEST(speculative_step, KeepsAsMuchOfAFetchedMasterAsThePendingMemoryHolds) {
  // Pieces of 1 Ki fp32 elements (aio.block_size 4 KiB), so layer1.w's 2 Ki-element shard is two;
  // room for one: backward reaches layer1 first and keeps its first piece, read once for backward
  // and the step, and its second piece is read from NVMe.
  const tiers_case nvme{"nvme", "nvme"};
  const auto one_piece = [&](bool in_backward) {
    return [=](engine::engine_config& c) {
      placed(nvme, in_backward, false)(c);
      c.aio.block_size = 4096;
      c.zoe.optimizer_pending_bytes = 4096;
    };
  };
  rig ahead("nvme", kernels::dtype::fp32, one_piece(true));
  rig after("nvme", kernels::dtype::fp32, one_piece(false));
  same_micro_batches(ahead, after, 0, 0.001F);
  ahead.e->step(ahead.e->lr());
  after.e->step(after.e->lr());
  expect_same_states(ahead, after, "with part of a master backward fetched");
  const engine::speculation_totals& spec = ahead.e->optimizer().speculation();
  EXPECT_EQ(spec.committed, ahead.e->layout().parameters().size());
  EXPECT_GE(spec.fetched_bytes, 4096U) << "layer1.w's first piece";
  EXPECT_EQ(ahead.e->optimizer().totals().bytes_read + spec.fetched_bytes, after.e->optimizer().totals().bytes_read)
      << "each piece backward fetched is not read again";
}

TEST(speculative_step, RunsWhileBackwardGoesOnWithEarlierLayers) {
  // One module per gradient bucket: layer1's bucket is reduced once backward acquires layer0's.
  const tiers_case nvme{"nvme", "nvme"};
  const auto one_module_a_bucket = [&](engine::engine_config& c) {
    placed(nvme, true, false)(c);
    c.zero.reduce_bucket_size = 1;  // the buckets are never smaller than the largest module
  };
  rig ahead("nvme", kernels::dtype::fp32, one_module_a_bucket);
  rig after("nvme", kernels::dtype::fp32, placed(nvme, false, false));
  const auto g0 = gradients(after.e->layout(), 0, 0.001F);
  const auto g1 = gradients(after.e->layout(), 1, 0.001F);
  ahead.micro_batch(g0);
  after.micro_batch(g0);
  EXPECT_EQ(ahead.e->optimizer().shards_stepped_ahead(), 0U) << "not before the step's last micro-batch";
  // Before layer0's gradients are handed in, layer1's two shards are stepped: backward has not
  // ended. Were the step run only at its end, this would wait in vain (and fail at the deadline).
  bool seen = false;
  run_micro_batch(*ahead.e, *ahead.dev, g1, [&](engine::module_id m) {
    if (m != 0) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (ahead.e->optimizer().shards_stepped_ahead() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    seen = ahead.e->optimizer().shards_stepped_ahead() >= 2;
  });
  after.micro_batch(g1);
  EXPECT_TRUE(seen) << "layer1 was not stepped while backward went on with layer0";
  ahead.e->step(ahead.e->lr());
  after.e->step(after.e->lr());
  expect_same_states(ahead, after, "stepped inside backward");
}

TEST(speculative_step, ShardsBeyondThePendingMemoryStepAfterBackward) {
  const tiers_case host{"host", "host"};
  const auto small_pending = [&](engine::engine_config& c) {
    placed(host, true, false)(c);
    // Two shards' host states of four (each shard 2048 elements: three fp32 states and a bf16
    // working copy, 28 KiB).
    c.zoe.optimizer_pending_bytes = 56 * 1024;
  };
  rig ahead("host", kernels::dtype::bf16, small_pending);
  rig after("host", kernels::dtype::bf16, placed(host, false, false));
  EXPECT_EQ(ahead.e->plan().optimizer_pending_bytes, 56U * 1024);
  EXPECT_EQ(after.e->plan().optimizer_pending_bytes, 0U) << "zoe.optimizer_in_backward off";
  same_micro_batches(ahead, after, 0, 0.001F);
  const engine::speculation_totals& spec = ahead.e->optimizer().speculation();
  EXPECT_EQ(spec.speculated, 2U) << "the last two shards backward reached fit";
  EXPECT_EQ(spec.declined, 2U) << "the first two do not";
  ahead.e->step(ahead.e->lr());
  after.e->step(after.e->lr());
  expect_same_states(ahead, after, "with part of the model speculated");
  EXPECT_EQ(spec.committed, 2U);
}

TEST(speculative_step, AFailedSpeculativeWriteStepsAfterBackwardAndAFailedStepKeepsWhatWasSpeculated) {
  // The optimizer's states on nvme, the gradients and the working copies in host memory: the only
  // NVMe writes after set-up are the optimizer's.
  const auto optimizer_on_nvme = [](bool in_backward) {
    return [in_backward](engine::engine_config& c) {
      placed({"host", "nvme"}, in_backward, false)(c);
      c.zoe.placement[static_cast<std::size_t>(state_kind::gradient)] = all_on("host");
    };
  };
  auto faults = std::make_shared<fault_plan>();
  rig ahead("nvme", kernels::dtype::bf16, optimizer_on_nvme(true), faults);
  rig after("nvme", kernels::dtype::bf16, optimizer_on_nvme(false));
  const std::uint64_t shards = ahead.e->layout().parameters().size();
  const auto g0 = gradients(after.e->layout(), 0, 0.001F);
  const auto g1 = gradients(after.e->layout(), 1, 0.001F);
  ahead.micro_batch(g0);
  after.micro_batch(g0);
  faults->add({.op = io::io_op::write, .inject_errno = EIO});  // the first shard backward finished
  ahead.micro_batch(g1);
  after.micro_batch(g1);
  EXPECT_EQ(faults->fired(), 1);
  const engine::speculation_totals& spec = ahead.e->optimizer().speculation();
  EXPECT_EQ(spec.declined, 1U);
  EXPECT_EQ(ahead.e->optimizer().speculated(), shards - 1);

  // The step after backward writes that shard: it fails, and changes nothing.
  std::vector<std::vector<std::vector<float>>> before;
  for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    before.push_back(ahead.state(k));
  }
  faults->add({.op = io::io_op::write, .inject_errno = EIO});
  EXPECT_THROW(ahead.e->step(ahead.e->lr()), io_error);
  EXPECT_EQ(faults->fired(), 2);
  std::size_t i = 0;
  for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    EXPECT_EQ(ahead.state(k), before[i++]) << engine::state_kind_name(k);
  }
  EXPECT_EQ(ahead.e->optimizer().speculated(), shards - 1) << "a failed step keeps what was speculated";

  // The retry commits it, and steps the other shard: the bits of a step after backward.
  ahead.e->step(ahead.e->lr());
  after.e->step(after.e->lr());
  expect_same_states(ahead, after, "after a retried step");
  EXPECT_EQ(spec.committed, shards - 1);
}

}  // namespace
}  // namespace zoe::testing
