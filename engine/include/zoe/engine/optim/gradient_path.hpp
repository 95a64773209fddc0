#pragma once
// The gradient path: gradients arrive per module from backward in device memory, are reduced over
// the ranks through the communicator (reduce-scatter; a copy at world size 1) and accumulated in
// fp32 into each shard's gradient state wherever it lives: device, pinned host, or NVMe (a
// read-modify-write per micro-batch, pipelined through constant-size pinned buffers, its reads and
// writes run by the rank's mover).
//
// Buckets: backward writes a module's full (padded, working-dtype) gradients into device memory
// the path lends out of a bucket of zero_optimization.reduce_bucket_size elements (never smaller
// than the largest module), so no copy is made before the reduction. A bucket is reduced as a
// whole once backward moved on from it (the next module did not fit, or the micro-batch ended) and
// reduced every module in it: one coalesced reduce-scatter of its parameters
// (communicator::reduce_scatter_coalesced) on the path's reduction stream, after the work queued on
// each module's reduce() stream, so a micro-batch issues one collective per bucket it filled.
// Buckets are reduced in the order backward filled them, alike on every rank. With overlap_comm
// there are two buckets: backward fills one while the other is reduced and accumulated. A module
// that finds no room waits for a bucket to drain (back-pressure).
//
// ZeRO stages 0 and 1 (gradient_path_options::accumulate_locally) keep gradients whole on each rank
// until the step's last micro-batch and reduce them there once (local_accumulation.hpp); stages 2
// and 3 reduce-scatter every micro-batch. At stage 0 the layout is one shard every rank holds whole
// (layout_options::replicas), so the reduction is an all-reduce of each parameter, in place.
//
// A step is gradient_accumulation_steps micro-batches. The first micro-batch of a step overwrites
// the gradient state (no read), the later ones add to it. While the last micro-batch accumulates,
// the path computes the gradient's sum of squares in fp64 and whether any element is inf or NaN,
// so both are known before the optimizer touches the first sub-group.
//
// The sum of squares is one fixed order whatever the tiers: each parameter's value equals
// kernels::sum_of_squares over its whole fp32 gradient shard (an NVMe shard, processed in pieces,
// rebuilds it from the per-64Ki-element partials that sum_of_squares' workspace holds), and the
// total adds the parameters' values in layout order, starting from 0. So the norm is the same bits
// for every placement.
//
// Threads: one worker thread of the path (it drives the swap channel and does the host side of
// every accumulation: host homes and nvme read-modify-writes, one parameter at a time, a piece's
// write overlapping the next piece's read and add) and the path's own device stream (on the host
// device, one more thread). Device homes are accumulated by a kernel queued on the caller's stream
// (core's launch_kernel: the CPU kernel as a host task, or the CUDA launcher).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/swap/mover.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"

namespace zoe::engine {

/// A parameter's gradient of a step's last micro-batch, accumulated and known good
/// (gradient_path_options::on_final), with its part of the step's summary where the path has it on
/// the host then: the speculation stops once the parts seen so far show that the step will clip or
/// skip (engine.cpp).
struct final_gradient {
  parameter_id param = 0;
  /// kernels::sum_of_squares of its fp32 gradient shard (the value summary() adds), for a home in
  /// host memory or on nvme; nullopt for a device home (summed on the device, read at summary()).
  std::optional<double> sum_of_squares;
  bool overflow = false;  ///< an element is inf or NaN (host and nvme homes; false for a device home)
};

struct gradient_path_options {
  std::uint64_t bucket_bytes = 0;  ///< device bytes per bucket (footprint_plan::gradient_bucket_bytes)
  std::size_t bucket_count = 1;    ///< 2 with overlap_comm (footprint_plan::gradient_bucket_count)
  /// Pinned buffers for gradients off the device (plan: footprint_plan::gradient_buffer_count, at
  /// least 2 when any gradient is off the device: an nvme piece holds two).
  std::size_t staging_buffer_count = 0;
  /// Bytes per staging buffer (plan): whole 64 Ki-element fp32 chunks and whole aio.block_size
  /// chunks, unless it holds the largest off-device gradient shard whole. usage_error otherwise.
  std::size_t staging_buffer_bytes = 0;
  /// qgZ (zero_quantized_gradients): device bytes of scratch for the quantized reduce-scatter
  /// (footprint_plan::qgz_scratch_bytes), which then replaces communicator::reduce_scatter; 0:
  /// the communicator's. usage_error when smaller than the largest parameter's on this world.
  std::size_t quantized_scratch_bytes = 0;
  /// ZeRO stages 0 and 1 (accumulates_gradients_locally): before a step's last micro-batch, gradients are
  /// accumulated whole on this rank, not reduced; the last micro-batch reduces the step's sum once
  /// per parameter (optim/local_accumulation.hpp). Memory: footprint_plan::local_gradient_*_bytes.
  bool accumulate_locally = false;
  /// Called on the path's worker thread once a parameter's gradient of a step's last micro-batch is
  /// accumulated and known good (its gradient state resident again), in the order they finish:
  /// the optimizer step may run on it from then on (optimizer_step.hpp, "Speculation"). Must not
  /// block for long nor throw (a throw is logged). Empty: nobody is told.
  std::function<void(const final_gradient&)> on_final;
};

/// What the optimizer step needs to know about a step's gradients before it starts.
struct gradient_summary {
  double sum_of_squares = 0;  ///< fp64, fixed order (above); of the accumulated (summed, still loss-scaled) gradient
  bool overflow = false;      ///< an element is inf or NaN (then sum_of_squares is not finite either)
};

struct gradient_path_stats {
  std::uint64_t modules_reduced = 0;
  std::uint64_t bytes_reduced = 0;        ///< bytes handed to the communicator
  std::uint64_t bytes_read = 0;           ///< NVMe bytes read for read-modify-writes
  std::uint64_t bytes_written = 0;        ///< NVMe bytes written
  std::uint64_t bytes_to_host = 0;        ///< reduced gradients copied off the device to homes on host or NVMe
  std::uint64_t bucket_waits = 0;         ///< acquire() calls that waited for a bucket to drain
  double accumulate_seconds = 0;          ///< time the accumulation work ran
  std::uint64_t pinned_bytes = 0;         ///< staging memory held
  std::uint64_t device_bucket_bytes = 0;  ///< device memory of the buckets
};

/// Thread-safety: acquire/reduce for different modules may come from different threads; begin/end
/// of micro-batches and summary() from one thread, not concurrently with acquire/reduce. Everything
/// passed must outlive the path.
class gradient_path {
 public:
  /// Allocates the buckets (device) and the staging buffers (pinned, when a gradient is on nvme).
  /// Throws memory_error naming the keys (reduce_bucket_size, overlap_comm, ...) when refused;
  /// usage_error when `comm` is not of the layout's ranks, or qgZ is asked for a replicated layout.
  /// `movers`: the rank's mover, which reads and writes the nvme homes (null, or one without a
  /// store, when no gradient is on nvme).
  gradient_path(tier_manager& tiers, communicator& comm, device& dev, allocators::pinned_host_resource& pinned,
                mover* movers, gradient_path_options options);
  /// Waits for the work in flight. Never throws.
  ~gradient_path();
  gradient_path(const gradient_path&) = delete;
  gradient_path& operator=(const gradient_path&) = delete;

  /// Opens micro-batch `index` of a step of `count` (0-based, count >= 1): index 0 overwrites the
  /// gradient states, index count-1 computes the summary. usage_error when one is open, index >=
  /// count, or the order is broken (a step's micro-batches come 0, 1, ..., count-1).
  void begin_micro_batch(std::size_t index, std::size_t count);
  /// Device memory for module `m`'s gradients in the current micro-batch: one pointer per parameter
  /// of the module (in module order), each padded_numel elements of the parameter's working dtype,
  /// zero-filled in stream order on `stream`. Valid until reduce(m). Blocks while no bucket has room
  /// (until modules already acquired are reduced and accumulated). usage_error naming the module when
  /// no micro-batch is open, the module is unknown, or it was already acquired in this micro-batch;
  /// usage_error naming the modules acquired and not reduced when no bucket can drain until they are
  /// and no thread but this one and threads waiting here too acquired them: the wait would never
  /// end (the thread that acquires a module is counted on to reduce it). Nothing changes then but
  /// the sealing of the bucket being filled.
  [[nodiscard]] std::vector<void*> acquire(module_id m, stream_view stream);
  /// The gradients in acquire(m)'s memory are complete once the work queued on `stream` so far is:
  /// reduces them with their bucket and adds them to the shards' gradient states (asynchronously;
  /// the bucket's reduction is issued once it is complete, see the top of this file). usage_error
  /// naming the module unless it was acquired and not yet reduced in this micro-batch.
  void reduce(module_id m, stream_view stream);
  /// Waits until every module of the micro-batch is reduced and accumulated, and known good. Every
  /// module that was acquired must have been reduced (usage_error naming one that was not). A
  /// module never acquired in a micro-batch adds nothing (in micro-batch 0 its gradient is zeroed).
  /// Throws the first failure (io_error / corruption_error naming the parameter, path and offset).
  /// After a failure the micro-batch is closed and every other parameter was still accumulated, but
  /// the parameter that failed has its gradient state released and dirty (its home may hold part
  /// of the micro-batch, or nothing valid), so the step's gradients are lost: the next
  /// begin_micro_batch must be micro-batch 0 of a new step (it overwrites without reading), and
  /// summary() has no value for the failed step.
  void end_micro_batch();
  /// The summary of the step whose last micro-batch ended. usage_error before one has.
  [[nodiscard]] gradient_summary summary() const;
  [[nodiscard]] gradient_path_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace zoe::engine
