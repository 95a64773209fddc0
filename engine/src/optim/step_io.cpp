// The optimizer step's reads and writes through the mover.
#include "step_io.hpp"

#include <exception>
#include <utility>

#include "zoe/core/check.hpp"

namespace zoe::engine::detail {

step_io::~step_io() {
  // The mover's done callbacks reach into this object: every piece must be back first.
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] { return with_mover_ == 0; });
}

void step_io::submit(std::uint64_t batch, const std::vector<io::swap_request>& requests, move_priority priority) {
  ++outstanding_;
  if (requests.empty()) {
    const std::lock_guard lock(mutex_);
    done_.push_back({.batch = batch, .failed_request = std::nullopt, .failure = {}});
    return;
  }
  // Shared by the pieces' callbacks; the last one back reports the batch.
  auto state = std::make_shared<batch_state>(batch_state{.id = batch, .left = requests.size()});
  {
    const std::lock_guard lock(mutex_);
    ++with_mover_;
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const io::swap_request& r = requests[i];
    const mover::io_range range{.extent = r.extent, .offset = r.offset};
    mover::piece p;
    p.priority = priority;
    p.buffer = r.buffer;
    p.bytes = r.buffer.size();
    if (r.op == io::io_op::read) {
      p.read = range;
    } else {
      p.write = range;
    }
    p.done = [this, state, i, op = r.op, bytes = r.buffer.size()](const carried_error* e) {
      request_done(*state, i, op, bytes, e);
    };
    p.what = "an optimizer state";
    try {
      movers_.submit(std::move(p));
    } catch (...) {
      // Refused, with nothing queued: the request fails here.
      const carried_error e = carried_error::of(std::current_exception());
      request_done(*state, i, r.op, 0, &e);
    }
  }
}

void step_io::request_done(batch_state& b, std::size_t index, io::io_op op, std::size_t bytes,
                           const carried_error* failure) {
  const std::lock_guard lock(mutex_);
  if (failure != nullptr) {
    if (!b.failed_request) {
      b.failed_request = index;
      b.failure = *failure;
    }
  } else {
    (op == io::io_op::read ? bytes_read_ : bytes_written_) += bytes;
  }
  if (--b.left > 0) return;
  done_.push_back({.batch = b.id, .failed_request = b.failed_request, .failure = std::move(b.failure)});
  --with_mover_;
  // Under the lock: once with_mover_ is 0 the destructor may run as soon as the lock is free.
  finished_.notify_all();
}

io_batch_result step_io::wait_any() {
  ZOE_EXPECTS(outstanding_ > 0, "optimizer step: waiting for an I/O batch with none out");
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] { return !done_.empty(); });
  io_batch_result r = std::move(done_.front());
  done_.pop_front();
  --outstanding_;
  return r;
}

std::uint64_t step_io::bytes_read() const {
  const std::lock_guard lock(mutex_);
  return bytes_read_;
}

std::uint64_t step_io::bytes_written() const {
  const std::lock_guard lock(mutex_);
  return bytes_written_;
}

}  // namespace zoe::engine::detail
