// Bounded shadows (zoe.swap.shadows "bounded", optimizer_step.hpp): the NVMe states are written in
// place; a step that fails midway refuses reads of the states and rolls forward when retried, to
// the bits of an undisturbed step.
#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "engine_rig.hpp"
#include "fault_injecting_backend.hpp"
#include "zoe/engine/engine.hpp"

namespace zoe::testing {
namespace {

using engine::state_kind;

void bounded(engine::engine_config& c) { c.zoe.shadows = "bounded"; }

TEST(bounded_shadows, AStepThatFailsMidwayRollsForwardOnRetryToTheUndisturbedBits) {
  for (const kernels::dtype d : {kernels::dtype::bf16, kernels::dtype::fp32}) {
    SCOPED_TRACE(kernels::dtype_name(d));
    auto faults = std::make_shared<fault_plan>();
    rig disturbed("nvme", d, bounded, faults);
    rig clean("nvme", d, bounded);
    rig full("nvme", d);
    EXPECT_LT(disturbed.e->plan().nvme_bytes, full.e->plan().nvme_bytes);
    for (std::uint64_t step = 0; step < 2; ++step) {
      const auto g = gradients(clean.e->layout(), step, 0.01F);
      disturbed.micro_batch(g);
      clean.micro_batch(g);
      full.micro_batch(g);
      if (step == 1) {
        // The step's writes are its only ones: one of them, past the swap file's first half, fails.
        faults->add({.op = io::io_op::write, .begin = disturbed.e->plan().nvme_bytes / 2, .inject_errno = EIO});
        EXPECT_THROW(disturbed.e->step(1e-2), io_error);
        EXPECT_EQ(faults->fired(), 1);
        EXPECT_TRUE(disturbed.e->optimizer().part_done());
        EXPECT_THROW((void)disturbed.e->read_state(0, state_kind::master), usage_error)
            << "half-stepped states are not read";
        EXPECT_THROW(disturbed.e->step(2e-2), usage_error) << "it rolls forward only with the settings it ran with";
      }
      disturbed.e->step(1e-2);
      clean.e->step(1e-2);
      full.e->step(1e-2);
      EXPECT_FALSE(disturbed.e->optimizer().part_done());
    }
    for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
      EXPECT_EQ(disturbed.state(k), clean.state(k)) << engine::state_kind_name(k);
      EXPECT_EQ(clean.state(k), full.state(k)) << engine::state_kind_name(k) << ": bounded or full, the same step";
    }
  }
}

TEST(bounded_shadows, AFailedReadBeforeAnyPieceChangedLeavesEveryStateAsItWas) {
  auto faults = std::make_shared<fault_plan>();
  rig disturbed("nvme", kernels::dtype::bf16, bounded, faults);
  disturbed.micro_batch(gradients(disturbed.e->layout(), 0, 0.01F));
  std::vector<std::vector<std::vector<float>>> before;
  for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    before.push_back(disturbed.state(k));
  }
  faults->add({.op = io::io_op::read, .inject_errno = EIO});  // the first piece's first read
  EXPECT_THROW(disturbed.e->step(1e-2), io_error);
  EXPECT_EQ(faults->fired(), 1);
  EXPECT_FALSE(disturbed.e->optimizer().part_done());
  std::size_t i = 0;
  for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    EXPECT_EQ(disturbed.state(k), before[i++]) << engine::state_kind_name(k);
  }
}

}  // namespace
}  // namespace zoe::testing
