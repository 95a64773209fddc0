// The gradient path's public calls (gradient_path.hpp): the micro-batch protocol, the buckets lent
// to backward by acquire() and taken back by reduce(). Its other jobs: gradient_path_impl.hpp.
#include "gradient_path_impl.hpp"

#include <algorithm>
#include <mutex>
#include <optional>
#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/units.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::engine {

// ---- gradient_path -------------------------------------------------------------------------------

gradient_path::gradient_path(tier_manager& tiers, communicator& comm, device& dev,
                             allocators::pinned_host_resource& pinned, mover* movers, gradient_path_options options)
    : impl_(std::make_unique<impl>(tiers, comm, dev, pinned, movers, options)) {}

gradient_path::~gradient_path() = default;

void gradient_path::begin_micro_batch(std::size_t index, std::size_t count) {
  impl& s = *impl_;
  const std::lock_guard lock(s.mutex);
  ZOE_EXPECTS(!s.open, "gradient_path::begin_micro_batch(", index, ", ", count, "): micro-batch ", s.index,
              " is still open (end_micro_batch first)");
  ZOE_EXPECTS(count >= 1 && index < count, "gradient_path::begin_micro_batch(", index, ", ", count,
              "): the index must lie in [0, count)");
  if (s.next_index == 0) {
    ZOE_EXPECTS(index == 0, "gradient_path::begin_micro_batch(", index, ", ", count,
                "): a step starts with micro-batch 0 (it overwrites the gradients)");
  } else {
    ZOE_EXPECTS(index == s.next_index && count == s.step_count, "gradient_path::begin_micro_batch(", index, ", ", count,
                "): micro-batch ", s.next_index, " of ", s.step_count, " comes next");
  }
  s.open = true;
  s.index = index;
  s.count = count;
  s.step_count = count;
  std::fill(s.touched.begin(), s.touched.end(), 0);
  for (auto& m : s.modules) m = {};
  if (s.local && index == 0) s.local->forget();
  if (index + 1 == count) {
    std::fill(s.sums.begin(), s.sums.end(), 0.0);
    std::fill(s.overflows.begin(), s.overflows.end(), 0);
  }
  if (index == 0) s.last_summary.reset();
}

std::vector<void*> gradient_path::acquire(module_id m, stream_view stream) {
  impl& s = *impl_;
  std::unique_lock lock(s.mutex);
  ZOE_EXPECTS(s.open, "gradient_path::acquire: no micro-batch is open (begin_micro_batch first)");
  ZOE_EXPECTS(m < s.modules.size(), "gradient_path::acquire: unknown module ", m, " (the model has ", s.modules.size(),
              ")");
  impl::module_slot& slot = s.modules[m];
  ZOE_EXPECTS(slot.stage == impl::module_stage::idle, "gradient_path::acquire: module '", s.module_name(m),
              "' was already acquired in micro-batch ", s.index);
  const std::uint64_t need = s.module_bytes(m);
  std::optional<detail::gradient_buckets::lease> lease;
  const std::thread::id me = std::this_thread::get_id();
  // From its first wait until it returns or throws, this thread counts as waiting: it cannot reduce
  // its modules meanwhile, whether it sleeps, re-checks or flushes. Re-registering on every wake
  // woke the other waiters each time, which woke it back: two waiters spun on each other.
  bool waiting = false;
  const auto stop_waiting = [&] {
    if (!std::exchange(waiting, false)) return;
    if (!lock.owns_lock()) lock.lock();  // a flush that threw
    s.waiting.erase(std::find(s.waiting.begin(), s.waiting.end(), me));
  };
  try {
    while (!(lease = s.buckets->try_take(need))) {
      // A sealed bucket whose modules are all reduced (sealed by this try_take or before) must be
      // issued before waiting for a bucket to drain: it may be the one to drain. Only such a
      // bucket: a flush wakes the waiters, and one with nothing to issue would wake them for nothing.
      if (s.buckets->ready_pending()) {
        lock.unlock();
        s.flush();
        lock.lock();
        continue;
      }
      // Back-pressure: every bucket is busy until a module in it is reduced and accumulated, unless
      // only this thread (or threads waiting here too) could reduce one: then nothing ever would.
      if (s.no_bucket_can_drain(me)) throw usage_error(s.no_bucket(m, need));
      if (!waiting) {
        ++s.counters.bucket_waits;
        s.waiting.push_back(me);
        waiting = true;
        // A thread already waiting re-checks: this one, now waiting too, can no longer reduce its modules.
        s.changed.notify_all();
      }
      s.changed.wait(lock);
      ZOE_EXPECTS(s.open, "gradient_path::acquire: the micro-batch ended while module '", s.module_name(m),
                  "' waited for a bucket");
    }
  } catch (...) {
    stop_waiting();
    throw;
  }
  stop_waiting();
  slot.stage = impl::module_stage::acquired;
  slot.acquired_on = me;
  slot.bucket = lease->bucket;
  slot.memory.clear();
  std::byte* at = lease->memory;
  std::vector<void*> out;  // one per parameter of the module, null for a frozen one
  for (const parameter_id id : s.tiers.layout().module(m).parameters) {
    const parameter_layout& p = s.param(id);
    if (p.frozen) {
      out.push_back(nullptr);
      continue;
    }
    slot.memory.push_back(at);
    out.push_back(at);
    at += round_up(p.padded_numel(s.shards()) * kernels::dtype_size(p.dtype), impl::bucket_alignment);
  }
  // The bucket this module moved on from, if any, is reduced while backward fills this one.
  const bool sealed = s.buckets->sealed_pending();
  lock.unlock();
  if (need > 0) s.dev.memset_async(lease->memory, 0, need, stream);
  if (sealed) s.flush();
  return out;
}

void gradient_path::reduce(module_id m, stream_view stream) {
  impl& s = *impl_;
  const impl::draining busy(s);  // the module's bucket may drain once this call has handed it on
  if (s.hold_locally(m, stream)) return;
  std::size_t bucket = 0;
  {
    const std::lock_guard lock(s.mutex);
    ZOE_EXPECTS(s.open, "gradient_path::reduce: no micro-batch is open");
    ZOE_EXPECTS(m < s.modules.size(), "gradient_path::reduce: unknown module ", m, " (the model has ", s.modules.size(),
                ")");
    impl::module_slot& slot = s.modules[m];
    ZOE_EXPECTS(slot.stage == impl::module_stage::acquired, "gradient_path::reduce: module '", s.module_name(m), "' ",
                slot.stage == impl::module_stage::idle ? "was not acquired" : "was already reduced", " in micro-batch ",
                s.index);
    slot.stage = impl::module_stage::reduced;
    bucket = slot.bucket;
    for (const parameter_id id : s.tiers.layout().module(m).trainable) {
      const parameter_layout& p = s.param(id);
      s.touched[p.id] = 1;
      s.counters.bytes_reduced += p.padded_numel(s.shards()) * kernels::dtype_size(p.dtype);
    }
    ++s.counters.modules_reduced;
  }
  // The module joins its bucket's reduction (impl::issue), once the work queued on `stream` so far
  // is done; the device homes' moves begin now, so a home in flight elsewhere fails this call.
  std::vector<parameter_id> begun;  // device homes whose write move this call began
  try {
    for (const parameter_id id : s.tiers.layout().module(m).trainable) {
      if (s.home(id).where != tier::device) continue;
      ZOE_EXPECTS(s.tiers.begin_move(id, state_kind::gradient, move_kind::write),
                  "gradient_path::reduce: the gradient of '", s.param(id).name, "' is in flight elsewhere");
      begun.push_back(id);
    }
    device_event ready = s.dev.create_event();
    s.dev.record(ready, stream);
    const std::lock_guard lock(s.mutex);
    s.modules[m].ready = std::move(ready);
    s.buckets->reduced(bucket, m);
  } catch (...) {
    // The bucket will not carry this module: end its moves, drop it, and fail the micro-batch.
    s.abandon(begun, stream);
    {
      const std::lock_guard lock(s.mutex);
      s.buckets->dropped(bucket);
    }
    s.changed.notify_all();
    throw;
  }
  s.flush();
}

void gradient_path::end_micro_batch() {
  impl& s = *impl_;
  if (s.local && s.open && s.index + 1 == s.count) {
    // Stage 1: modules accumulated earlier in the step but not acquired in its last micro-batch
    // are reduced now (zeros plus their accumulation), in module order on every rank.
    for (const module_id m : s.local->held_modules()) {
      try {
        (void)acquire(m, s.local->stream());
        reduce(m, s.local->stream());
      } catch (...) {
        s.fail(carried_error::of(std::current_exception()));
      }
    }
  }
  std::unique_lock lock(s.mutex);
  ZOE_EXPECTS(s.open, "gradient_path::end_micro_batch: no micro-batch is open");
  for (std::size_t m = 0; m < s.modules.size(); ++m) {
    ZOE_EXPECTS(s.modules[m].stage != impl::module_stage::acquired, "gradient_path::end_micro_batch: module '",
                s.module_name(static_cast<module_id>(m)), "' was acquired but not reduced in micro-batch ", s.index);
  }
  // The bucket being filled is complete: every sealed bucket is reduced before the wait below.
  s.buckets->seal();
  lock.unlock();
  s.flush();
  lock.lock();
  const bool first = s.index == 0;
  const bool last = s.index + 1 == s.count;
  if (first || last) {
    // Parameters the micro-batch did not touch: zeroed in micro-batch 0, summed in the last.
    impl::job rest;
    rest.first = first;
    rest.last = last;
    for (const parameter_layout& p : s.tiers.layout().parameters()) {
      if (!p.frozen && s.touched[p.id] == 0) rest.params.push_back(p.id);
    }
    if (!rest.params.empty()) {
      s.jobs.push_back(std::move(rest));
      ++s.pending;
      s.changed.notify_all();
    }
  }
  s.wait_idle(lock);
  s.open = false;
  std::optional<carried_error> failure = std::exchange(s.failure, std::nullopt);
  if (failure) {
    s.next_index = 0;  // the step must start again from micro-batch 0, which overwrites
    failure->raise();
  }
  s.next_index = last ? 0 : s.index + 1;
  if (!last) return;
  lock.unlock();
  const gradient_summary out = s.summarize();
  lock.lock();
  s.last_summary = out;
}

gradient_summary gradient_path::summary() const {
  const std::lock_guard lock(impl_->mutex);
  ZOE_EXPECTS(impl_->last_summary.has_value(),
              "gradient_path::summary: no step has ended its last micro-batch since the step began");
  return *impl_->last_summary;
}

gradient_path_stats gradient_path::stats() const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->counters;
}

}  // namespace zoe::engine
