// offload_engine::measure_stages: each offload stage of a training step timed alone, over the
// model's real states, changing none of them (the demo's bound on a step's time: compute and the
// parameter reads overlap, then Adam and the optimizer's reads and writes), and the step's NVMe
// bytes through the raw I/O engine (its floor: io_s).
#include <chrono>
#include <exception>
#include <vector>

#include "step_arithmetic.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/engine/engine.hpp"
#include "zoe/engine/swap/raw_replay.hpp"

namespace zoe::engine {
namespace {

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point start) { return std::chrono::duration<double>(clock::now() - start).count(); }

// Ends the fetch of `m` that failed: a read that failed (or could not start) leaves the fetch open
// for its release; a module that cannot fit the arena at all opened none (usage_error then).
void release_failed(coordinator& c, module_id m) {
  try {
    c.release(m);
  } catch (const usage_error&) {  // no fetch was opened
  }
}

// One coordinator step that fetches, waits for and releases `order` as a micro-batch does, with no
// compute in between. On a failure the failed fetch is released and the step ended before the
// error goes on, so the coordinator is between steps again.
void replay(coordinator& c, const std::vector<module_id>& order) {
  c.begin_step();
  try {
    for (const module_id m : order) {
      try {
        c.fetch(m).wait();
      } catch (...) {
        release_failed(c, m);
        throw;
      }
      c.release(m);
    }
  } catch (...) {
    try {
      c.end_step();
    } catch (const std::exception& e) {
      log::error("measure_stages: ending the coordinator's step after a failed fetch: ", e.what());
    }
    throw;
  }
  c.end_step();
}

}  // namespace

stage_times offload_engine::measure_stages() {
  expect_between_steps("measure_stages");
  ZOE_EXPECTS(micro_batches_done_ == 0, "measure_stages: ", micro_batches_done_, " of the step's ",
              config_.gradient_accumulation_steps,
              " micro-batches are done and step() has not run; measure between steps");
  gradient_summary g;
  try {
    g = gradients_->summary();
  } catch (const usage_error&) {
    // The optimizer stages step over the last step's gradients: there must be some.
    throw usage_error(
        "measure_stages: no step has handed in its gradients yet (or the last one's were lost to a failed "
        "micro-batch); measure after a step");
  }
  stage_times out;
  coordinator& c = resources_->coord();

  // The parameter reads: the fetches of a micro-batch in the order the prefetch trace recorded
  // (forward, then backward), as many times as the step has micro-batches. Following the trace the
  // coordinator prefetches as in a step and records nothing. No trace means the steps fetch nothing:
  // they read no parameters. Every gathered copy is dropped first, as an optimizer step leaves them
  // (so the persistent parameters are read too), and afterwards, leaving the coordinator as it was
  // after an optimizer step.
  if (!c.policy().recording()) {
    const std::vector<module_id> order(c.policy().trace().begin(), c.policy().trace().end());
    c.drop_gathered();
    const auto started = clock::now();
    for (std::size_t i = 0; i < config_.gradient_accumulation_steps; ++i) replay(c, order);
    out.param_io_s = seconds_since(started);
    c.drop_gathered();
  }

  // The optimizer's stages over the last step's gradients with the next step's settings: Adam alone
  // on the slots and copies, then the NVMe reads and the writes to the shadow extents without Adam.
  // Neither commits anything.
  const detail::prepared_step next =
      detail::prepare_step(config_, adam_settings_, g, scaler_.scale(), lr_, scaler_.optimizer_steps() + 1);
  optimizer_->run_stages(next.adam, step_stages{.read = false, .adam = true, .write = false});
  out.adam_s = optimizer_->last().adam_seconds;
  optimizer_->run_stages(next.adam, step_stages{.read = true, .adam = false, .write = true});
  out.optimizer_io_s = optimizer_->last().seconds;

  // The last step's NVMe bytes, reads and writes together, through the raw I/O engine alone: the
  // drive's time for them. The stages above run one after the other and each through its own
  // pipeline, so their sum overstates the I/O floor of a step that overlaps them (the step
  // inside backward writes while the fetches read).
  out.io_read_bytes = last_step_read_;
  out.io_write_bytes = last_step_written_;
  if (const io::swap_store* store = resources_->store(); store != nullptr) {
    out.io_s = replay_raw(*store, resources_->movers().backend_name(), last_step_read_, last_step_written_).seconds;
  }
  return out;
}

}  // namespace zoe::engine
