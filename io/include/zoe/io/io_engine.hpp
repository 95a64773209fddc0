#pragma once
// The I/O engine: reads and writes of host memory at file offsets, byte-exact at any size, offset
// and address, with every result checked. It splits requests into block_size chunks, sends the
// aligned middle straight to the backend and routes unaligned heads and tails through aligned
// bounce buffers (lent by engine_options::bounce, else the heap; read-modify-write under a
// block-range lock for writes), resubmits short transfers, retries EINTR at once and EAGAIN after
// a pause that grows, and turns every other error into a failed completion that names the file,
// offset, length and errno text. Callers drive it from their own loop through notify_fd(), or
// block in wait() (with or without a timeout); stats() counts each direction.

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "zoe/io/engine_options.hpp"
#include "zoe/io/io_backend.hpp"
#include "zoe/io/io_request.hpp"
#include "zoe/io/io_stats.hpp"

namespace zoe::io {

namespace detail {
class engine_state;
}

/// Thread-safety: one thread drives an engine at a time (like a ring with a single issuer). Use
/// one engine per thread; engines may share files. Progress on requests happens inside poll(),
/// wait() and run(), never inside submit(). Only the driving thread calls the engine's members,
/// except notify_fd() and stats(), which any thread may call at any time. An engine may be
/// handed to another thread only while it is idle (outstanding() == 0 and no run() under way);
/// that includes destroying it: the io_uring backend's ring can be reaped only by the thread that
/// issued into it, so a busy engine destroyed by another thread stops the process
/// (std::terminate, after saying why) rather than return while the kernel may still write into
/// buffers the caller frees next.
///
/// The contract for buffers, which swap_channel follows too:
/// - A request's buffer is in use from the submit() that accepted it until its completion is
///   handed out (by poll() or wait()), or until the run() that took it returns or throws.
/// - A call that throws has started nothing it did not also finish: submit() and run() check
///   every request before queuing any (all or nothing), and run() returns or throws only once
///   each of its requests has completed. The one exception is a backend that itself breaks while
///   run() waits (see run()): keep that run's buffers until the engine is destroyed or the next
///   run() returns.
/// - wait() with a timeout hands out what arrived by then and leaves the rest outstanding: a
///   completion is handed out exactly once, by whichever poll() or wait() takes it.
/// - run() answers for its own requests only. Completions of requests submitted earlier that
///   arrive while it waits stay queued for poll() and wait(); their failures are not its own.
class io_engine {
 public:
  /// Takes ownership of the backend. Throws usage_error if the options are invalid.
  io_engine(std::unique_ptr<io_backend> backend, engine_options options);
  /// Waits for everything still in flight (buffers may be in use until then), the requests of
  /// submit() and of a run() that the backend broke off alike; never throws. On a thread other
  /// than the one driving a busy io_uring engine it terminates the process (see above).
  ~io_engine();
  io_engine(const io_engine&) = delete;
  io_engine& operator=(const io_engine&) = delete;

  /// Queues requests; all or none. Throws usage_error, having queued none of them, when one
  /// cannot be started at all (no file, a write to a read-only file, a range past the largest
  /// file offset); every other failure arrives as a failed completion. Starts no I/O itself.
  void submit(std::span<const io_request> requests);
  void submit(const io_request& request) { submit(std::span(&request, 1)); }

  /// Appends completions of submit()ted requests that are ready, without blocking. Returns how
  /// many were appended.
  std::size_t poll(std::vector<io_completion>& out);
  /// Appends completions of submit()ted requests, blocking until at least `min_count` arrived or
  /// none are outstanding.
  std::size_t wait(std::vector<io_completion>& out, std::size_t min_count = 1);
  /// Like wait(), but gives up once `timeout` has passed, returning what arrived by then (possibly
  /// fewer than min_count, possibly none); the others stay outstanding for later calls. It sleeps
  /// on notify_fd() between polls. nanoseconds::max() waits without limit; zero polls once.
  /// Throws io_error if the kernel refuses to poll the notifier.
  std::size_t wait(std::vector<io_completion>& out, std::size_t min_count, std::chrono::nanoseconds timeout);

  /// A file descriptor that becomes readable when a poll() may have something to do: a result
  /// arrived, a retry fell due, a block range this engine waits for was unlocked by another
  /// engine, or a submit() left requests for the next poll to start. Readable is a hint, never a
  /// promise (a poll may then find nothing); not readable means no poll would make progress, as
  /// long as the driving thread polls after it has seen it readable. Wait for it with poll(2),
  /// select(2) or epoll (it is an epoll fd, so it can also join an epoll set of the caller's);
  /// never read from it: the engine's own poll() and wait() make it unreadable again.
  ///
  /// Threads: any thread may call notify_fd() and wait on the fd (it stays open as long as the
  /// engine); only the driving thread then calls poll() or wait(), so a helper thread that sees it
  /// readable hands the work to the driving thread rather than polling itself. The first call
  /// turns the engine's bookkeeping for it on (before, poll costs no extra system call) and makes
  /// the fd readable once, so a waiter that starts between two polls is not left asleep.
  /// Never throws.
  [[nodiscard]] int notify_fd() const noexcept;
  /// Starts the requests, waits for all of them, and throws io_error (or corruption_error) for
  /// the first of them that failed. Throws usage_error as submit() does, having started none.
  /// Requests submitted earlier go on and stay for poll() and wait(). If the backend itself
  /// breaks (its reap throws) the exception comes out at once, and the destructor or the next
  /// run() waits for this run's requests.
  void run(std::span<const io_request> requests);

  /// Registers the regions where the caller's I/O buffers live (pinned memory kept alive until
  /// the next call or the engine's end) with the backend, e.g. as io_uring fixed buffers; see
  /// io_backend::register_buffers. Returns whether the backend uses them. Throws usage_error if
  /// requests are outstanding.
  bool register_buffers(std::span<const std::span<std::byte>> regions);

  /// Requests submit()ted and not yet returned as completions (run()'s are not counted).
  [[nodiscard]] std::size_t outstanding() const noexcept;
  [[nodiscard]] std::string_view backend_name() const noexcept;
  /// Reads and writes since the engine was made: requests completed (submit()'s and run()'s),
  /// bytes, errors, the time each direction had a request outstanding, and summed latency from
  /// submit to completion. Costs the hot path a clock read per request at each end and no system
  /// call. Any thread may call it; the figures may be a moment apart from one another.
  [[nodiscard]] io_stats stats() const noexcept;
  [[nodiscard]] const engine_options& options() const noexcept;

 private:
  std::unique_ptr<detail::engine_state> state_;
};

}  // namespace zoe::io
