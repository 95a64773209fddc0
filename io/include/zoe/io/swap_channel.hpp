#pragma once
// One thread's way into the swap store: reads and writes of extents, asynchronous like io_engine,
// over one engine per store path. Writes record each chunk's checksum once they are known good;
// reads verify every chunk they touch before reporting success.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "zoe/io/bounce_memory.hpp"
#include "zoe/io/io_request.hpp"
#include "zoe/io/io_stats.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::io {

class io_engine;
namespace detail {
class notifier;
class stats_recorder;
}  // namespace detail

struct swap_request {
  io_op op = io_op::read;
  swap_extent extent;
  std::uint64_t offset = 0;     ///< within the extent
  std::span<std::byte> buffer;  ///< untouched by writes; stays owned by the caller
  std::uint64_t user_data = 0;
};

/// Driven by one thread at a time: only that thread calls its members, except notify_fd() and
/// stats(), which any thread may call. The store must outlive the channel.
///
/// With checksums on, a read that starts or ends inside a chunk reads that chunk whole into
/// scratch memory of the channel (at most two chunks per read: its first and its last), verifies
/// it and copies out the part asked for; the whole chunks in between are read into the caller's
/// buffer and verified there. The scratch comes from the store's io.bounce when it has one (the
/// caller's pinned memory), else from the heap; when none can be had the read completes as
/// failed, saying so.
///
/// A write claims the chunks it covers until its completion is returned: a second write of any of
/// them meanwhile, from this channel or another, is refused with usage_error, and a read of them
/// completes as failed (their contents are changing). A chunk whose write failed cannot be read
/// until it is written again. Reading a chunk while a write of it is submitted is a caller error
/// the store cannot always see; the read then reports a checksum mismatch or stale data.
///
/// Every submit and run either takes a request or throws with nothing of it in flight: a request
/// the engines already started when a later step threw is waited for (and not reported) before
/// the exception leaves, so the caller may free its buffer at once. The one exception is an
/// engine that itself fails while run() waits: its requests may then still be in the kernel, so
/// keep their buffers until the channel is destroyed.
///
/// A channel with requests in flight must be destroyed on the thread that drives it: an io_uring
/// ring can be waited on only by its issuer, and its engine stops the process (std::terminate)
/// rather than close the ring under the kernel's writes into buffers the caller would free next.
class swap_channel {
 public:
  /// Throws what make_engine throws for the store's backend.
  explicit swap_channel(swap_store& store);
  /// Waits for everything in flight; never throws.
  ~swap_channel();
  swap_channel(const swap_channel&) = delete;
  swap_channel& operator=(const swap_channel&) = delete;

  /// Queues a request and hands it to the kernel; its completion comes from a later poll or wait. Throws usage_error,
  /// with nothing queued, when it cannot start: an unknown extent, a range outside it, a write that does not start on a
  /// chunk boundary of the extent and cover whole chunks (or end at the extent's end), or a write of a chunk another
  /// write holds. A read of never-written data, or of a chunk being written or whose write failed, completes as failed
  /// naming the extent and chunk.
  void submit(const swap_request& request);
  /// Like io_engine::poll / wait, for the requests taken by submit(). A completion that failed its
  /// checksum has corrupt == true.
  std::size_t poll(std::vector<io_completion>& out);
  /// poll(), for a caller that keeps a queue-depth budget of its own (the mover). A request holds
  /// its share of an engine's queue only until the kernel returns it; its checksums are verified
  /// after that, on this thread. This poll appends to `landed` the user_data of each submit()ted
  /// request the kernel returned since the last poll or wait, oldest first, and verifies none of
  /// them: the caller can start its next requests before their hashing. It verifies (and hands
  /// out in `out`, as poll() does) only requests listed by earlier calls: all of them when nothing
  /// new came back, else the oldest one, so each call holds a refill back by one hashing at most.
  /// A request in `landed` is still outstanding: its buffer holds data not yet verified and stays
  /// the channel's until its completion is handed out (failed, with corrupt == true, if the data
  /// is not what was written). Each request is listed once, before its completion, when the caller
  /// polls only this way; a request that never reached the kernel (empty, or refused) is not listed.
  std::size_t poll(std::vector<io_completion>& out, std::vector<std::uint64_t>& landed);
  std::size_t wait(std::vector<io_completion>& out, std::size_t min_count = 1);
  /// Like io_engine::wait with a timeout: returns what completed by then (possibly fewer than
  /// min_count, possibly none) and leaves the rest outstanding for later calls.
  std::size_t wait(std::vector<io_completion>& out, std::size_t min_count, std::chrono::nanoseconds timeout);
  /// Like io_engine::notify_fd, for the whole channel: one fd that becomes readable when a poll()
  /// of the channel may have something to do, whichever of its engines (one per store path) got
  /// a result, or when the channel itself holds completions to verify or hand out. The same
  /// rules: any thread may call it and wait on the fd; only the driving thread polls; never read
  /// from it. Throws io_error if the kernel refuses to add an engine's fd to the set (first call).
  [[nodiscard]] int notify_fd() const;
  /// Submits the requests and waits for exactly these; throws io_error or corruption_error for
  /// the first of them that failed. Requests queued earlier with submit() keep going, and their
  /// completions stay for poll and wait. If submitting request k throws, requests 0..k-1 are
  /// waited for before the exception leaves run().
  void run(std::span<const swap_request> requests);
  /// Requests taken by submit() whose completions poll or wait have not yet returned.
  [[nodiscard]] std::size_t outstanding() const noexcept { return outstanding_; }
  /// Registers caller memory with every engine of the channel (io_engine::register_buffers), so
  /// requests from it use fixed buffers where the backend has them. Returns whether they do.
  /// Throws usage_error while requests are outstanding.
  bool register_buffers(std::span<const std::span<std::byte>> regions);
  /// The channel's requests since it was made, per direction, as io_engine::stats counts them:
  /// bytes are what callers asked for (not the whole chunks a partial read fetches to verify),
  /// latency runs from submit to the completion being verified, and a checksum mismatch is an
  /// error. run()'s requests count too. Any thread may call it.
  [[nodiscard]] io_stats stats() const noexcept;
  /// The I/O backend the channel's engines took ("posix", ...).
  [[nodiscard]] std::string_view backend_name() const noexcept;

 private:
  struct pending;

  /// submit(), with the completion routed to run()'s list when `in_run`.
  void start(const swap_request& request, bool in_run);
  [[nodiscard]] std::uint32_t take_slot();
  /// Validates the request and takes what it needs (pin, write claim, scratch); throws with
  /// nothing taken. Returns false when it already completed (empty, or a read refused).
  [[nodiscard]] bool prepare(pending& p, const swap_request& request);
  void issue(std::uint32_t slot);
  void submit_range(std::uint32_t slot, std::uint64_t extent_offset, std::span<std::byte> buffer);
  [[nodiscard]] bool take_scratch(pending& p);
  void on_piece(const io_completion& c);
  /// Finishes up to `n` requests whose pieces all came back, oldest first.
  void finish_completed(std::size_t n);
  /// Progresses and finishes until every request of the run() in progress is done.
  void run_until_done();
  /// Verifies, records checksums and hands the completion to poll/wait or run().
  void finish(std::uint32_t slot);
  /// Gives back what the request took and frees its slot.
  void retire(std::uint32_t slot) noexcept;
  /// One round of progress on every engine; with `block`, sleeps on one busy engine if none had
  /// anything ready. Returns whether any piece came back. Throws internal_error when asked to
  /// block with nothing in flight (a request counted but never started would otherwise spin).
  bool progress(bool block);
  /// Marks the request as never to be reported (nor counted by run()); retires it at once when
  /// none of its pieces is out, and returns whether it did.
  bool abandon(std::uint32_t slot) noexcept;
  /// After an engine failed under run(): abandons every request of that run still out.
  void abandon_run() noexcept;
  /// Abandons the slot and progresses until its pieces all came back (its submit threw).
  void drain_abandoned(std::uint32_t slot) noexcept;
  std::size_t collect(std::vector<io_completion>& out, std::size_t min_count, bool block);
  /// Moves the finished completions of submit()'s requests to `out`; returns how many.
  std::size_t hand_out(std::vector<io_completion>& out);
  std::size_t collect_loop(std::vector<io_completion>& out, std::size_t min_count, bool block);
  /// Leaves the notifier readable when the channel holds work for the next poll.
  void arm_notification() const noexcept;
  swap_store& store_;
  std::vector<std::unique_ptr<io_engine>> engines_;
  std::vector<std::unique_ptr<pending>> slots_;
  std::vector<std::uint32_t> free_slots_;
  std::vector<io_completion> ready_;     ///< completions of submit()'s requests, for poll and wait
  std::vector<io_completion> run_done_;  ///< completions of the run() in progress
  std::size_t run_left_ = 0;             ///< requests of the run() in progress not yet complete
  std::vector<io_completion> piece_completions_;
  std::deque<std::uint32_t> completed_;  ///< slots whose pieces all came back, not yet finished
  std::vector<std::uint32_t> landed_;    ///< slots of completed_ not yet listed by poll(out, landed)
  std::size_t outstanding_ = 0;
  std::unique_ptr<detail::notifier> notifier_;
  std::unique_ptr<detail::stats_recorder> stats_;
  std::shared_ptr<bounce_memory> scratch_memory_;  ///< the store's io.bounce, or the heap keeping one spare
  mutable std::once_flag notify_once_;
};

}  // namespace zoe::io
