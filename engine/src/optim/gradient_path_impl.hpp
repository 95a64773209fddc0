#pragma once
// The gradient path's shared state (gradient_path::impl), which its jobs' files share:
//   gradient_path.cpp               the public calls: the micro-batch protocol, acquire and reduce
//   gradient_path_setup.cpp         the path's memory (buckets, staging, scratch) and its threads
//   gradient_reduction.cpp          buckets handed to the communicator (reduce-scatter, all-reduce, qgZ)
//                                   and stage 1's local accumulation
//   gradient_accumulation.cpp       the worker: the accumulation into device and host homes
//   gradient_nvme_accumulation.cpp  the read-modify-write of nvme homes, a client of the rank's mover
//   gradient_summary.cpp            the step's sum of squares and overflow, gathered at its end
//
// Threads: the callers of acquire/reduce; one worker thread of the path, which does the host side
// of every accumulation (host homes, nvme read-modify-writes, whose reads and writes the rank's
// mover runs on its I/O thread); and
// the worker of the path's own stream (on the host device, one thread per stream). Device homes
// are accumulated by a kernel on the caller's stream, so they cost no thread of ours.
//
// Summary: each parameter's sum of squares is kernels::sum_of_squares over its whole fp32 shard.
// Device and host homes call it on the whole shard; an nvme shard is processed in pieces that start
// on multiples of the sum's 64 Ki-element chunks (the plan sizes the staging buffers so), each piece
// writing its chunks' partials into the parameter's workspace, and the shard's value is then those
// partials added in order from 0.0, exactly as the whole-shard call adds them (cast.cpp).

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gradient_buckets.hpp"
#include "local_accumulation.hpp"
#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/engine/optim/gradient_path.hpp"
#include "zoe/engine/swap/carried_error.hpp"
#include "zoe/engine/swap/mover.hpp"

namespace zoe::engine {

struct gradient_path::impl {
  /// fp32 elements per chunk of the sum of squares (the plan's staging buffers hold whole ones).
  static constexpr std::size_t sum_chunk = gradient_sum_chunk_bytes / sizeof(float);
  /// Each parameter's gradients start on this boundary inside a bucket (the arena's alignment).
  static constexpr std::uint64_t bucket_alignment = arena_alignment;

  static std::size_t chunks_of(std::uint64_t elements) {
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

  impl(tier_manager& t, communicator& c, device& d, allocators::pinned_host_resource& p, mover* mv,
       gradient_path_options o);
  ~impl();
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  // ---- caller side ----
  [[nodiscard]] const parameter_layout& param(parameter_id p) const { return tiers.layout().parameter(p); }
  [[nodiscard]] bool has_store() const noexcept { return movers != nullptr && movers->store() != nullptr; }
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

  /// After the last micro-batch's accumulations: the device homes' sums and flags copied off the
  /// device, and the parameters' values added in layout order from 0 (the fixed order of gradient_path.hpp).
  [[nodiscard]] gradient_summary summarize();

  // ---- worker side ----
  void run() noexcept;
  void process(job& j);
  void process_device(parameter_id p, const std::byte* source, bool first, bool last);
  void process_host(parameter_id p, const std::byte* source, bool first, bool last);
  void process_nvme(parameter_id p, const std::byte* source, bool first, bool last);
  /// Copies n elements of p's reduced gradient from `source` (device) into `lease` and waits.
  void copy_to_host(parameter_id p, const std::byte* source, std::uint64_t first_element, std::uint64_t n,
                    const allocators::buffer_lease& lease);
  void fail(carried_error e);
  void add_stat(std::uint64_t gradient_path_stats::*field, std::uint64_t n);

  tier_manager& tiers;
  communicator& comm;
  device& dev;
  mover* movers;  ///< the rank's: null when there is no swap store
  gradient_path_options options;
  bool any_nvme = false;
  bool any_off_device = false;

  std::vector<std::byte*> bucket_memory;
  std::optional<detail::gradient_buckets> buckets;
  std::optional<allocators::buffer_pool> staging;
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

}  // namespace zoe::engine
