#include "aio_backend.hpp"

#include <cerrno>
#include <ctime>
#include <fstream>

#include "zoe/core/check.hpp"

namespace zoe::io::detail {
namespace {

// io_setup refuses more than fs.aio-max-nr events in the whole system (65536 by default).
constexpr std::size_t max_context_events = 65536;

std::string aio_max_nr() {
  std::ifstream in("/proc/sys/fs/aio-max-nr");
  std::string value;
  in >> value;
  return value.empty() ? "unknown" : value;
}

}  // namespace

std::int64_t aio_event_result(unsigned long res, unsigned long res2) noexcept {
  const auto result = static_cast<std::int64_t>(res);
  const auto second = static_cast<std::int64_t>(res2);
  if (result < 0) return result;
  if (second < 0) return second;
  if (second != 0) return -EIO;
  return result;
}

aio_backend::aio_backend(const engine_options& options)
    : async_backend(options, async_capacity(options, max_context_events, "aio context")),
      iocbs_(capacity()),
      events_(capacity()) {
  batch_.reserve(capacity());
  const int result = io_setup(static_cast<int>(capacity()), &context_);
  if (result < 0) {
    std::string why;
    if (result == -EAGAIN) why = str(" (the system-wide limit fs.aio-max-nr is ", aio_max_nr(), " events)");
    if (result == -ENOSYS) why = " (this kernel has no native aio)";
    throw io_error(str("cannot set up an aio context of ", capacity(), " events: ", errno_text(-result), why), -result);
  }
}

aio_backend::~aio_backend() {
  drain_before_close("aio");
  io_destroy(context_);
}

std::size_t aio_backend::start(std::span<const std::uint32_t> slots) {
  batch_.clear();
  for (const std::uint32_t slot : slots) {
    const raw_op& op = op_in(slot);
    iocb& cb = iocbs_[slot];
    if (op.op == io_op::read) {
      io_prep_pread(&cb, op.fd, op.buffer, op.length, static_cast<long long>(op.offset));
    } else {
      io_prep_pwrite(&cb, op.fd, op.buffer, op.length, static_cast<long long>(op.offset));
    }
    if (notify_fd() >= 0) io_set_eventfd(&cb, notify_fd());  // the kernel signals it on completion
    batch_.push_back(&cb);
  }
  std::size_t taken = 0;
  while (taken < batch_.size()) {
    const int result = io_submit(context_, static_cast<long>(batch_.size() - taken), batch_.data() + taken);
    if (result > 0) {
      taken += static_cast<std::size_t>(result);  // may be part of the batch: go on with the rest
    } else if (result == -EAGAIN || result == 0) {
      break;  // the context is full for now: the rest stays queued until completions make room
    } else if (result == -EINTR) {
      continue;
    } else {
      // io_submit reports the first iocb it could not start (EBADF, EINVAL for a misaligned
      // O_DIRECT request, ...): that operation failed; the ones after it still get their turn.
      complete_unposted(slots[taken], result);
      ++taken;
    }
  }
  // Reap what is due while we are here (no syscall if none). Having taken the slots, start()
  // may not throw: a failure here is the next wait()'s to report, which asks the same.
  if (overlap_events()) static_cast<void>(deliver(0));
  return taken;
}

int aio_backend::deliver(int min_count) {
  // A zero timeout lets libaio answer from the completion ring in user space when it is empty.
  timespec no_wait{};
  for (;;) {
    const int n = io_getevents(context_, min_count, static_cast<long>(events_.size()), events_.data(),
                               min_count == 0 ? &no_wait : nullptr);
    if (n == -EINTR) continue;
    for (int i = 0; i < n; ++i) {
      const io_event& e = events_[static_cast<std::size_t>(i)];
      const auto slot = static_cast<std::uint32_t>(e.obj - iocbs_.data());
      complete(slot, aio_event_result(e.res, e.res2));
    }
    return n;
  }
}

void aio_backend::wait(std::size_t min_completions) {
  std::size_t got = 0;
  do {
    const int n = deliver(static_cast<int>(min_completions - got));
    ZOE_CHECK_NEG_ERRNO(n, "io_getevents failed");
    got += static_cast<std::size_t>(n);
  } while (got < min_completions);
}

}  // namespace zoe::io::detail
