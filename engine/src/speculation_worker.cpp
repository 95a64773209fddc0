// The speculation thread (speculation_worker.hpp).
#include "speculation_worker.hpp"

#include <utility>

namespace zoe::engine::detail {

speculation_worker::speculation_worker(std::function<void(parameter_id)> step)
    : step_(std::move(step)), thread_([this] { run(); }) {}

speculation_worker::~speculation_worker() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void speculation_worker::hand_in(parameter_id p) {
  {
    const std::lock_guard lock(mutex_);
    queue_.push_back(p);
  }
  changed_.notify_all();
}

void speculation_worker::wait_idle() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

void speculation_worker::run() noexcept {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, with nothing left
    const parameter_id p = queue_.front();
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    step_(p);
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace zoe::engine::detail
