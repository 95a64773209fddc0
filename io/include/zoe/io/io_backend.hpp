#pragma once
// The backend seam under io_engine. A backend only executes "raw" operations: one read or write
// whose buffer address, file offset and length already satisfy the file's O_DIRECT alignment.
// It reports each result as bytes transferred or -errno, like a syscall or an io_uring CQE, and
// never retries: the engine checks every result, resubmits short transfers and retries EINTR and
// EAGAIN, so each backend stays a thin executor and all share one set of checks.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "zoe/io/io_request.hpp"

namespace zoe::io {

struct raw_op {
  int fd = -1;
  io_op op = io_op::read;
  std::byte* buffer = nullptr;
  std::size_t length = 0;
  std::uint64_t offset = 0;
  std::uint64_t tag = 0;  ///< returned unchanged in the raw_result
};

struct raw_result {
  std::uint64_t tag = 0;
  std::int64_t result = 0;  ///< bytes transferred (possibly short), or -errno
};

/// Thread-safety: a backend is driven by one thread at a time (its io_engine's caller); it is
/// destroyed only once nothing is in flight, or else it must wait for what it holds. It may write
/// the notification eventfd from any thread of its own.
class io_backend {
 public:
  virtual ~io_backend() = default;
  io_backend() = default;
  io_backend(const io_backend&) = delete;
  io_backend& operator=(const io_backend&) = delete;

  /// Short name ("posix", "uring", "aio").
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// How many raw operations may be in flight at once; submit() never gets more.
  [[nodiscard]] virtual std::size_t capacity() const noexcept = 0;
  /// Starts the operations. Failures to start are reported as results, not thrown, except a
  /// broken backend (throws io_error). If it throws it took none of `ops`: none comes back from
  /// reap(), and the engine fails their requests with its reason. Once it returns, every op
  /// comes back from reap() exactly once.
  virtual void submit(std::span<const raw_op> ops) = 0;
  /// Appends finished results to `out`, blocking until at least `min_results` have finished.
  /// Returns how many were appended. `min_results` never exceeds the number in flight.
  virtual std::size_t reap(std::vector<raw_result>& out, std::size_t min_results) = 0;
  /// From now on, makes `eventfd` (an eventfd(2) the engine owns and keeps open for the
  /// backend's life) readable whenever a result becomes ready that reap() would return: the
  /// kernel may do it for its own completions (io_uring_register_eventfd, IOCB_FLAG_RESFD), a
  /// thread pool writes it, and a result known at submit() (an operation that failed to start)
  /// counts too. Extra writes are harmless; a missing one leaves an event loop asleep. Called
  /// once, before the first submit(), by the thread that makes the engine.
  virtual void notify_on_result(int eventfd) = 0;
  /// Optional: tells the backend that I/O buffers will mostly lie inside these regions (pinned
  /// memory the caller keeps for the backend's lifetime or until the next call), so it can
  /// register them with the kernel once (io_uring fixed buffers). Replaces any earlier set; an
  /// empty span unregisters. Operations outside the regions still work. Call only with nothing
  /// in flight. Returns true if the backend now uses the registration, false if it has none or
  /// the kernel refused (the backend then warns once and works unregistered).
  virtual bool register_buffers(std::span<const std::span<std::byte>> regions) {
    static_cast<void>(regions);
    return false;
  }
};

}  // namespace zoe::io
