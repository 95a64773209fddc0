#include "notifier.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <ctime>

#include "zoe/core/check.hpp"

namespace zoe::io::detail {
namespace {

int checked(int fd, const char* what) {
  if (fd < 0) throw io_error(str("cannot create the I/O completion notifier's ", what, ": ", errno_text(errno)), errno);
  return fd;
}

timespec to_timespec(std::chrono::nanoseconds t) {
  const auto s = std::chrono::duration_cast<std::chrono::seconds>(t);
  return {static_cast<time_t>(s.count()), static_cast<long>((t - s).count())};
}

}  // namespace

notifier::notifier()
    : event_(checked(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), "eventfd")),
      timer_(checked(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC), "timerfd")),
      epoll_(checked(::epoll_create1(EPOLL_CLOEXEC), "epoll set")) {
  watch(event_.get());
  watch(timer_.get());
}

void notifier::watch(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  ZOE_CHECK_ERRNO(::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev), "cannot add fd ", fd,
                  " to the I/O completion notifier's epoll set");
}

bool notifier::enable() noexcept {
  if (enabled_.exchange(true, std::memory_order_acq_rel)) return true;
  signal();
  return false;
}

void notifier::signal() const noexcept {
  const std::uint64_t one = 1;
  // EAGAIN only when the counter is full, and then it is readable anyway.
  static_cast<void>(::write(event_.get(), &one, sizeof one));
}

void notifier::clear() noexcept {
  std::uint64_t count = 0;
  static_cast<void>(::read(event_.get(), &count, sizeof count));
  if (timer_armed_ && clock::now() >= timer_due_) {
    // Went off (or is about to): its expiry count makes it readable until read.
    static_cast<void>(::read(timer_.get(), &count, sizeof count));
    timer_armed_ = false;
  }
}

void notifier::arm_timer(clock::time_point due) {
  if (timer_armed_ && due == timer_due_) return;
  itimerspec spec{};
  // Zero would disarm: a time already past still goes off at once as 1 ns after the epoch.
  spec.it_value = to_timespec(std::max(due.time_since_epoch(), std::chrono::nanoseconds(1)));
  ZOE_CHECK_ERRNO(::timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &spec, nullptr),
                  "cannot arm the I/O completion notifier's timer");
  timer_armed_ = true;
  timer_due_ = due;
}

void notifier::disarm_timer() {
  if (!timer_armed_) return;
  const itimerspec none{};
  ZOE_CHECK_ERRNO(::timerfd_settime(timer_.get(), 0, &none, nullptr),
                  "cannot disarm the I/O completion notifier's timer");
  std::uint64_t count = 0;
  static_cast<void>(::read(timer_.get(), &count, sizeof count));
  timer_armed_ = false;
}

std::chrono::steady_clock::time_point deadline_after(std::chrono::nanoseconds timeout) {
  const auto now = std::chrono::steady_clock::now();
  const auto room = std::chrono::steady_clock::time_point::max() - now;
  return timeout >= room ? std::chrono::steady_clock::time_point::max() : now + timeout;
}

bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    const timespec timeout = to_timespec(std::max(std::chrono::nanoseconds(0), left));
    pollfd p{fd, POLLIN, 0};
    const int n = ::ppoll(&p, 1, &timeout, nullptr);
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) ZOE_CHECK_ERRNO(n, "poll of the I/O completion notifier failed");
  }
}

}  // namespace zoe::io::detail
