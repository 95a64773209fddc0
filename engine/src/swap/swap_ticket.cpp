#include "zoe/engine/swap/swap_ticket.hpp"

namespace zoe::engine {

namespace detail {
void ticket_state::complete(std::optional<carried_error> error) noexcept {
  {
    const std::lock_guard lock(mutex);
    failure = std::move(error);
    done = true;
  }
  done_cv.notify_all();
}
}  // namespace detail

bool swap_ticket::ready() const noexcept {
  if (!state_) return true;
  const std::lock_guard lock(state_->mutex);
  return state_->done;
}

void swap_ticket::wait_ready() const noexcept {
  if (!state_) return;
  std::unique_lock lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
}

void swap_ticket::wait() const {
  wait_ready();
  if (const std::optional<carried_error> f = failure()) f->raise();
}

void swap_ticket::wait(stream_view stream) const {
  if (!state_) return;
  wait_ready();
  // Also after a failure: copies of the pieces read before it may still write the caller's memory.
  if (state_->copied.valid()) state_->dev->wait(stream, state_->copied);
  wait();
}

void swap_ticket::synchronize() const {
  if (!state_) return;
  wait_ready();
  if (state_->copied.valid()) state_->dev->synchronize(state_->copied);
  wait();
}

void swap_ticket::raise_to_demand() const noexcept {
  if (!state_ || !state_->raise || ready()) return;
  state_->raise();
}

std::optional<carried_error> swap_ticket::failure() const {
  if (!state_) return std::nullopt;
  const std::lock_guard lock(state_->mutex);
  return state_->done ? state_->failure : std::nullopt;
}

}  // namespace zoe::engine
