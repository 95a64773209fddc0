#pragma once
// The parameter swapper: brings the working copy of a parameter's shard from its home tier to
// device memory (the homes are written by the optimizer step and state_io, never from here). From
// NVMe a shard is a client of the rank's mover (mover.hpp): it is cut into pieces of one slot of
// the mover's "params" pool (the footprint plan's "parameter swap buffers" item:
// offload_param.buffer_count buffers of buffer_size elements cut into slots of one aio.block_size
// chunk); each piece is read into its slot and copied to the device by its hook, and the slot goes
// back once that copy is done. So the planned memory keeps as many chunks in flight as it holds,
// where DeepSpeed moves one parameter per buffer. From host memory it is one copy, from device
// memory one device-to-device copy.
//
// A fetch the compute waits on goes to the mover as demand, a prefetch as prefetch (raised to
// demand when the compute comes to wait on it: swap_ticket::raise_to_demand); a full pool makes a
// move wait for slots to come back (back-pressure), it never fails for want of one.
//
// Only the tier manager changes a state's status: every read runs begin_move -> in_flight ->
// finish_move (resident) or abort_move on failure.

#include <cstdint>
#include <memory>

#include "zoe/core/device.hpp"
#include "zoe/engine/swap/mover.hpp"
#include "zoe/engine/swap/swap_ticket.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::engine {

/// The state holding `p`'s working copy: `working`, or `master` for an fp32 parameter (its master
/// is its working copy). Never throws.
[[nodiscard]] state_kind working_state(const parameter_layout& p) noexcept;

struct parameter_swapper_stats {
  std::uint64_t bytes_read = 0;    ///< from NVMe
  std::uint64_t bytes_copied = 0;  ///< from host or device homes to the device
  /// From the pinned slots NVMe homes pass through to the device (each piece read is copied on).
  std::uint64_t bytes_staged = 0;
  std::uint64_t moves_in = 0;
  std::uint64_t failed_moves = 0;
  /// Times a piece found its pool's slots all on loan and waited (back-pressure; the mover's count,
  /// every client's pieces).
  std::uint64_t buffer_waits = 0;
  std::size_t buffer_slots = 0;  ///< chunk-sized slots the pool's pinned memory is cut into
  std::size_t peak_buffers_in_use = 0;
  std::uint64_t pinned_bytes = 0;  ///< the pool's pinned memory (allocated once, up front)
  /// Seconds the mover's I/O thread had NVMe reads or writes in flight (every client's).
  double io_busy_seconds = 0;
  /// Threads the swapper started: none (NVMe moves run on the rank's mover).
  std::size_t threads = 0;
};

/// Thread-safe: any thread may start reads and read stats. The tier manager, device and mover
/// must outlive it.
class parameter_swapper {
 public:
  /// Moves NVMe homes through `movers`'s "params" pool (null when no store: then nothing may be on
  /// nvme). Throws config_error naming offload_param.buffer_count / buffer_size when a slot holds
  /// neither the largest working copy on NVMe nor a whole checksum chunk of the store (a piece
  /// inside a chunk would read and verify that whole chunk, once per piece).
  parameter_swapper(tier_manager& tiers, device& dev, mover* movers);
  /// Waits for the host and device copies it queued. Never throws.
  ~parameter_swapper();
  parameter_swapper(const parameter_swapper&) = delete;
  parameter_swapper& operator=(const parameter_swapper&) = delete;

  /// Starts bringing `p`'s working copy to `dst` (device memory of at least its state's bytes).
  /// `dst` must stay put until the ticket's device copies are done. `priority` is demand for a
  /// fetch the compute waits on, prefetch otherwise. Throws usage_error naming the parameter when
  /// its working copy is released (never written) or already being moved.
  [[nodiscard]] swap_ticket swap_in(parameter_id p, void* dst, move_priority priority = move_priority::demand);

  [[nodiscard]] parameter_swapper_stats stats() const;
  /// The I/O backend NVMe moves use ("" without a store).
  [[nodiscard]] std::string backend_name() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace zoe::engine
