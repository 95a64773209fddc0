#pragma once
// The parameter swapper: moves the working copy of a parameter's shard between its home tier and
// device memory. From NVMe a shard comes through a constant-size pool of pinned memory
// (offload_param.buffer_count buffers of buffer_size elements, as the footprint plan sizes it) cut
// into slots of one aio.block_size chunk: each chunk of the shard is read into a leased slot and
// copied to the device, and the lease goes back once that copy is done. So the planned memory
// keeps as many chunks in flight as it holds, where DeepSpeed moves one parameter per buffer. From host memory it is
// one copy, from device memory one device-to-device copy. Writing back runs the other way (device -> pinned buffer ->
// NVMe); the data stays in the pinned buffer (and in the caller's device memory) until the write is known good, and a
// failed write leaves the home copy and its status as they were and names the path and offset.
//
// NVMe I/O runs on one thread the swapper owns, the only one that drives its swap_channel (an
// io_uring ring has one issuer). Host and device homes need no I/O: their copies are queued on
// the calling thread. Pieces are issued in the order moves were asked for; a full pool makes a
// move wait for buffers to come back (back-pressure), it never fails for want of one.
//
// Only the tier manager changes a state's status: every move runs begin_move -> in_flight ->
// finish_move (resident, and clean after a write) or abort_move on failure.

#include <cstdint>
#include <memory>

#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/swap/swap_ticket.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::engine {

/// The state holding `p`'s working copy: `working`, or `master` for an fp32 parameter (its master
/// is its working copy). Never throws.
[[nodiscard]] state_kind working_state(const parameter_layout& p) noexcept;

struct parameter_swapper_options {
  std::size_t buffer_count = 0;  ///< pinned buffers for NVMe pieces (footprint_plan::param_buffer_count)
  std::size_t buffer_bytes = 0;  ///< bytes per buffer (footprint_plan::param_buffer_bytes)
};

struct parameter_swapper_stats {
  std::uint64_t bytes_read = 0;     ///< from NVMe
  std::uint64_t bytes_written = 0;  ///< to NVMe
  std::uint64_t bytes_copied = 0;   ///< between the device and host or device homes
  /// Between the device and the pinned slots NVMe homes pass through (each piece read is copied to
  /// the device, each piece written is copied from it first).
  std::uint64_t bytes_staged = 0;
  std::uint64_t moves_in = 0;
  std::uint64_t moves_out = 0;
  std::uint64_t failed_moves = 0;
  /// Times a move found every slot on loan and waited (back-pressure).
  std::uint64_t buffer_waits = 0;
  std::size_t buffer_slots = 0;  ///< chunk-sized slots the pool's pinned memory is cut into
  std::size_t peak_buffers_in_use = 0;
  std::uint64_t pinned_bytes = 0;  ///< the pool's pinned memory (allocated once, up front)
  /// Seconds the I/O thread had NVMe reads or writes in flight.
  double io_busy_seconds = 0;
  /// Threads the swapper started (its I/O thread; the device's stream workers are the device's).
  std::size_t threads = 0;
};

/// Thread-safe: any thread may start moves and read stats. The tier manager, device, pinned
/// resource and store must outlive it.
class parameter_swapper {
 public:
  /// Makes the pool (buffer_count x buffer_bytes of pinned memory from `pinned`, in chunk-sized
  /// slots) and the I/O thread when `store` is given (the pool is needed only for NVMe homes; without a store both
  /// may be zero). Throws config_error naming offload_param.buffer_count / buffer_size when a
  /// buffer holds neither the largest shard on NVMe nor a whole checksum chunk of the store (the
  /// pieces of a write must cover whole chunks), memory_error when the pinned memory cannot be had.
  parameter_swapper(tier_manager& tiers, device& dev, allocators::pinned_host_resource& pinned, io::swap_store* store,
                    parameter_swapper_options options);
  /// Finishes every move already asked for, then stops the I/O thread. Never throws.
  ~parameter_swapper();
  parameter_swapper(const parameter_swapper&) = delete;
  parameter_swapper& operator=(const parameter_swapper&) = delete;

  /// Starts bringing `p`'s working copy to `dst` (device memory of at least its state's bytes).
  /// `dst` must stay put until the ticket's device copies are done. Throws usage_error naming the
  /// parameter when its working copy is released (never written) or already being moved.
  [[nodiscard]] swap_ticket swap_in(parameter_id p, void* dst);
  /// Starts writing `src` (device memory holding `p`'s working copy) to its home, from resident or
  /// released. `src` must stay put and unchanged until the ticket is ready. On success the state is
  /// resident and clean; on failure the ticket carries the error (path and offset) and the state
  /// is released and dirty. Throws usage_error naming the parameter when its working copy is
  /// already being moved.
  [[nodiscard]] swap_ticket swap_out(parameter_id p, const void* src);

  [[nodiscard]] parameter_swapper_stats stats() const;
  /// The I/O backend NVMe moves use ("" without a store).
  [[nodiscard]] std::string backend_name() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace zoe::engine
