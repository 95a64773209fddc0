// The caller side of the gradient path: sealed buckets handed to the communicator in order
// (reduce-scatter, all-reduce at stage 0, qgZ's quantized reduce-scatter), each becoming a job for
// the worker; stage 1's local accumulation before the last micro-batch; and the cleanup when a
// reduction fails.
#include "gradient_path_impl.hpp"

#include <algorithm>
#include <exception>
#include <mutex>
#include <utility>

#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::engine {

// The reduction of one bucket's gradients to their owners (mean over the ranks): one coalesced
// reduce-scatter, or qgZ's quantized reduce-scatter per parameter when the plan lent its scratch
// (each parameter is quantized in blocks of its own and swizzled for the two all-to-alls; carrying
// a bucket's parameters as one is not done yet). At stage 0 every rank is an owner of the whole: an
// all-reduce per parameter, in place, in the same pairwise tree over the ranks as the
// reduce-scatter (communicator.hpp), so the ranks hold the same bits.
void gradient_path::impl::reduce_bucket(std::span<const reduce_part> parts, stream_view on) {
  if (replicated()) {
    for (const reduce_part& part : parts)
      comm.all_reduce(part.send, part.recv, part.count, part.type, reduce_op::mean, on);
    return;
  }
  if (qgz_scratch == nullptr) {
    comm.reduce_scatter_coalesced(parts, reduce_op::mean, on);
    return;
  }
  const std::lock_guard lock(qgz_mutex);
  for (const reduce_part& part : parts) {
    if (qgz_done.valid()) {
      dev.wait(on, qgz_done);
    } else {
      qgz_done = dev.create_event();
    }
    quantized_reduce_scatter(comm, dev, part.send, part.recv, part.count, part.type, reduce_op::mean,
                             std::span(qgz_scratch, options.quantized_scratch_bytes), on);
    dev.record(qgz_done, on);
  }
}

std::uint64_t gradient_path::impl::module_bytes(module_id m) const {
  std::uint64_t bytes = 0;
  for (const parameter_id id : tiers.layout().module(m).trainable) {
    const parameter_layout& p = param(id);
    bytes += round_up(p.padded_numel(shards()) * kernels::dtype_size(p.dtype), bucket_alignment);
  }
  return bytes;
}

void gradient_path::impl::abandon(const std::vector<parameter_id>& begun, stream_view on) noexcept {
  // The gradients are lost: end_micro_batch reports this failure, and the step starts over.
  fail(carried_error::of(std::current_exception()));
  // Kernels already queued on `on` read the bucket and write the device homes: let them finish
  // before the homes are given up and the bucket is lent again. A device whose stream cannot be
  // synchronized runs nothing more, so its bucket is handed back all the same.
  try {
    dev.synchronize(on);
  } catch (const std::exception& e) {
    log::error("gradient_path: the stream of a reduction that failed cannot be synchronized: ", e.what());
  }
  for (const parameter_id p : begun) {
    try {
      tiers.abort_move(p, state_kind::gradient);  // released and dirty: the next step overwrites it
    } catch (const std::exception& e) {
      log::error("gradient_path: cannot end the move of the gradient of '", param(p).name, "': ", e.what());
    }
  }
}

void gradient_path::impl::flush() {
  const draining busy(*this);
  const std::lock_guard issuing(issue_mutex);
  std::vector<detail::gradient_buckets::batch> ready;
  {
    const std::lock_guard lock(mutex);
    ready = buckets->take_ready();
  }
  for (const detail::gradient_buckets::batch& b : ready) issue(b);
}

void gradient_path::impl::issue(const detail::gradient_buckets::batch& b) {
  if (b.modules.empty()) return;  // every module of the bucket was dropped
  const stream_view on = reduce_stream.view();
  job j;
  j.bucket = b.bucket;
  j.modules = b.modules.size();
  j.first = index == 0;
  j.last = index + 1 == count;
  std::vector<reduce_part> parts;
  std::vector<parameter_id> device_homes;  // their write moves were begun by reduce()
  for (const std::size_t m : b.modules) {
    for (const parameter_id id : tiers.layout().module(static_cast<module_id>(m)).trainable) {
      if (home(id).where == tier::device) device_homes.push_back(id);
    }
  }
  try {
    for (const std::size_t m : b.modules) {
      const module_slot& slot = modules[m];
      const std::vector<parameter_id>& params = tiers.layout().module(static_cast<module_id>(m)).trainable;
      for (std::size_t i = 0; i < params.size(); ++i) {
        const parameter_layout& p = param(params[i]);
        std::byte* const shard = static_cast<std::byte*>(slot.memory[i]) +
                                 tiers.layout().shard_of(comm.rank()) * p.shard_numel * kernels::dtype_size(p.dtype);
        parts.push_back({slot.memory[i], shard, static_cast<std::size_t>(p.shard_numel), p.dtype});
        j.params.push_back(p.id);
        j.sources.push_back(shard);
      }
      dev.wait(on, slot.ready);
    }
    reduce_bucket(parts, on);
    for (std::size_t i = 0; i < j.params.size(); ++i) {
      if (home(j.params[i]).where == tier::device) launch_device_home(j.params[i], j.sources[i], j.first, j.last, on);
    }
    j.ready = dev.create_event();
    dev.record(j.ready, on);
  } catch (...) {
    // No job will end these moves or give the bucket back: do it here, and fail the micro-batch.
    abandon(device_homes, on);
    {
      const std::lock_guard lock(mutex);
      buckets->release(b.bucket, b.modules.size());
    }
    changed.notify_all();
    return;
  }
  enqueue(std::move(j));
}

bool gradient_path::impl::hold_locally(module_id m, stream_view on) {
  if (!local) return false;
  std::size_t bucket = 0;
  bool last = false;
  std::vector<void*> memory;
  {
    const std::lock_guard lock(mutex);
    // A misuse is reduce()'s to name.
    if (!open || m >= modules.size() || modules[m].stage != module_stage::acquired) return false;
    last = index + 1 == count;
    if (last && !local->holds(m)) return false;
    bucket = modules[m].bucket;
    memory = modules[m].memory;
    if (!last) {
      modules[m].stage = module_stage::reduced;
      buckets->set_aside(bucket);  // not reduced with its bucket; the job below releases it
    }
  }
  try {
    if (last) {
      local->fold(m, memory, on);
      return false;
    }
    local->add(m, memory, on);
    // The bucket returns once the adds queued on `on` have read it.
    job j;
    j.bucket = bucket;
    j.modules = 1;
    j.ready = dev.create_event();
    dev.record(j.ready, on);
    enqueue(std::move(j));
  } catch (...) {
    if (last) {
      const std::lock_guard lock(mutex);
      modules[m].stage = module_stage::reduced;
    }
    abandon({}, on);
    {
      const std::lock_guard lock(mutex);
      if (last) {
        buckets->dropped(bucket);
      } else {
        buckets->release(bucket);
      }
    }
    changed.notify_all();
    throw;
  }
  return true;
}

void gradient_path::impl::enqueue(job j) {
  {
    const std::lock_guard lock(mutex);
    jobs.push_back(std::move(j));
    ++pending;
  }
  changed.notify_all();
}

void gradient_path::impl::wait_idle(std::unique_lock<std::mutex>& lock) {
  changed.wait(lock, [this] { return pending == 0; });
}

bool gradient_path::impl::no_bucket_can_drain(std::thread::id me) const {
  if (pending != 0 || calls_draining != 0) return false;
  return std::all_of(modules.begin(), modules.end(), [&](const module_slot& x) {
    return x.stage != module_stage::acquired || x.acquired_on == me ||
           std::find(waiting.begin(), waiting.end(), x.acquired_on) != waiting.end();
  });
}

std::string gradient_path::impl::no_bucket(module_id m, std::uint64_t need) const {
  std::string held;
  for (std::size_t k = 0; k < modules.size(); ++k) {
    if (modules[k].stage != module_stage::acquired) continue;
    held += str(held.empty() ? "" : ", ", "'", module_name(static_cast<module_id>(k)), "' (",
                format_bytes(module_bytes(static_cast<module_id>(k))), ")");
  }
  return str("gradient_path::acquire: module '", module_name(m), "' needs ", format_bytes(need),
             " of gradient memory, and no gradient bucket (", buckets->count(), " of ",
             format_bytes(buckets->bucket_bytes()),
             ") can drain before these modules, whose gradients were acquired and not reduced, are reduced: ", held,
             " (buckets are reduced whole, in the order backward filled them); no other thread will reduce them, "
             "so the wait would never end: reduce them first (zoe_reduce_gradients), or raise "
             "zero_optimization.reduce_bucket_size so that they fit beside the modules acquired before their "
             "reduction");
}

}  // namespace zoe::engine
