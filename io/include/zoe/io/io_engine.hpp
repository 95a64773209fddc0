#pragma once
// The I/O engine: reads and writes of host memory at file offsets, byte-exact at any size, offset
// and address, with every result checked. It splits requests into block_size chunks, sends the
// aligned middle straight to the backend and routes unaligned heads and tails through aligned
// bounce buffers (read-modify-write under a block-range lock for writes), resubmits short
// transfers, retries EINTR and EAGAIN, and turns every other error into a failed completion that
// names the file, offset, length and errno text.

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "zoe/io/engine_options.hpp"
#include "zoe/io/io_backend.hpp"
#include "zoe/io/io_request.hpp"

namespace zoe::io {

namespace detail {
class engine_state;
}

/// Thread-safety: one thread drives an engine at a time (like a ring with a single issuer). Use
/// one engine per thread; engines may share files. Progress on requests happens inside poll(),
/// wait() and run().
class io_engine {
 public:
  /// Takes ownership of the backend. Throws usage_error if the options are invalid.
  io_engine(std::unique_ptr<io_backend> backend, engine_options options);
  /// Waits for everything still in flight (buffers may be in use until then); never throws.
  ~io_engine();
  io_engine(const io_engine&) = delete;
  io_engine& operator=(const io_engine&) = delete;

  /// Queues requests. Throws usage_error for a request that cannot be started at all (no file, a
  /// write to a read-only file, an offset that overflows); every other failure arrives as a
  /// failed completion.
  void submit(std::span<const io_request> requests);
  void submit(const io_request& request) { submit(std::span(&request, 1)); }

  /// Appends completions that are ready without blocking. Returns how many were appended.
  std::size_t poll(std::vector<io_completion>& out);
  /// Appends completions, blocking until at least `min_count` arrived or none are outstanding.
  std::size_t wait(std::vector<io_completion>& out, std::size_t min_count = 1);
  /// Submits the requests, waits for all of them, and throws io_error for the first that failed.
  void run(std::span<const io_request> requests);

  /// Registers the regions where the caller's I/O buffers live (pinned memory kept alive until
  /// the next call or the engine's end) with the backend, e.g. as io_uring fixed buffers; see
  /// io_backend::register_buffers. Returns whether the backend uses them. Throws usage_error if
  /// requests are outstanding.
  bool register_buffers(std::span<const std::span<std::byte>> regions);

  /// Requests submitted and not yet returned as completions.
  [[nodiscard]] std::size_t outstanding() const noexcept;
  [[nodiscard]] std::string_view backend_name() const noexcept;
  [[nodiscard]] const engine_options& options() const noexcept;

 private:
  std::unique_ptr<detail::engine_state> state_;
};

}  // namespace zoe::io
