#pragma once
// The readiness signal behind io_engine::notify_fd and swap_channel::notify_fd. An eventfd that
// the backend (or the kernel for it) writes when a result is ready and the owner writes when it
// left work that a poll could do now, a timerfd for work that becomes possible at a time (an
// EAGAIN retry falling due), and an epoll set over both, plus any other notifier's fd the owner
// adds (a swap channel adds its engines'). The epoll fd is what callers wait on: it is readable
// while any member is, and cannot be read by mistake.

#include <atomic>
#include <chrono>
#include <cstddef>

#include "owned_fd.hpp"
#include "zoe/io/file.hpp"

namespace zoe::io::detail {

/// Thread-safety: signal(), range_unlocked(), enable() and fd() from any thread; the rest only
/// from the owner's driving thread.
class notifier final : public range_unlock_listener {
 public:
  using clock = std::chrono::steady_clock;

  /// Throws io_error naming the call when the kernel refuses an eventfd, timerfd or epoll set.
  notifier();

  /// What callers wait on (an epoll fd over everything below).
  [[nodiscard]] int fd() const noexcept { return epoll_.get(); }
  /// What backends write to when a result is ready.
  [[nodiscard]] int event_fd() const noexcept { return event_.get(); }
  /// Adds another readable-when-ready fd (another notifier's fd()) to the set. Throws io_error.
  void watch(int fd);

  /// Turns the owner's own bookkeeping on (clear, signal, timer): until a caller asked for the fd,
  /// polls cost no system call for it. The first call signals once, so a caller that starts
  /// waiting while the driving thread is between calls is woken to poll. Returns whether it was on.
  bool enable() noexcept;
  [[nodiscard]] bool enabled() const noexcept { return enabled_.load(std::memory_order_acquire); }

  /// Makes fd() readable. Never throws (a full eventfd counter is still readable).
  void signal() const noexcept;
  /// Makes the eventfd and a timer that went off unreadable again: called first in every poll,
  /// which then takes all that is ready, so nothing signalled before is lost.
  void clear() noexcept;
  /// Makes fd() readable at `due`, replacing an earlier time; nullopt-like `disarm` cancels.
  void arm_timer(clock::time_point due);
  void disarm_timer();

  void range_unlocked() noexcept override { signal(); }

 private:
  owned_fd event_;
  owned_fd timer_;
  owned_fd epoll_;
  std::atomic<bool> enabled_{false};
  bool timer_armed_ = false;
  clock::time_point timer_due_{};
};

/// now + timeout, or the end of time when that would overflow (a timeout of nanoseconds::max()).
[[nodiscard]] std::chrono::steady_clock::time_point deadline_after(std::chrono::nanoseconds timeout);

/// Waits until `fd` is readable or `deadline` passes; returns whether it is readable. Retries
/// EINTR. Throws io_error if poll(2) fails otherwise.
[[nodiscard]] bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline);

/// The timed wait of io_engine and swap_channel: polls (`poll()` returns how many completions
/// it handed out) and sleeps on `fd` between polls until `min_count` were handed out, nothing is
/// outstanding, or `deadline` passes. Returns how many were handed out.
template <typename Poll, typename Outstanding>
std::size_t poll_until(int fd, std::chrono::steady_clock::time_point deadline, std::size_t min_count, Poll&& poll,
                       Outstanding&& outstanding) {
  std::size_t moved = poll();
  while (moved < min_count && outstanding() > 0 && wait_readable(fd, deadline)) moved += poll();
  return moved;
}

}  // namespace zoe::io::detail
