// The optimizer step's I/O thread.
#include "step_io.hpp"

#include <chrono>
#include <utility>

#include "zoe/core/check.hpp"

namespace zoe::engine::detail {
namespace {
// While requests are out, the thread wakes this often to start batches queued meanwhile (the
// channel's wait cannot also wait on the queue).
constexpr std::chrono::microseconds idle_poll{200};
// user_data = active batch << request_bits | request index.
constexpr unsigned request_bits = 16;
constexpr std::uint64_t request_mask = (std::uint64_t{1} << request_bits) - 1;
}  // namespace

step_io::step_io(io::swap_store& store, std::span<std::byte> slots)
    : store_(store), slots_(slots), thread_([this] { run(); }) {}

step_io::~step_io() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void step_io::submit(std::uint64_t batch, std::vector<io::swap_request> requests) {
  ZOE_EXPECTS(requests.size() <= request_mask, "optimizer step: a batch of ", requests.size(), " requests");
  ++outstanding_;
  {
    const std::lock_guard lock(mutex_);
    if (broken_) {
      done_.push_back({.batch = batch, .failed_request = 0, .failure = *broken_});
      finished_.notify_all();
      return;
    }
    queued_.push_back({.id = batch, .requests = std::move(requests)});
  }
  wake_.notify_one();
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

void step_io::run() noexcept {
  try {
    // The channel lives and dies on this thread: its io_uring ring has one issuer.
    io::swap_channel channel(store_);
    if (!slots_.empty()) {
      const std::span<std::byte> region[] = {slots_};
      channel.register_buffers(region);
    }
    loop(channel);
    return;
  } catch (...) {
    // The channel is gone (its destructor waited for its requests): every batch still out, and
    // every one handed in later, fails with the error that stopped the thread.
    const carried_error broken = carried_error::of(std::current_exception());
    std::unique_lock lock(mutex_);
    broken_ = broken;
    for (auto& b : active_) {
      if (b) done_.push_back({.batch = b->id, .failed_request = 0, .failure = broken});
    }
    active_.clear();
    for (auto& b : queued_) done_.push_back({.batch = b.id, .failed_request = 0, .failure = broken});
    queued_.clear();
    finished_.notify_all();
    wake_.wait(lock, [&] { return stopping_; });
  }
}

void step_io::loop(io::swap_channel& channel) {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (channel.outstanding() == 0) wake_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
      if (stopping_ && queued_.empty() && channel.outstanding() == 0) return;
    }
    start_queued(channel);
    if (channel.outstanding() == 0) continue;
    completions_.clear();
    channel.wait(completions_, 1, idle_poll);
    for (const io::io_completion& c : completions_) on_completion(c);
  }
}

void step_io::start_queued(io::swap_channel& channel) {
  std::deque<batch_state> taken;
  {
    const std::lock_guard lock(mutex_);
    taken.swap(queued_);
  }
  for (batch_state& b : taken) {
    std::size_t slot = 0;
    if (free_active_.empty()) {
      slot = active_.size();
      active_.emplace_back();
    } else {
      slot = free_active_.back();
      free_active_.pop_back();
    }
    const std::size_t count = b.requests.size();
    b.left = count;
    active_[slot] = std::move(b);
    if (count == 0) {
      request_done(slot, 0, nullptr, true);
      continue;
    }
    for (std::size_t i = 0; i < count; ++i) {
      io::swap_request r = active_[slot]->requests[i];
      r.user_data = (static_cast<std::uint64_t>(slot) << request_bits) | i;
      try {
        channel.submit(r);
      } catch (...) {
        // Refused with nothing in flight: the request fails here.
        const carried_error e = carried_error::of(std::current_exception());
        request_done(slot, i, &e);
      }
    }
  }
}

void step_io::on_completion(const io::io_completion& c) {
  const auto slot = static_cast<std::size_t>(c.user_data >> request_bits);
  const auto index = static_cast<std::size_t>(c.user_data & request_mask);
  if (!c.ok()) {
    const carried_error e{c.corrupt ? error_category::corrupt : error_category::io, c.os_errno, c.message};
    request_done(slot, index, &e);
    return;
  }
  {
    const std::lock_guard lock(mutex_);
    (active_[slot]->requests[index].op == io::io_op::read ? bytes_read_ : bytes_written_) += c.bytes;
  }
  request_done(slot, index, nullptr);
}

void step_io::request_done(std::size_t slot, std::size_t index, const carried_error* failure, bool empty) {
  batch_state& b = *active_[slot];
  if (failure != nullptr && !b.failed_request) {
    b.failed_request = index;
    b.failure = *failure;
  }
  if (!empty && --b.left > 0) return;
  {
    const std::lock_guard lock(mutex_);
    done_.push_back({.batch = b.id, .failed_request = b.failed_request, .failure = std::move(b.failure)});
  }
  finished_.notify_all();
  active_[slot].reset();
  free_active_.push_back(slot);
}

}  // namespace zoe::engine::detail
