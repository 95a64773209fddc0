#pragma once
// The parameter swapper's I/O thread: the one thread that drives its swap_channel. It takes whole
// moves (a shard's working copy in from NVMe to device memory, or out from device memory to NVMe),
// cuts them into pieces of one pool slot, and runs each piece through its stages:
//   in:  lease a buffer -> read the piece into it -> copy it to the device -> the copy is done: return the lease
//   out: lease a buffer -> copy the piece from the device -> the copy is done: write it -> written: return the lease
// Moves get buffers in the order they were asked for; a piece waits while every buffer is on loan.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/swap/parameter_swapper.hpp"
#include "zoe/io/swap_channel.hpp"

namespace zoe::engine::detail {

/// One move between NVMe and device memory.
struct nvme_move {
  io::io_op op = io::io_op::read;  ///< read: home -> device; write: device -> home
  parameter_id param = 0;
  state_kind state = state_kind::working;
  std::string what;  ///< "the working copy of parameter 'x'", for messages
  io::swap_extent extent;
  std::byte* device = nullptr;  ///< destination of a read, source of a write
  std::uint64_t bytes = 0;
  std::shared_ptr<ticket_state> ticket;

  // Progress, touched by the I/O thread only.
  std::uint64_t issued = 0;              ///< bytes whose piece has started
  std::size_t pieces_out = 0;            ///< pieces started and not yet through their I/O (and, out, their write)
  std::optional<carried_error> failure;  ///< the first piece that failed
  bool finished = false;                 ///< its ticket is complete
};

class nvme_mover {
 public:
  /// Starts the I/O thread. `piece_bytes` is at most the pool's buffer size and a multiple of the
  /// store's chunk. Everything passed must outlive the mover.
  nvme_mover(tier_manager& tiers, device& dev, io::swap_store& store, allocators::buffer_pool& pool,
             std::size_t piece_bytes);
  /// Finishes the moves already queued, then joins the thread. Never throws.
  ~nvme_mover();
  nvme_mover(const nvme_mover&) = delete;
  nvme_mover& operator=(const nvme_mover&) = delete;

  /// Queues a move; the I/O thread completes its ticket. Thread-safe.
  void enqueue(std::unique_ptr<nvme_move> move);
  /// Adds the I/O thread's counters to `out`. Thread-safe.
  void add_stats(parameter_swapper_stats& out) const;
  [[nodiscard]] std::string backend_name() const;

 private:
  enum class stage : std::uint8_t { reading, copying_in, copying_out, writing };
  struct piece {
    nvme_move* move = nullptr;
    std::uint64_t offset = 0;  ///< within the move
    std::size_t bytes = 0;
    stage at = stage::reading;
    allocators::buffer_lease lease;
    device_event copied;
  };

  void run() noexcept;
  void loop(io::swap_channel& channel);
  /// Takes what callers queued; false when asked to stop and nothing is left.
  bool take_queued();
  /// Starts pieces of the queued moves, oldest first, while buffers last. Returns whether it did.
  bool start_pieces(io::swap_channel& channel);
  /// Moves on the pieces whose device copy has completed. Returns whether any did.
  bool reap_copies(io::swap_channel& channel);
  void on_io(const std::vector<io::io_completion>& done);
  void submit(io::swap_channel& channel, std::size_t slot, io::io_op op);
  /// Records the piece's device copy on `stream` and moves it to `next`.
  void start_copy(piece& p, copy_kind kind, stream_view stream, stage next);
  void piece_done(std::size_t slot);
  void fail(nvme_move& m, std::uint64_t offset, const io::io_completion* c, std::exception_ptr e);
  /// Completes the moves at the front that are over. Returns whether any was.
  bool finish_moves();
  void finish(nvme_move& m) noexcept;
  void note_busy(const io::swap_channel& channel);

  tier_manager& tiers_;
  device& dev_;
  io::swap_store& store_;
  allocators::buffer_pool& pool_;
  std::size_t piece_bytes_;
  device_stream in_stream_;
  device_stream out_stream_;

  // Shared with callers.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<nvme_move>> queued_;
  bool stopping_ = false;
  std::string backend_;
  parameter_swapper_stats stats_;  // the I/O thread's counters, published under mutex_

  // The I/O thread's own.
  std::deque<std::unique_ptr<nvme_move>> moves_;
  std::vector<piece> pieces_;
  std::vector<std::size_t> free_pieces_;
  std::size_t copies_out_ = 0;  ///< pieces in a copying stage
  std::vector<io::io_completion> done_;
  bool stalled_ = false;  ///< the last start_pieces found no buffer (counted once per stall)
  std::optional<std::chrono::steady_clock::time_point> busy_since_;
  std::jthread thread_;  // last: started once everything above exists
};

}  // namespace zoe::engine::detail
