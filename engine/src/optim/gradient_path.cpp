// The gradient path: buckets lent to backward, the reduction through the communicator, and the
// fp32 accumulation into each shard's gradient home (gradient_path.hpp).
//
// Threads: the callers of acquire/reduce; one worker thread of the path, which drives the swap
// channel and does the host side of every accumulation (host homes, nvme read-modify-writes); and
// the worker of the path's own stream (on the host device, one thread per stream). Device homes
// are accumulated by a kernel on the caller's stream, so they cost no thread of ours.
//
// Summary: each parameter's sum of squares is kernels::sum_of_squares over its whole fp32 shard.
// Device and host homes call it on the whole shard; an nvme shard is processed in pieces that start
// on multiples of the sum's 64 Ki-element chunks (the plan sizes the staging buffers so), each piece
// writing its chunks' partials into the parameter's workspace, and the shard's value is then those
// partials added in order from 0.0, exactly as the whole-shard call adds them (cast.cpp).
#include "zoe/engine/optim/gradient_path.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "gradient_buckets.hpp"
#include "local_accumulation.hpp"
#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/stream_launch.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"
#include "zoe/engine/swap/carried_error.hpp"
#include "zoe/io/swap_channel.hpp"
#include "zoe/kernels/cast.hpp"
#include "zoe/kernels/cuda.hpp"

namespace zoe::engine {
namespace {

using kernels::dtype;

constexpr std::size_t sum_chunk = gradient_sum_chunk_bytes / sizeof(float);
// Each parameter's gradients start on this boundary inside a bucket (the arena's alignment).
constexpr std::uint64_t bucket_alignment = arena_alignment;

std::size_t chunks_of(std::uint64_t elements) {
  return static_cast<std::size_t>((elements + sum_chunk - 1) / sum_chunk);
}

// The device scratch of one device-home parameter's summary on a CUDA device: the sum of
// squares' workspace, its result and the inf/NaN flag.
struct device_summary_slot {
  std::uint64_t workspace = 0;  ///< byte offset of the workspace in the scratch
  std::uint64_t result = 0;     ///< byte offset of the double
  std::uint64_t flag = 0;       ///< byte offset of the uint32 flag
};

// One reduced bucket (or, with no sources, the parameters a micro-batch did not touch) for the
// worker.
struct job {
  std::vector<parameter_id> params;
  std::vector<std::byte*> sources;    ///< the reduced shard in device memory (empty: none)
  device_event ready;                 ///< recorded after the reduction and the device-home kernels
  std::optional<std::size_t> bucket;  ///< released once the job is done
  std::size_t modules = 0;            ///< the bucket's modules the job releases
  bool first = false;
  bool last = false;
};

}  // namespace

struct gradient_path::impl {
  impl(tier_manager& t, communicator& c, device& d, allocators::pinned_host_resource& p, io::swap_store* s,
       gradient_path_options o);
  ~impl();
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  // ---- caller side ----
  [[nodiscard]] const parameter_layout& param(parameter_id p) const { return tiers.layout().parameter(p); }
  [[nodiscard]] const state_location& home(parameter_id p) const { return tiers.location(p, state_kind::gradient); }
  [[nodiscard]] std::string module_name(module_id m) const { return tiers.layout().module(m).name; }
  /// The shards the layout cuts each parameter into: the ranks at stages 1-3, 1 at stage 0.
  [[nodiscard]] std::size_t shards() const noexcept { return tiers.layout().options().world_size; }
  /// Stage 0 on several ranks: every rank holds whole gradients, reduced by an all-reduce.
  [[nodiscard]] bool replicated() const noexcept { return tiers.layout().options().replicas > 1; }
  [[nodiscard]] std::uint64_t module_bytes(module_id m) const;
  void launch_device_home(parameter_id p, const std::byte* source, bool first, bool last, stream_view stream);
  void enqueue(job j);
  /// Called from the handler of a reduce() or an issue() that threw: records the failure for
  /// end_micro_batch, waits for the work queued on `on` and aborts the device homes' moves begun.
  /// The caller gives the bucket back.
  void abandon(const std::vector<parameter_id>& begun, stream_view on) noexcept;
  /// Issues the reductions of the sealed buckets whose modules were all reduced, oldest first (the
  /// same order on every rank), each as one coalesced reduce-scatter on the reduction stream.
  /// Called without `mutex`. Never throws beyond allocation: a failed reduction fails the micro-batch.
  void flush();
  void issue(const detail::gradient_buckets::batch& b);
  void wait_idle(std::unique_lock<std::mutex>& lock);
  /// Under `mutex`, after try_take failed: whether no bucket can ever drain for thread `me`. Buckets
  /// drain through jobs (`pending`), through the reduce() and flush() calls under way (`draining`)
  /// and through reduce() of the modules acquired and not reduced; when none of the first two is
  /// under way and every such module was acquired by `me` or by a thread itself waiting in
  /// acquire(), nobody is left to reduce one.
  [[nodiscard]] bool no_bucket_can_drain(std::thread::id me) const;
  /// Counts a reduce() or flush() as under way for its scope, and wakes the waiters in acquire()
  /// at its end (the bucket it handed on may have drained, or may be the one to wait for).
  struct draining {
    impl& s;
    explicit draining(impl& path) : s(path) {
      const std::lock_guard lock(s.mutex);
      ++s.calls_draining;
    }
    ~draining() {
      {
        const std::lock_guard lock(s.mutex);
        --s.calls_draining;
      }
      s.changed.notify_all();
    }
    draining(const draining&) = delete;
    draining& operator=(const draining&) = delete;
  };
  /// acquire()'s usage_error when no_bucket_can_drain: the modules holding the buckets and the keys.
  [[nodiscard]] std::string no_bucket(module_id m, std::uint64_t need) const;

  // ---- worker side ----
  void run() noexcept;
  void process(job& j, io::swap_channel* channel);
  void process_device(parameter_id p, const std::byte* source, bool first, bool last);
  void process_host(parameter_id p, const std::byte* source, bool first, bool last);
  void process_nvme(parameter_id p, const std::byte* source, bool first, bool last, io::swap_channel& channel);
  /// Copies n elements of p's reduced gradient from `source` (device) into `lease` and waits.
  void copy_to_host(parameter_id p, const std::byte* source, std::uint64_t first_element, std::uint64_t n,
                    const allocators::buffer_lease& lease);
  void fail(carried_error e);
  void add_stat(std::uint64_t gradient_path_stats::*field, std::uint64_t n);

  tier_manager& tiers;
  communicator& comm;
  device& dev;
  io::swap_store* store;
  gradient_path_options options;
  bool any_nvme = false;
  bool any_off_device = false;

  std::vector<std::byte*> bucket_memory;
  std::optional<detail::gradient_buckets> buckets;
  std::optional<allocators::buffer_pool> staging;
  // Staging buffers of requests a failed swap channel may still hold: they go back to the pool only
  // when the path closes, after the worker (and with it the channel) is gone.
  std::vector<allocators::buffer_lease> quarantined;
  device_stream stream;  ///< the path's copies and the device homes' work it starts itself
  /// The buckets' reductions and the device homes' kernels after them: backward goes on filling the
  /// next bucket on its own stream meanwhile (overlap_comm).
  device_stream reduce_stream;
  std::mutex issue_mutex;  ///< held while a flush takes ready buckets and issues them, so they go out in order
  /// Stage 1's whole-gradient accumulation (options.accumulate_locally), after `staging`, which it uses.
  std::optional<detail::local_accumulation> local;
  /// Stage 1, in reduce(): before the last micro-batch, adds module m to the local accumulation and
  /// gives its bucket back (true: nothing to reduce); in the last, folds it into the bucket (false).
  bool hold_locally(module_id m, stream_view on);

  // qgZ: the quantized reduce-scatter's scratch, lent to one reduction at a time; a reduction
  // queued on another stream than the last one's waits for it (qgz_done).
  std::byte* qgz_scratch = nullptr;
  std::mutex qgz_mutex;
  device_event qgz_done;
  void reduce_bucket(std::span<const reduce_part> parts, stream_view on);

  // CUDA only: the device-home summaries' scratch (see device_summary_slot).
  std::byte* scratch = nullptr;
  std::uint64_t scratch_bytes = 0;
  std::vector<device_summary_slot> slots;

  // Per parameter, written by whoever finishes its accumulation on the last micro-batch.
  std::vector<double> sums;
  std::vector<std::uint8_t> overflows;
  std::vector<std::vector<double>> partials;  ///< nvme homes: the sum's per-chunk partials

  // Shared state, under mutex.
  mutable std::mutex mutex;
  std::condition_variable changed;
  std::deque<job> jobs;
  std::size_t pending = 0;  ///< jobs queued or running
  bool stopping = false;
  std::optional<carried_error> failure;
  gradient_path_stats counters;
  std::vector<std::thread::id> waiting;  ///< threads waiting in acquire() for a bucket (one entry per wait)
  std::size_t calls_draining = 0;        ///< reduce() and flush() calls under way (draining)

  // The micro-batch, touched by the thread that begins and ends it (and acquire/reduce, under mutex).
  enum class module_stage : std::uint8_t { idle, acquired, reduced };
  struct module_slot {
    module_stage stage = module_stage::idle;
    std::size_t bucket = 0;
    std::vector<void*> memory;
    device_event ready;           ///< recorded by reduce() on backward's stream: the gradients are complete
    std::thread::id acquired_on;  ///< the thread that acquired it, counted on to reduce it
  };
  std::vector<module_slot> modules;
  std::vector<std::uint8_t> touched;  ///< parameters reduced in this micro-batch
  bool open = false;
  std::size_t index = 0;
  std::size_t count = 0;
  std::size_t next_index = 0;  ///< the micro-batch that must come next (0: a new step)
  std::size_t step_count = 0;
  std::optional<gradient_summary> last_summary;

  std::jthread worker;  // last: started once everything above exists
};

gradient_path::impl::impl(tier_manager& t, communicator& c, device& d, allocators::pinned_host_resource& p,
                          io::swap_store* s, gradient_path_options o)
    : tiers(t), comm(c), dev(d), store(s), options(o) {
  const model_layout& layout = tiers.layout();
  ZOE_EXPECTS(comm.size() == layout.ranks(), "gradient_path: the layout is for ", layout.ranks(),
              " ranks, the communicator has ", comm.size());
  ZOE_EXPECTS(!replicated() || options.quantized_scratch_bytes == 0,
              "gradient_path: a layout held whole by every rank (stage 0) is all-reduced, which qgZ does not "
              "quantize (zero_optimization.zero_quantized_gradients)");
  const std::size_t n = layout.parameters().size();
  sums.assign(n, 0.0);
  overflows.assign(n, 0);
  partials.resize(n);
  touched.assign(n, 0);
  modules.resize(layout.modules().size());

  std::uint64_t largest_off_device = 0;
  std::uint64_t largest_module = 0;
  std::string largest_name;
  for (const module_layout& m : layout.modules()) {
    if (module_bytes(m.id) > largest_module) {
      largest_module = module_bytes(m.id);
      largest_name = m.name;
    }
  }
  for (const parameter_layout& prm : layout.parameters()) {
    const state_location& h = home(prm.id);
    if (prm.frozen || h.where == tier::device) continue;
    any_off_device = true;
    largest_off_device = std::max(largest_off_device, h.bytes);
    if (h.where == tier::nvme) {
      any_nvme = true;
      partials[prm.id].assign(chunks_of(prm.shard_numel), 0.0);
    }
  }
  ZOE_EXPECTS(options.bucket_count >= 1 && options.bucket_bytes >= largest_module,
              "gradient_path: ", options.bucket_count, " bucket(s) of ", options.bucket_bytes,
              " bytes cannot hold module '", largest_name, "' (", largest_module,
              " bytes of gradients); the plan sizes them from zero_optimization.reduce_bucket_size and overlap_comm");
  if (any_off_device) {
    ZOE_EXPECTS(options.staging_buffer_count >= 2 && options.staging_buffer_bytes > 0,
                "gradient_path: ", options.staging_buffer_count, " staging buffers of ", options.staging_buffer_bytes,
                " bytes, but gradients are off the device: a piece needs two (footprint_plan::gradient_buffer_*)");
    // A piece that does not cover a whole shard must cover whole chunks of the sum and of the store.
    if (options.staging_buffer_bytes < largest_off_device) {
      ZOE_EXPECTS(
          options.staging_buffer_bytes % gradient_sum_chunk_bytes == 0 &&
              (!any_nvme || store == nullptr || options.staging_buffer_bytes % store->options().io.block_size == 0),
          "gradient_path: staging buffers of ", options.staging_buffer_bytes,
          " bytes must hold whole 64 Ki-element fp32 chunks and whole aio.block_size chunks");
    }
  }
  ZOE_EXPECTS(!any_nvme || store != nullptr, "gradient_path: gradients are on nvme but no swap store was given");

  try {
    for (std::size_t b = 0; b < options.bucket_count; ++b) {
      bucket_memory.push_back(static_cast<std::byte*>(dev.allocate(options.bucket_bytes)));
    }
  } catch (const memory_error& e) {
    for (std::byte* m : bucket_memory) dev.deallocate(m, options.bucket_bytes);
    throw memory_error(
        str("gradient_path: ", options.bucket_count, " gradient bucket(s) of ", options.bucket_bytes,
            " bytes (zero_optimization.reduce_bucket_size, zero_optimization.overlap_comm): ", e.what()));
  } catch (...) {
    for (std::byte* m : bucket_memory) dev.deallocate(m, options.bucket_bytes);
    throw;
  }
  buckets.emplace(bucket_memory, options.bucket_bytes);
  counters.device_bucket_bytes = options.bucket_bytes * options.bucket_count;
  try {
    if (any_off_device) {
      staging.emplace(p, allocators::buffer_pool_options{.buffer_count = options.staging_buffer_count,
                                                         .buffer_size = options.staging_buffer_bytes,
                                                         .alignment = 4096,
                                                         .name = "gradient staging buffers"});
      counters.pinned_bytes = options.staging_buffer_count * options.staging_buffer_bytes;
    }
    if (dev.kind() == device_kind::cuda) {
      // Device homes' summaries stay on the device until the last micro-batch ends.
      slots.resize(n);
      for (const parameter_layout& prm : layout.parameters()) {
        if (prm.frozen || home(prm.id).where != tier::device) continue;
        // The workspace, then the result and the flag in the last 16 bytes (as the plan counts it).
        const std::uint64_t end = scratch_bytes + gradient_norm_scratch_bytes(prm.shard_numel);
        slots[prm.id].workspace = scratch_bytes;
        slots[prm.id].result = end - 16;
        slots[prm.id].flag = end - 8;
        scratch_bytes = end;
      }
      if (scratch_bytes > 0) scratch = static_cast<std::byte*>(dev.allocate(scratch_bytes));
    }
    if (options.quantized_scratch_bytes > 0) {
      std::size_t need = 0;
      const kernels::topology topo = qgz_topology(comm);
      for (const parameter_layout& prm : layout.parameters()) {
        need = std::max(need, quantized_reduce_scatter_scratch(topo, prm.shard_numel, dev.kind()));
      }
      ZOE_EXPECTS(options.quantized_scratch_bytes >= need, "gradient_path: the quantized reduce-scatter needs ", need,
                  " bytes of scratch for the largest parameter; the plan lent ", options.quantized_scratch_bytes,
                  " (zero_optimization.zero_quantized_gradients)");
      qgz_scratch = static_cast<std::byte*>(dev.allocate(options.quantized_scratch_bytes));
    }
    if (options.accumulate_locally) local.emplace(tiers, shards(), dev, staging ? &*staging : nullptr);
    stream = dev.create_stream();
    reduce_stream = dev.create_stream();
    worker = std::jthread([this] { run(); });
  } catch (...) {
    local.reset();
    staging.reset();
    if (qgz_scratch != nullptr) dev.deallocate(qgz_scratch, options.quantized_scratch_bytes);
    if (scratch != nullptr) dev.deallocate(scratch, scratch_bytes);
    for (std::byte* m : bucket_memory) dev.deallocate(m, options.bucket_bytes);
    throw;
  }
}

gradient_path::impl::~impl() {
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [this] { return pending == 0; });
    stopping = true;
  }
  changed.notify_all();
  if (worker.joinable()) worker.join();
  try {
    dev.synchronize(stream.view());
  } catch (const std::exception& e) {
    log::error("gradient_path: the path's stream failed while closing: ", e.what());
  }
  try {
    dev.synchronize(reduce_stream.view());
  } catch (const std::exception& e) {
    log::error("gradient_path: the reduction stream failed while closing: ", e.what());
  }
  stream = device_stream{};
  reduce_stream = device_stream{};
  quarantined.clear();
  local.reset();
  staging.reset();
  if (qgz_scratch != nullptr) {
    try {
      if (qgz_done.valid()) dev.synchronize(qgz_done);  // the last reduction has read its scratch
    } catch (const std::exception& e) {
      log::error("gradient_path: a quantized reduce-scatter failed while closing: ", e.what());
    }
    dev.deallocate(qgz_scratch, options.quantized_scratch_bytes);
  }
  if (scratch != nullptr) dev.deallocate(scratch, scratch_bytes);
  for (std::byte* m : bucket_memory) dev.deallocate(m, options.bucket_bytes);
}

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

// ---- caller side ---------------------------------------------------------------------------------

void gradient_path::impl::launch_device_home(parameter_id p, const std::byte* source, bool first, bool last,
                                             stream_view on) {
  const parameter_layout& prm = param(p);
  const std::size_t n = prm.shard_numel;
  auto* const target = static_cast<float*>(home(p).device);
  const kernels::const_tensor_view src{prm.dtype, source, n};
  const kernels::tensor_view dst{dtype::fp32, target, n};
  std::function<void()> host_task;
  std::function<void(stream_view)> cuda_launcher;
  if (dev.kind() == device_kind::host) {
    host_task = [this, p, src, dst, source, first, last] {
      if (source != nullptr) {
        if (first) {
          kernels::cast(src, dst);
        } else {
          kernels::accumulate(src, {static_cast<float*>(dst.data), dst.count});
        }
      } else if (first) {
        std::memset(dst.data, 0, dst.bytes());
      }
      if (last) {
        sums[p] = kernels::sum_of_squares(dst);
        overflows[p] = kernels::has_inf_nan(dst) ? 1 : 0;
      }
    };
  } else {
    cuda_launcher = [this, p, src, dst, source, first, last](stream_view s) {
      if (source != nullptr) {
        if (first) {
          kernels::cuda::cast(src, dst, s);
        } else {
          kernels::cuda::accumulate(src, {static_cast<float*>(dst.data), dst.count}, s);
        }
      } else if (first) {
        dev.memset_async(dst.data, 0, dst.bytes(), s);
      }
      if (last) {
        const device_summary_slot& slot = slots[p];
        auto* const flag = reinterpret_cast<std::uint32_t*>(scratch + slot.flag);
        dev.memset_async(flag, 0, sizeof(std::uint32_t), s);
        const std::size_t ws = kernels::cuda::sum_of_squares_workspace(dst.count);
        kernels::cuda::sum_of_squares(dst, reinterpret_cast<double*>(scratch + slot.result),
                                      std::span<std::byte>(scratch + slot.workspace, ws), s);
        kernels::cuda::has_inf_nan(dst, flag, s);
      }
    };
  }
  launch_kernel(dev, on, std::move(host_task), cuda_launcher);
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

// ---- worker side ---------------------------------------------------------------------------------

void gradient_path::impl::run() noexcept {
  std::optional<io::swap_channel> channel;
  std::optional<carried_error> channel_error;
  if (any_nvme) {
    try {
      channel.emplace(*store);
    } catch (...) {
      channel_error = carried_error::of(std::current_exception());
    }
  }
  for (;;) {
    job j;
    {
      std::unique_lock lock(mutex);
      changed.wait(lock, [this] { return stopping || !jobs.empty(); });
      if (jobs.empty()) return;
      j = std::move(jobs.front());
      jobs.pop_front();
    }
    const auto start = std::chrono::steady_clock::now();
    if (channel_error) fail(*channel_error);
    try {
      process(j, channel ? &*channel : nullptr);
    } catch (...) {
      fail(carried_error::of(std::current_exception()));
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    {
      const std::lock_guard lock(mutex);
      if (j.bucket) buckets->release(*j.bucket, j.modules);
      counters.accumulate_seconds += took.count();
      --pending;
    }
    changed.notify_all();
  }
}

void gradient_path::impl::process(job& j, io::swap_channel* channel) {
  if (j.ready.valid()) {
    try {
      dev.synchronize(j.ready);
    } catch (...) {
      // The device homes' kernels reduce() queued (their write moves begun there) may not have
      // run: their moves end failed, leaving them released and dirty, not in flight for good.
      for (std::size_t i = 0; i < j.params.size() && !j.sources.empty(); ++i) {
        if (home(j.params[i]).where != tier::device) continue;
        try {
          tiers.abort_move(j.params[i], state_kind::gradient);
        } catch (const std::exception& e) {
          log::error("gradient_path: cannot end the move of the gradient of '", param(j.params[i]).name,
                     "': ", e.what());
        }
      }
      throw;
    }
  }
  for (std::size_t i = 0; i < j.params.size(); ++i) {
    const parameter_id p = j.params[i];
    const std::byte* source = j.sources.empty() ? nullptr : j.sources[i];
    try {
      switch (home(p).where) {
        case tier::device: process_device(p, source, j.first, j.last); break;
        case tier::host: process_host(p, source, j.first, j.last); break;
        case tier::nvme:
          ZOE_ASSERT(channel != nullptr);
          process_nvme(p, source, j.first, j.last, *channel);
          break;
      }
    } catch (...) {
      // One parameter failing does not stop the others: their moves must end, and the bucket drain.
      fail(carried_error::of(std::current_exception()));
    }
  }
}

void gradient_path::impl::process_device(parameter_id p, const std::byte* source, bool first, bool last) {
  if (source != nullptr) {
    tiers.finish_move(p, state_kind::gradient);  // begun by reduce(); its kernel has run
    return;
  }
  // A parameter the micro-batch did not touch: zeroed in micro-batch 0, summed in the last.
  const bool write = first;
  if (write)
    ZOE_EXPECTS(tiers.begin_move(p, state_kind::gradient, move_kind::write), "gradient_path: the gradient of '",
                param(p).name, "' is in flight elsewhere");
  try {
    launch_device_home(p, nullptr, first, last, stream.view());
    dev.synchronize(stream.view());
  } catch (...) {
    if (write) tiers.abort_move(p, state_kind::gradient);
    throw;
  }
  if (write) tiers.finish_move(p, state_kind::gradient);
}

void gradient_path::impl::copy_to_host(parameter_id p, const std::byte* source, std::uint64_t first_element,
                                       std::uint64_t n, const allocators::buffer_lease& lease) {
  const std::size_t element = kernels::dtype_size(param(p).dtype);
  dev.copy_async(lease.data(), source + first_element * element, n * element, copy_kind::device_to_host, stream.view());
  dev.synchronize(stream.view());
  add_stat(&gradient_path_stats::bytes_to_host, n * element);
}

void gradient_path::impl::process_host(parameter_id p, const std::byte* source, bool first, bool last) {
  const parameter_layout& prm = param(p);
  const std::span<std::byte> bytes = home(p).host;
  auto* const target = reinterpret_cast<float*>(bytes.data());
  const std::uint64_t n = prm.shard_numel;
  const bool write = source != nullptr || first;
  if (write) {
    ZOE_EXPECTS(tiers.begin_move(p, state_kind::gradient, move_kind::write), "gradient_path: the gradient of '",
                prm.name, "' is in flight elsewhere");
  }
  try {
    if (source == nullptr && first) std::memset(target, 0, n * sizeof(float));
    if (source != nullptr) {
      const std::uint64_t piece = options.staging_buffer_bytes / sizeof(float);
      allocators::buffer_lease lease = staging->acquire();
      for (std::uint64_t e = 0; e < n; e += piece) {
        const std::uint64_t len = std::min(piece, n - e);
        copy_to_host(p, source, e, len, lease);
        const kernels::const_tensor_view src{prm.dtype, lease.data(), static_cast<std::size_t>(len)};
        if (first) {
          kernels::cast(src, kernels::tensor_view{dtype::fp32, target + e, static_cast<std::size_t>(len)});
        } else {
          kernels::accumulate(src, std::span<float>(target + e, static_cast<std::size_t>(len)));
        }
      }
    }
  } catch (...) {
    if (write) tiers.abort_move(p, state_kind::gradient);
    throw;
  }
  if (write) tiers.finish_move(p, state_kind::gradient);
  if (last) {
    const kernels::const_tensor_view all{dtype::fp32, target, static_cast<std::size_t>(n)};
    sums[p] = kernels::sum_of_squares(all);
    overflows[p] = kernels::has_inf_nan(all) ? 1 : 0;
  }
}

// The read-modify-write of an nvme home, piece by piece: [copy the reduced piece from the device]
// and [read the home's piece] into two staging buffers, add (or, in micro-batch 0, cast: no read),
// take the piece's part of the summary, write it back. A piece's write runs while the next piece is
// copied, read and added; its buffers return once the write is known good. A parameter the
// micro-batch did not touch is zeroed (micro-batch 0: written, not read) or only read (the last).
void gradient_path::impl::process_nvme(parameter_id p, const std::byte* source, bool first, bool last,
                                       io::swap_channel& channel) {
  const parameter_layout& prm = param(p);
  const io::swap_extent extent = home(p).extent;
  const std::uint64_t n = prm.shard_numel;
  const std::uint64_t piece = options.staging_buffer_bytes / sizeof(float);
  const bool write = source != nullptr || first;
  const bool read = !first;
  if (!write && !last) return;
  ZOE_EXPECTS(tiers.begin_move(p, state_kind::gradient, write ? move_kind::write : move_kind::read),
              "gradient_path: the gradient of '", prm.name, "' is in flight elsewhere");

  struct flight {
    allocators::buffer_lease source;
    allocators::buffer_lease data;
    std::uint64_t offset = 0;  ///< bytes into the extent
  };
  std::deque<flight> writes;  ///< submitted, their buffers held until they are known good
  std::optional<carried_error> failed;
  std::vector<io::io_completion> done;
  bool read_done = false;
  std::uint64_t read_offset = 0;
  // user_data: 1 for the piece's read, 2 + offset for a write.
  constexpr std::uint64_t read_tag = 1;
  constexpr std::uint64_t write_tag = 2;
  const auto note_failure = [&](const io::io_completion& c, const char* op, std::uint64_t offset) {
    if (failed) return;  // the first failure is the one to report
    failed = carried_error{
        c.corrupt ? error_category::corrupt : error_category::io, c.os_errno,
        str("gradient_path: ", op, " the gradient of parameter '", prm.name, "' (", n * sizeof(float),
            " bytes, swap extent ", extent.id, ") failed at byte offset ", offset, " of the extent: ", c.message)};
  };
  // Waits for at least one completion and takes each: the read, or a write (its buffers return).
  const auto collect = [&] {
    done.clear();
    channel.wait(done, 1);
    for (const io::io_completion& c : done) {
      if (c.user_data == read_tag) {
        read_done = true;
        if (c.ok()) {
          add_stat(&gradient_path_stats::bytes_read, c.bytes);
        } else {
          note_failure(c, "reading", read_offset);
        }
        continue;
      }
      const std::uint64_t offset = c.user_data - write_tag;
      const auto it = std::find_if(writes.begin(), writes.end(), [&](const flight& w) { return w.offset == offset; });
      if (c.ok()) {
        add_stat(&gradient_path_stats::bytes_written, c.bytes);
      } else {
        note_failure(c, "writing", offset);
      }
      if (it != writes.end()) writes.erase(it);
    }
  };
  // The piece in hand: its read and its device copy may be in flight until the cleanup below.
  std::optional<flight> current;
  try {
    for (std::uint64_t e = 0; e < n && !failed; e += piece) {
      const std::uint64_t len = std::min(piece, n - e);
      const std::uint64_t offset = e * sizeof(float);
      const std::size_t bytes = static_cast<std::size_t>(len * sizeof(float));
      // Buffers for this piece: while the pool is dry, earlier writes must finish first. Only this
      // thread takes them, so with no write out they are all free.
      const std::size_t want = source != nullptr ? 2 : 1;
      std::optional<std::vector<allocators::buffer_lease>> leases;
      while (!(leases = staging->try_acquire_many(want)) && !writes.empty()) collect();
      if (!leases) leases = staging->acquire_many(want);
      flight& f = current.emplace(flight{.source = {}, .data = std::move(leases->back()), .offset = offset});
      if (source != nullptr) f.source = std::move(leases->front());
      if (read) {
        read_done = false;
        read_offset = offset;
        channel.submit({io::io_op::read, extent, offset, f.data.span().first(bytes), read_tag});
      }
      if (source != nullptr) {
        const std::size_t element = kernels::dtype_size(prm.dtype);
        dev.copy_async(f.source.data(), source + e * element, static_cast<std::size_t>(len) * element,
                       copy_kind::device_to_host, stream.view());
      }
      if (read) {
        while (!read_done && channel.outstanding() > 0) collect();
      }
      if (source != nullptr) {
        dev.synchronize(stream.view());
        add_stat(&gradient_path_stats::bytes_to_host, len * kernels::dtype_size(prm.dtype));
      }
      if (failed) break;
      float* const data = reinterpret_cast<float*>(f.data.data());
      const std::span<float> values(data, static_cast<std::size_t>(len));
      const kernels::const_tensor_view fp32_values = kernels::view(std::span<const float>(values));
      if (source != nullptr) {
        const kernels::const_tensor_view src{prm.dtype, f.source.data(), static_cast<std::size_t>(len)};
        if (first) {
          kernels::cast(src, kernels::view(values));
        } else {
          kernels::accumulate(src, values);
        }
      } else if (first) {
        std::memset(data, 0, bytes);
      }
      if (last) {
        // This piece's chunks of the sum (it starts on a chunk: the plan's buffers hold whole ones).
        const std::size_t at = static_cast<std::size_t>(e / sum_chunk);
        (void)kernels::sum_of_squares(
            fp32_values, std::as_writable_bytes(std::span<double>(partials[p]).subspan(at, chunks_of(len))));
        if (kernels::has_inf_nan(fp32_values)) overflows[p] = 1;
      }
      if (write) {
        channel.submit({io::io_op::write, extent, offset, f.data.span().first(bytes), write_tag + offset});
        f.source.release();
        writes.push_back(std::move(f));
      }
      current.reset();
    }
  } catch (...) {
    if (!failed) failed = carried_error::of(std::current_exception());
  }
  // No buffer goes back while anything may still fill or read it: the piece in hand's device copy
  // and read, then every write.
  try {
    dev.synchronize(stream.view());
  } catch (...) {
    if (!failed) failed = carried_error::of(std::current_exception());
  }
  bool channel_broken = false;
  const auto drain = [&](auto&& busy) {
    while (!channel_broken && busy() && channel.outstanding() > 0) {
      try {
        collect();
      } catch (...) {
        if (!failed) failed = carried_error::of(std::current_exception());
        channel_broken = true;
      }
    }
  };
  drain([&] { return current && read && !read_done; });
  drain([&] { return !writes.empty(); });
  if (channel_broken) {
    // Its requests may still use their buffers (swap_channel.hpp): keep them until the path closes.
    const auto keep = [this](allocators::buffer_lease& lease) {
      if (lease) quarantined.push_back(std::move(lease));
    };
    if (current) {
      keep(current->source);
      keep(current->data);
    }
    for (flight& w : writes) keep(w.data);
  }
  if (failed) {
    tiers.abort_move(p, state_kind::gradient);
    failed->raise();
  }
  tiers.finish_move(p, state_kind::gradient);
  if (last) {
    // The shard's value: the chunk partials added in order from 0.0, as sum_of_squares adds them.
    double total = 0.0;
    for (const double x : partials[p]) total += x;
    sums[p] = total;
  }
}

void gradient_path::impl::fail(carried_error e) {
  const std::lock_guard lock(mutex);
  if (!failure) failure = std::move(e);
}

void gradient_path::impl::add_stat(std::uint64_t gradient_path_stats::*field, std::uint64_t n) {
  const std::lock_guard lock(mutex);
  counters.*field += n;
}

// ---- gradient_path -------------------------------------------------------------------------------

gradient_path::gradient_path(tier_manager& tiers, communicator& comm, device& dev,
                             allocators::pinned_host_resource& pinned, io::swap_store* store,
                             gradient_path_options options)
    : impl_(std::make_unique<impl>(tiers, comm, dev, pinned, store, options)) {}

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
  bool waited = false;
  bool flushed = false;
  const std::thread::id me = std::this_thread::get_id();
  while (!(lease = s.buckets->try_take(need))) {
    // A bucket sealed (now or before) whose modules are all reduced must be issued before waiting
    // for a bucket to drain: it may be the one to drain.
    if (!flushed && s.buckets->sealed_pending()) {
      lock.unlock();
      s.flush();
      lock.lock();
      flushed = true;
      continue;
    }
    // Back-pressure: every bucket is busy until a module in it is reduced and accumulated, unless
    // only this thread (or threads waiting here too) could reduce one: then nothing ever would.
    if (s.no_bucket_can_drain(me)) throw usage_error(s.no_bucket(m, need));
    if (!waited) ++s.counters.bucket_waits;
    waited = true;
    flushed = false;
    s.waiting.push_back(me);
    s.changed.wait(lock);
    s.waiting.erase(std::find(s.waiting.begin(), s.waiting.end(), me));
    ZOE_EXPECTS(s.open, "gradient_path::acquire: the micro-batch ended while module '", s.module_name(m),
                "' waited for a bucket");
  }
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
    at += round_up(p.padded_numel(s.shards()) * kernels::dtype_size(p.dtype), bucket_alignment);
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
    job rest;
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
  if (s.scratch != nullptr) {
    std::vector<std::byte> host(s.scratch_bytes);
    s.dev.copy_async(host.data(), s.scratch, s.scratch_bytes, copy_kind::device_to_host, s.stream.view());
    s.dev.synchronize(s.stream.view());
    for (const parameter_layout& p : s.tiers.layout().parameters()) {
      if (p.frozen || s.home(p.id).where != tier::device) continue;
      std::uint32_t flag = 0;
      std::memcpy(&s.sums[p.id], host.data() + s.slots[p.id].result, sizeof(double));
      std::memcpy(&flag, host.data() + s.slots[p.id].flag, sizeof(flag));
      s.overflows[p.id] = flag != 0 ? 1 : 0;
    }
  }
  gradient_summary out;
  for (const parameter_layout& p : s.tiers.layout().parameters()) {
    out.sum_of_squares += s.sums[p.id];
    out.overflow = out.overflow || s.overflows[p.id] != 0;
  }
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
