#pragma once
// The optimizer step's reads and writes, as a client of the rank's mover (swap/mover.hpp): the step
// hands in batches (the reads of one piece, or its writes), each request one mover piece in the
// step's own pinned slot (the mover's I/O thread reads into it or writes from it), and gets each
// batch back once all its pieces are done, with the first that failed. It never touches the slots'
// contents: the step owns them, and gives a slot back only after the batch that uses it is back.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "zoe/engine/swap/carried_error.hpp"
#include "zoe/engine/swap/mover.hpp"
#include "zoe/io/swap_channel.hpp"

namespace zoe::engine::detail {

/// A finished batch.
struct io_batch_result {
  std::uint64_t batch = 0;
  /// The first request of the batch that failed (its index in the batch) and why; nullopt when
  /// every request is known good.
  std::optional<std::size_t> failed_request;
  carried_error failure;
};

class step_io {
 public:
  /// The mover must outlive the object.
  explicit step_io(mover& movers) : movers_(movers) {}
  /// Waits for every piece handed to the mover. Never throws.
  ~step_io();
  step_io(const step_io&) = delete;
  step_io& operator=(const step_io&) = delete;

  /// Hands a batch's requests to the mover at `priority`; its result comes from wait_any(). An
  /// empty batch is reported at once; a request the mover refuses fails at once.
  void submit(std::uint64_t batch, const std::vector<io::swap_request>& requests, move_priority priority);
  /// Waits for the next finished batch (in the order they finish). usage_error when none is out.
  [[nodiscard]] io_batch_result wait_any();
  /// Batches handed in and not yet returned by wait_any().
  [[nodiscard]] std::size_t outstanding() const noexcept { return outstanding_; }
  /// Bytes moved per direction since the object was made (successful requests).
  [[nodiscard]] std::uint64_t bytes_read() const;
  [[nodiscard]] std::uint64_t bytes_written() const;

 private:
  struct batch_state {
    std::uint64_t id = 0;
    std::size_t left = 0;  ///< requests not yet back
    std::optional<std::size_t> failed_request;
    carried_error failure;
  };

  /// Request `index` of `b` is back (on the mover's thread, or here when refused).
  void request_done(batch_state& b, std::size_t index, io::io_op op, std::size_t bytes, const carried_error* failure);

  mover& movers_;
  std::size_t outstanding_ = 0;  // the step's thread only

  mutable std::mutex mutex_;
  std::condition_variable finished_;
  std::deque<io_batch_result> done_;
  std::size_t with_mover_ = 0;  // batches with pieces the mover has not reported
  std::uint64_t bytes_read_ = 0;
  std::uint64_t bytes_written_ = 0;
};

}  // namespace zoe::engine::detail
