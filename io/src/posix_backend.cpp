#include "posix_backend.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace zoe::io::detail {
namespace {
constexpr std::size_t max_threads = 128;
}

posix_backend::posix_backend(const engine_options& options) {
  const std::size_t n = std::min(max_threads, options.queue_depth * options.intra_op_parallelism);
  workers_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
}

posix_backend::~posix_backend() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  has_work_.notify_all();
  workers_.clear();  // joins
}

void posix_backend::submit(std::span<const raw_op> ops) {
  {
    const std::lock_guard lock(mutex_);
    queue_.insert(queue_.end(), ops.begin(), ops.end());
  }
  if (ops.size() == 1) {
    has_work_.notify_one();
  } else {
    has_work_.notify_all();
  }
}

void posix_backend::notify_on_result(int eventfd) {
  const std::lock_guard lock(mutex_);
  notify_fd_ = eventfd;
}

std::size_t posix_backend::reap(std::vector<raw_result>& out, std::size_t min_results) {
  std::unique_lock lock(mutex_);
  has_results_.wait(lock, [&] { return results_.size() >= min_results; });
  const std::size_t n = results_.size();
  out.insert(out.end(), results_.begin(), results_.end());
  results_.clear();
  return n;
}

void posix_backend::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    has_work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    const raw_op op = queue_.front();
    queue_.pop_front();
    lock.unlock();
    // One syscall per submission: the engine checks the result and resubmits what is left.
    const ssize_t n = op.op == io_op::read ? ::pread(op.fd, op.buffer, op.length, static_cast<off_t>(op.offset))
                                           : ::pwrite(op.fd, op.buffer, op.length, static_cast<off_t>(op.offset));
    const std::int64_t result = n < 0 ? -std::int64_t{errno} : std::int64_t{n};
    lock.lock();
    // Only the first result after a reap needs a write: the engine clears the eventfd before it
    // reaps, and a reap takes every result queued, so the later ones ride on this signal.
    const bool first = results_.empty();
    results_.push_back({op.tag, result});
    has_results_.notify_one();
    if (first && notify_fd_ >= 0) {
      const int fd = notify_fd_;
      lock.unlock();
      static_cast<void>(::eventfd_write(fd, 1));
      lock.lock();
    }
  }
}

}  // namespace zoe::io::detail
