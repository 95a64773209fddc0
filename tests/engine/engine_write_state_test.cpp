// offload_engine::write_state: a parameter's master (its working copy following) and its Adam
// moments set between steps, on every tier, all or nothing when an NVMe write fails, and the next
// step starting from what was written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "engine_rig.hpp"
#include "fault_injecting_backend.hpp"
#include "usage_message.hpp"
#include "zoe/engine/engine.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::testing {
namespace {

using engine::state_kind;
using ::testing::AllOf;
using ::testing::HasSubstr;

// `values` rounded to `t` and widened again: what a working copy of type t holds of them.
std::vector<float> rounded_to(kernels::dtype t, const std::vector<float>& values) {
  std::vector<std::uint16_t> narrow(values.size());
  std::vector<float> out(values.size());
  kernels::cast({kernels::dtype::fp32, values.data(), values.size()}, {t, narrow.data(), narrow.size()});
  kernels::cast({t, narrow.data(), narrow.size()}, {kernels::dtype::fp32, out.data(), out.size()});
  return out;
}

std::vector<std::vector<float>> squares_of(std::vector<std::vector<float>> v) {
  for (auto& p : v) {
    for (float& x : p) x *= x;
  }
  return v;
}

class write_state_tiers : public ::testing::TestWithParam<const char*> {};

TEST_P(write_state_tiers, MasterAndMomentsRoundTripAndTheWorkingCopyFollowsRounded) {
  for (const kernels::dtype t : {kernels::dtype::fp32, kernels::dtype::bf16}) {
    rig r(GetParam(), t);
    const auto master = gradients(r.e->layout(), 7, 3.0F);
    const auto avg = gradients(r.e->layout(), 8, 0.1F);
    const auto avg_sq = squares_of(gradients(r.e->layout(), 9, 0.1F));
    for (const engine::parameter_layout& p : r.e->layout().parameters()) {
      r.e->write_state(p.id, state_kind::master, master[p.id]);
      r.e->write_state(p.id, state_kind::exp_avg, avg[p.id]);
      r.e->write_state(p.id, state_kind::exp_avg_sq, avg_sq[p.id]);
    }
    EXPECT_EQ(r.state(state_kind::master), master);
    EXPECT_EQ(r.state(state_kind::exp_avg), avg);
    EXPECT_EQ(r.state(state_kind::exp_avg_sq), avg_sq);
    for (const engine::parameter_layout& p : r.e->layout().parameters()) {
      const std::vector<float> expected = t == kernels::dtype::fp32 ? master[p.id] : rounded_to(t, master[p.id]);
      EXPECT_EQ(r.e->read_state(p.id, state_kind::working), expected) << p.name;
    }
  }
}

// The same steps from written states as from states given by set_parameter: the gathered copies
// of the old value are gone, and the step reads the new homes (NVMe ones committed from shadows).
TEST_P(write_state_tiers, TheNextStepStartsFromTheWrittenValues) {
  rig written(GetParam(), kernels::dtype::fp16);
  rig set(GetParam(), kernels::dtype::fp16);
  const auto values = gradients(written.e->layout(), 11, 1.0F);
  for (rig* r : {&written, &set}) {
    r->micro_batch(gradients(r->e->layout(), 1, 0.01F));
    (void)r->e->step(1e-2);
  }
  for (const engine::parameter_layout& p : written.e->layout().parameters()) {
    const std::vector<float> zeros(p.numel, 0.0F);
    written.e->write_state(p.id, state_kind::master, values[p.id]);
    written.e->write_state(p.id, state_kind::exp_avg, zeros);
    written.e->write_state(p.id, state_kind::exp_avg_sq, zeros);
    set.e->set_parameter(p.id, values[p.id]);  // the master, its working copy, both moments zero
  }
  for (rig* r : {&written, &set}) {
    r->micro_batch(gradients(r->e->layout(), 2, 0.01F));
    (void)r->e->step(1e-2);
  }
  for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    EXPECT_EQ(written.state(k), set.state(k)) << engine::state_kind_name(k);
  }
}

INSTANTIATE_TEST_SUITE_P(tiers, write_state_tiers, ::testing::Values("device", "host", "nvme", "split"));

class write_state_faults : public ::testing::TestWithParam<const char*> {};

// Each parameter's write fails once on NVMe: neither its master nor its working copy changes
// (the shadows are written before anything in memory, and committed only once all are good).
TEST_P(write_state_faults, AFailedNvmeWriteLeavesMasterAndWorkingCopyAsTheyWere) {
  auto faults = std::make_shared<fault_plan>();
  rig r(GetParam(), kernels::dtype::fp16, {}, faults);
  const auto values = gradients(r.e->layout(), 13, 1.0F);
  const auto master = r.state(state_kind::master);
  const auto working = r.state(state_kind::working);
  const engine::tier_manager& tiers = r.e->resources().tiers();
  int on_nvme = 0;
  for (const engine::parameter_layout& p : r.e->layout().parameters()) {
    if (tiers.location(p.id, state_kind::master).where != engine::tier::nvme &&
        tiers.location(p.id, state_kind::working).where != engine::tier::nvme) {
      continue;
    }
    ++on_nvme;
    const int fired = faults->fired();
    faults->add({.op = io::io_op::write, .inject_errno = EIO});
    EXPECT_THROW(r.e->write_state(p.id, state_kind::master, values[p.id]), io_error) << p.name;
    EXPECT_EQ(faults->fired(), fired + 1);
    EXPECT_EQ(r.e->read_state(p.id, state_kind::master), master[p.id]) << p.name;
    EXPECT_EQ(r.e->read_state(p.id, state_kind::working), working[p.id]) << p.name;
    // Written again without a fault, it takes.
    r.e->write_state(p.id, state_kind::master, values[p.id]);
    EXPECT_EQ(r.e->read_state(p.id, state_kind::master), values[p.id]) << p.name;
  }
  EXPECT_GT(on_nvme, 0);
}

INSTANTIATE_TEST_SUITE_P(tiers, write_state_faults, ::testing::Values("nvme", "split"));

TEST(write_state, RefusesTheGradientAWrongCountNonFiniteValuesAndAnOpenMicroBatch) {
  rig r("host");
  const engine::parameter_layout& p = r.e->layout().parameter(1);
  std::vector<float> values(p.numel, 1.0F);
  const auto before = r.state(state_kind::master);
  EXPECT_THAT(usage_message([&] { r.e->write_state(p.id, state_kind::gradient, values); }), HasSubstr("gradient"));
  EXPECT_THAT(usage_message([&] { r.e->write_state(p.id, state_kind::master, std::vector<float>(p.numel + 1)); }),
              HasSubstr(p.name));
  values[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(usage_message([&] { r.e->write_state(p.id, state_kind::master, values); }),
              AllOf(HasSubstr(p.name), HasSubstr("index 17")));
  values[17] = -std::numeric_limits<float>::infinity();
  EXPECT_THAT(usage_message([&] { r.e->write_state(p.id, state_kind::exp_avg, values); }), HasSubstr("index 17"));
  values[17] = 1.0F;
  r.e->begin_micro_batch();
  EXPECT_THAT(usage_message([&] { r.e->write_state(p.id, state_kind::master, values); }), HasSubstr("micro-batch"));
  r.e->end_micro_batch();
  EXPECT_EQ(r.state(state_kind::master), before);
}

}  // namespace
}  // namespace zoe::testing
