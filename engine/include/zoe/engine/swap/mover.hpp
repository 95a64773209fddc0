#pragma once
// The mover: the one part of the engine that moves bytes between NVMe and memory. One per rank,
// made by the engine and handed to its clients (parameter fetch, state_io, the gradient path's
// read-modify-write, the activation spill, the optimizer's read-ahead and write-behind) through
// their constructors. It owns one I/O thread, the one swap channel of the rank (one io engine per
// swap path, each at the aio block's queue depth: the per-path budget every client shares), and
// the pinned slot pools the footprint plan names (its items with a plan_item::pool, which
// zoe-plan shows as "mover.<key>"; the engine makes no other).
//
// How a client moves bytes: it cuts its move into pieces and submits each with a priority. A
// piece runs through its own state machine on the I/O thread, skipping the stages it has none for:
//
//   lease a slot of its pool (or use the client's buffer)
//   -> read    `read` (extent, offset) into the bytes          (skipped without `read`)
//   -> hook    the client's copy/accumulate/compute step on the bytes; it may queue device work on a
//              stream and return that stream: the bytes are reused or written once its work so far
//              is over, and the mover is woken then, not polling (skipped without hook)
//   -> write   the bytes to `write` (extent, offset)            (skipped without `write`)
//   -> done    the client's completion: nothing, or the error naming the path and offset; commit
//              (tier_manager::finish_move, commit_shadow) happens here, on the I/O thread
//   -> the slot goes back once the hook's device work is over.
//
// A piece without a write is done once its hook returned (its device work is ordered by the
// client's stream); a piece with one is done only when the write is known good, so a write's
// source (the client's memory, and the slot) stays until then; a failed write fails that piece
// only and leaves the client's source as it was, to retry. Writes of new values go to shadow
// extents and are committed in `done` when the client keeps the shadow rule.
//
// Priorities: a demand piece (a fetch the compute waits on) starts before any prefetch, a
// prefetch before any write-behind; within a class, in submission order (FIFO). When the compute
// comes to wait on a move it submitted as a prefetch, the client raises the move's group: its
// pieces not yet on the channel become demand pieces, so the wait is not served behind the
// prefetches queued after it nor limited to the background's share of the requests. A piece waiting
// for a slot of its pool holds back every later piece of that pool, so a lower class never takes
// the slot a demand piece waits for. Requests at the kernel are at most queue_depth x paths;
// prefetches and write-behinds get all but one per path of it, so a demand piece always finds a
// request free even while background pieces are held up at the drive. A request's share goes back
// when the kernel returns it, before the channel verifies its checksums on this thread: the next
// request goes to the drive first, so the drive's queue is not held short while data is hashed
// (the data still reaches the hook only once verified).
//
//   mover::piece p;
//   p.priority = move_priority::demand;
//   p.pool = m.pool("params");  p.bytes = n;
//   p.read = mover::io_range{extent, offset};
//   p.hook = [&](std::span<std::byte> b) { dev.copy_async(dst, b.data(), n, ..., s); return s; };
//   p.done = [ticket](const carried_error* e) noexcept { ticket->piece_over(e); };
//   m.submit(std::move(p));          // or m.run(std::move(p)) to wait for it
//
// Hooks and done callbacks run on the I/O thread: they must be short and must not wait on the
// mover (run() from a hook deadlocks).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/swap/carried_error.hpp"
#include "zoe/io/swap_channel.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::engine {

/// What a piece is for, in the order the mover serves them.
enum class move_priority : std::uint8_t {
  demand = 0,        ///< the compute waits on it now
  prefetch = 1,      ///< needed soon
  write_behind = 2,  ///< nobody waits on it but the next step
};

/// A pool of pinned slots, as the footprint plan sizes it.
struct mover_pool_spec {
  std::string key;  ///< the plan's name for it, without "mover." ("params", "gradients", ...)
  std::size_t slot_bytes = 0;
  std::size_t slot_count = 0;
};

struct mover_options {
  std::vector<mover_pool_spec> pools;
};

struct mover_stats {
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_written = 0;
  std::uint64_t pieces = 0;  ///< pieces done, failed ones included
  std::uint64_t failed_pieces = 0;
  std::uint64_t slot_waits = 0;    ///< times a piece found its pool empty and waited
  std::size_t peak_in_flight = 0;  ///< the most requests the mover had at the kernel at once
  double io_busy_seconds = 0;      ///< seconds the channel had requests in flight
};

/// Thread-safe: any thread may submit and read stats. The store, the pinned resource and the
/// device must outlive it.
class mover {
 public:
  static constexpr std::size_t no_pool = static_cast<std::size_t>(-1);

  struct io_range {
    io::swap_extent extent;
    std::uint64_t offset = 0;  ///< within the extent
  };

  struct piece {
    move_priority priority = move_priority::demand;
    /// The pool the bytes come from (pool(key)), or no_pool: `buffer` is the client's memory.
    std::size_t pool = no_pool;
    std::span<std::byte> buffer;  ///< with no_pool: the bytes, kept by the client until done
    std::size_t bytes = 0;        ///< at most the pool's slot_bytes
    std::optional<io_range> read;
    std::optional<io_range> write;
    /// The client's step on the bytes after the read and before the write. Returns the stream whose
    /// work queued so far still uses the bytes (they are reused, or written, once it is over), or
    /// nullopt when they are free at once. A throw fails the piece.
    std::function<std::optional<stream_view>(std::span<std::byte>)> hook;
    /// Called once, on the I/O thread: nullptr when the piece is done, else why it failed. Must not throw.
    std::function<void(const carried_error*)> done;
    std::string what;  ///< "the working copy of parameter 'x'", for messages
    /// The client's move this piece is part of (new_group()), or 0 for none: raise() finds it by it.
    std::uint64_t group = 0;
  };

  /// Makes the pools (pinned memory from `pinned`) and starts the I/O thread, which makes the
  /// channel on `store` (null: no NVMe, and only pieces without read or write are taken). `dev`
  /// is where the streams hooks return get the task that wakes the mover (null when no hook returns one). Throws
  /// memory_error when the pinned memory cannot be had, usage_error for a pool of zero-sized slots.
  mover(io::swap_store* store, allocators::pinned_host_resource* pinned, device* dev, mover_options options);
  /// Finishes every piece submitted, then joins the thread. Never throws.
  ~mover();
  mover(const mover&) = delete;
  mover& operator=(const mover&) = delete;

  /// The index of the pool named `key`; usage_error naming it when there is none.
  [[nodiscard]] std::size_t pool(const std::string& key) const;
  [[nodiscard]] bool has_pool(const std::string& key) const noexcept;
  [[nodiscard]] const mover_pool_spec& pool_spec(std::size_t pool) const;
  /// The fewest free slots pool `pool` has had (peak in use = slot_count - this).
  [[nodiscard]] std::size_t pool_low_water(std::size_t pool) const;

  /// Queues a piece. Throws usage_error (nothing queued) for a piece larger than its slot, without
  /// bytes, with a read or write but no store, or with an unknown pool.
  void submit(piece p);
  /// submit(), then waits for the piece; rethrows its failure. Never call it from a hook.
  void run(piece p);
  /// A group id for the pieces of one move, never 0 and never given out twice.
  [[nodiscard]] std::uint64_t new_group() noexcept;
  /// The compute waits on `group` now: its pieces submitted so far become demand pieces (in their
  /// submission order among the demand pieces), their requests already in flight included (they
  /// leave the background's share of the budget). A group that is over, or 0, is ignored. Never throws.
  void raise(std::uint64_t group) noexcept;

  [[nodiscard]] mover_stats stats() const;
  /// The I/O backend ("" before the thread made its channel, or without a store).
  [[nodiscard]] std::string backend_name() const;
  /// The store's chunk (aio.block_size): writes start on it and cover it whole. 4096 without a store.
  [[nodiscard]] std::uint64_t chunk_bytes() const noexcept;
  [[nodiscard]] io::swap_store* store() const noexcept { return store_; }

 private:
  enum class stage : std::uint8_t { want_slot, want_read, reading, want_hook, hooked, want_write, writing, over };
  struct active {
    piece p;
    std::uint64_t seq = 0;
    stage at = stage::want_slot;
    allocators::buffer_lease lease;
    std::span<std::byte> bytes;
    /// Set by a task queued on the hook's stream after its work: the bytes are free again.
    std::shared_ptr<std::atomic<bool>> released;
    bool reported = false;
    bool waited = false;      ///< counted once in slot_waits
    bool at_kernel = false;   ///< its request holds a share of the budget: submitted, not yet back from the kernel
    bool background = false;  ///< that share counts against the background's
  };

  /// The I/O thread's eventfd: submissions, raises and the hooks' streams (through a task queued
  /// after their work) wake it. Shared with those tasks, which may run after the mover is gone.
  struct wake_signal {
    int fd = -1;
    wake_signal();
    ~wake_signal();
    wake_signal(const wake_signal&) = delete;
    wake_signal& operator=(const wake_signal&) = delete;
    void signal() const noexcept;
  };

  void wake() const noexcept { wake_->signal(); }
  void run_thread() noexcept;
  void loop(io::swap_channel* channel);
  /// Sleeps until a submission, a raise, a completion, or the end of a hook's device work.
  void sleep(io::swap_channel* channel);
  /// Takes what callers queued and raised; false when asked to stop and nothing is left.
  bool take_queued();
  /// Makes the pieces of the raised groups that have not started their I/O demand pieces.
  void apply_raises(const std::vector<std::uint64_t>& groups);
  /// Moves every piece on as far as it can go now, in (priority, seq) order, the requests before
  /// the hooks; returns whether any did.
  bool advance(io::swap_channel* channel);
  /// One piece as far as it goes (not into its hook unless `hooks`).
  bool step(active& a, io::swap_channel* channel, bool hooks);
  [[nodiscard]] bool budget_for(move_priority cls) const noexcept;
  /// Waits for the work queued on `stream` so far, logging a failure of it.
  void settle(stream_view stream) noexcept;
  void submit_io(active& a, io::swap_channel& channel, io::io_op op);
  void on_io(const io::io_completion& c);
  /// The piece's request is back from the kernel (its data may be unverified yet): its share of
  /// the budget goes back. Once per request; a no-op after.
  void give_back_request(active& a) noexcept;
  void fail(active& a, const carried_error& e);
  /// fail() with the message naming the piece, the extent and the offset.
  void fail_io(active& a, io::io_op op, const carried_error& cause);
  void report(active& a, const carried_error* e) noexcept;
  /// Drops the pieces that are over (reported, device work done): their slots go back.
  void retire();
  void note_busy(const io::swap_channel* channel);

  io::swap_store* store_;
  device* dev_;
  std::vector<mover_pool_spec> specs_;
  std::vector<std::unique_ptr<allocators::buffer_pool>> pools_;  ///< null for a pool of no slots
  std::size_t paths_ = 1;
  std::size_t budget_ = 0;             ///< requests at the kernel, all classes
  std::size_t background_budget_ = 0;  ///< requests at the kernel for prefetch and write-behind
  std::shared_ptr<const wake_signal> wake_;

  // Shared with callers.
  mutable std::mutex mutex_;
  std::deque<active> queued_;
  std::vector<std::uint64_t> raised_;  ///< groups raised since the I/O thread last looked
  std::uint64_t next_seq_ = 0;
  std::uint64_t next_group_ = 1;
  bool stopping_ = false;
  std::string backend_;
  mover_stats stats_;

  // The I/O thread's own: pieces in (priority, seq) order.
  std::vector<std::unique_ptr<active>> active_;
  std::vector<io::io_completion> done_;
  std::vector<std::uint64_t> landed_;  ///< the channel's poll: requests back from the kernel
  std::vector<bool> pool_blocked_;     ///< advance()'s: the pools a waiting piece holds back
  std::size_t in_flight_ = 0;
  std::size_t background_in_flight_ = 0;
  std::size_t hooked_ = 0;          ///< pieces waiting for a hook's device work to end
  std::size_t peak_in_flight_ = 0;  ///< stats_.peak_in_flight, read without the lock
  /// Counts not yet in stats_: report() adds them under the lock it takes anyway, so a request or
  /// a wait for a slot takes no lock of its own.
  struct unpublished_counts {
    std::uint64_t bytes_read = 0;
    std::uint64_t bytes_written = 0;
    std::uint64_t slot_waits = 0;
  };
  unpublished_counts unpublished_;
  std::optional<carried_error> broken_;  ///< why there is no channel (every NVMe piece fails with it)
  std::optional<std::chrono::steady_clock::time_point> busy_since_;
  std::jthread thread_;  // last: started once everything above exists
};

}  // namespace zoe::engine
