#pragma once
// The optimizer step's I/O thread: the one thread that drives the step's swap_channel. The step
// hands it batches (the reads of one piece, or its writes); the thread submits them, reaps their
// completions, and reports each batch once all its requests are back, with the first that failed.
// It never touches the slots' contents or the pool: the step owns those, and gives a slot back only
// after the batch that uses it is reported.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "zoe/engine/swap/carried_error.hpp"
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
  /// Starts the thread. `slots` is the pinned memory requests use (registered with the channel as
  /// one region); the store must outlive the object.
  step_io(io::swap_store& store, std::span<std::byte> slots);
  /// Waits for every batch handed in, then joins the thread. Never throws.
  ~step_io();
  step_io(const step_io&) = delete;
  step_io& operator=(const step_io&) = delete;

  /// Queues a batch; its result comes from wait_any(). An empty batch is reported at once.
  void submit(std::uint64_t batch, std::vector<io::swap_request> requests);
  /// Waits for the next finished batch (in the order they finish). usage_error when none is out.
  [[nodiscard]] io_batch_result wait_any();
  /// Batches handed in and not yet returned by wait_any().
  [[nodiscard]] std::size_t outstanding() const noexcept { return outstanding_; }
  /// Bytes the channel moved, per direction, since the object was made (successful requests).
  [[nodiscard]] std::uint64_t bytes_read() const;
  [[nodiscard]] std::uint64_t bytes_written() const;

 private:
  struct batch_state {
    std::uint64_t id = 0;
    std::vector<io::swap_request> requests;
    std::size_t left = 0;  ///< requests not yet back
    std::optional<std::size_t> failed_request;
    carried_error failure;
  };

  void run() noexcept;
  void loop(io::swap_channel& channel);
  /// Submits the queued batches' requests; a refused submit fails its request at once.
  void start_queued(io::swap_channel& channel);
  void on_completion(const io::io_completion& c);
  /// One request of an active batch is back (`empty`: the batch had none); reports the batch when it was the last.
  void request_done(std::size_t slot, std::size_t index, const carried_error* failure, bool empty = false);

  io::swap_store& store_;
  std::span<std::byte> slots_;
  std::size_t outstanding_ = 0;  // the step's thread only

  mutable std::mutex mutex_;
  std::condition_variable wake_;      // the I/O thread: work queued, or stop
  std::condition_variable finished_;  // the step's thread: a batch finished
  std::deque<batch_state> queued_;
  std::deque<io_batch_result> done_;
  std::uint64_t bytes_read_ = 0;
  std::uint64_t bytes_written_ = 0;
  bool stopping_ = false;
  std::optional<carried_error> broken_;  // the thread stopped: every batch fails with this

  // The I/O thread's own: batches in flight, indexed by user_data >> 16.
  std::vector<std::optional<batch_state>> active_;
  std::vector<std::size_t> free_active_;
  std::vector<io::io_completion> completions_;

  std::thread thread_;  // last: it starts with everything above in place
};

}  // namespace zoe::engine::detail
