#pragma once
// The handle of one move a swapper runs for its caller: bringing a shard to device memory, or
// writing one back home. The swapper's I/O thread completes it; any thread may wait on it.

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "zoe/core/device.hpp"
#include "zoe/engine/swap/carried_error.hpp"

namespace zoe::engine {

namespace detail {
/// What a ticket and the swapper share: done once the host side of the move is over (the reads
/// came back and their copies are queued, or the write is known good), with the event that
/// completes when the device side has, or the failure.
struct ticket_state {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::optional<carried_error> failure;
  device* dev = nullptr;
  device_event copied;  ///< recorded after the move's last device copy (never recorded: nothing to wait for)
  /// Makes the move's pieces demand pieces (mover::raise); empty when there is nothing to raise.
  std::function<void()> raise;

  /// Completes the ticket (no `error`: it succeeded) and wakes its waiters. Never throws.
  void complete(std::optional<carried_error> error) noexcept;
};
}  // namespace detail

/// Shared handle of one move. Copyable; a default-constructed ticket is already done.
/// Thread-safe: any thread may query and wait.
class swap_ticket {
 public:
  swap_ticket() = default;
  explicit swap_ticket(std::shared_ptr<detail::ticket_state> state) noexcept : state_(std::move(state)) {}

  /// True once the host side is over, successfully or not. Never blocks, never throws.
  [[nodiscard]] bool ready() const noexcept;
  /// Blocks until ready(), without rethrowing a failure. Never throws.
  void wait_ready() const noexcept;
  /// Blocks until the host side is over; rethrows its failure (an io_error or corruption_error
  /// naming the parameter, the path and the offset).
  void wait() const;
  /// wait(), then makes the work queued on `stream` after this call wait for the move's device copies.
  void wait(stream_view stream) const;
  /// wait(), then blocks until the device copies are done too.
  void synchronize() const;
  /// The compute is about to wait on this move: a prefetch becomes a demand fetch, so the rest of
  /// it is not served behind other prefetches. Nothing for a move that is over or has no NVMe
  /// pieces. Never blocks, never throws.
  void raise_to_demand() const noexcept;
  /// The failure, once ready (nothing if it succeeded or is not ready).
  [[nodiscard]] std::optional<carried_error> failure() const;

 private:
  std::shared_ptr<detail::ticket_state> state_;
};

}  // namespace zoe::engine
