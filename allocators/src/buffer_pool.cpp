#include "zoe/allocators/buffer_pool.hpp"

#include <cstring>
#include <utility>

#include "zoe/allocators/poison.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/checked.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"

namespace zoe::allocators {

buffer_lease::buffer_lease(buffer_lease&& o) noexcept
    : pool_(std::exchange(o.pool_, nullptr)), index_(o.index_), span_(std::exchange(o.span_, {})) {}

buffer_lease& buffer_lease::operator=(buffer_lease&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = std::exchange(o.pool_, nullptr);
    index_ = o.index_;
    span_ = std::exchange(o.span_, {});
  }
  return *this;
}

void buffer_lease::release() noexcept {
  if (pool_ == nullptr) return;
  if (poisons_freed_memory()) std::memset(span_.data(), poison_byte, span_.size());
  std::exchange(pool_, nullptr)->give_back(index_);
  span_ = {};
}

buffer_pool::buffer_pool(pinned_host_resource& resource, buffer_pool_options options)
    : name_(std::move(options.name)), count_(options.buffer_count), size_(options.buffer_size) {
  ZOE_EXPECTS(count_ > 0 && size_ > 0, name_, ": buffer_count and buffer_size must be positive, got ", count_,
              " buffers of ", size_, " bytes");
  ZOE_EXPECTS(is_pow2(options.alignment), name_, ": alignment ", options.alignment, " is not a power of two");
  // Neither the stride (a size within the alignment of 2^64 does not round up) nor the total may
  // wrap: either would carve the buffers from a too-small allocation.
  const std::optional<std::uint64_t> stride = align_up_checked(size_, options.alignment);
  ZOE_EXPECTS(stride && *stride <= SIZE_MAX / count_, name_, ": ", count_, " buffers of ", size_, " bytes overflow");
  stride_ = *stride;
  log::info(name_, ": allocating ", count_, " pinned buffers of ", format_bytes(size_), " (",
            format_bytes(stride_ * count_), ")");
  memory_ = resource.allocate(stride_ * count_);
  free_.reserve(count_);
  // Reverse order so the first acquire hands out buffer 0.
  for (std::size_t i = count_; i-- > 0;) free_.push_back(i);
  stats_.min_available = count_;
}

buffer_pool::~buffer_pool() {
  std::unique_lock lock(mutex_);
  if (stats_.in_flight > 0) {
    // Their stream work may still read the buffers; freeing the memory under it would be a use
    // after free on the device, so wait for the streams to get there.
    log::warn(name_, ": destroyed with ", stats_.in_flight,
              " buffers given back after stream work that has not finished; waiting for it");
    drained_.wait(lock, [this] { return stats_.in_flight == 0; });
  }
  if (free_.size() != count_) {
    log::error(name_, ": destroyed with ", count_ - free_.size(), " of ", count_,
               " buffers still leased; those leases now dangle");
  }
}

void buffer_lease::release_after(device& dev, stream_view stream) {
  ZOE_EXPECTS(pool_ != nullptr, "release_after on an empty buffer lease (released or moved from)");
  pool_->defer_return(index_, dev, stream);
  pool_ = nullptr;
  span_ = {};
}

void buffer_pool::defer_return(std::size_t index, device& dev, stream_view stream) {
  {
    // Counted before the task is queued: it may run before launch_host returns.
    const std::lock_guard lock(mutex_);
    ++stats_.deferred_returns;
    ++stats_.in_flight;
  }
  try {
    dev.launch_host(stream, [this, index] { give_back_deferred(index); });
  } catch (...) {
    const std::lock_guard lock(mutex_);
    --stats_.deferred_returns;
    --stats_.in_flight;
    throw;
  }
}

void buffer_pool::give_back_deferred(std::size_t index) noexcept {
  if (poisons_freed_memory()) std::memset(buffer(index).data(), poison_byte, size_);
  const std::lock_guard lock(mutex_);
  free_.push_back(index);
  --stats_.in_flight;
  wake_first_locked();
  // Under the lock: once it is released the destructor may end drained_.
  if (stats_.in_flight == 0) drained_.notify_all();
}

buffer_lease buffer_pool::take_one_locked() {
  const std::size_t index = free_.back();
  free_.pop_back();
  ++stats_.acquires;
  if (free_.size() < stats_.min_available) stats_.min_available = free_.size();
  return {this, index, buffer(index)};
}

std::span<std::byte> buffer_pool::buffer(std::size_t index) const noexcept {
  return memory_.span().subspan(index * stride_, size_);
}

bool buffer_pool::servable_now_locked(std::size_t n) const noexcept { return queue_.empty() && free_.size() >= n; }

void buffer_pool::wake_first_locked() noexcept {
  // Under the lock: a waiter that timed out leaves the queue (and its condition variable ends)
  // only once it holds the lock.
  if (!queue_.empty() && free_.size() >= queue_.front()->count) queue_.front()->ready.notify_one();
}

void buffer_pool::expect_count(std::size_t n) const {
  ZOE_EXPECTS(n <= count_, name_, ": ", n, " buffers asked for at once, but the pool has only ", count_,
              " (buffer_count)");
}

void buffer_pool::wait_locked(std::unique_lock<std::mutex>& lock, std::size_t n,
                              std::optional<std::chrono::nanoseconds> timeout) {
  if (servable_now_locked(n)) return;
  ++stats_.waits;
  waiter self{n, {}};
  const auto place = queue_.insert(queue_.end(), &self);
  const auto my_turn = [&] { return queue_.front() == &self && free_.size() >= n; };
  const bool got = timeout ? self.ready.wait_for(lock, *timeout, my_turn) : (self.ready.wait(lock, my_turn), true);
  queue_.erase(place);
  if (got) return;
  // Leaving may put a waiter that the free buffers suffice for at the head.
  wake_first_locked();
  ++stats_.timeouts;
  throw timeout_error(str(name_, ": ", n, n == 1 ? " buffer" : " buffers", " did not come back within ",
                          std::chrono::duration<double, std::milli>(*timeout).count(), " ms (", free_.size(), " of ",
                          count_, " buffers of ", format_bytes(size_), " free, ", queue_.size(),
                          " callers ahead or behind)"));
}

void buffer_pool::give_back(std::size_t index) noexcept {
  const std::lock_guard lock(mutex_);
  free_.push_back(index);  // never reallocates: reserved for every buffer
  wake_first_locked();
}

buffer_lease buffer_pool::acquire_one(std::optional<std::chrono::nanoseconds> timeout) {
  std::unique_lock lock(mutex_);
  wait_locked(lock, 1, timeout);
  buffer_lease lease = take_one_locked();
  wake_first_locked();
  return lease;
}

std::vector<buffer_lease> buffer_pool::acquire_n(std::size_t n, std::optional<std::chrono::nanoseconds> timeout) {
  expect_count(n);
  if (n == 0) return {};
  std::unique_lock lock(mutex_);
  wait_locked(lock, n, timeout);
  std::vector<buffer_lease> leases = take_locked(n);
  wake_first_locked();
  return leases;
}

std::vector<buffer_lease> buffer_pool::take_locked(std::size_t n) {
  std::vector<buffer_lease> leases;
  leases.reserve(n);
  for (std::size_t i = 0; i < n; ++i) leases.push_back(take_one_locked());
  return leases;
}

buffer_lease buffer_pool::acquire() { return acquire_one(std::nullopt); }

buffer_lease buffer_pool::acquire(std::chrono::nanoseconds timeout) { return acquire_one(timeout); }

std::optional<buffer_lease> buffer_pool::try_acquire() {
  const std::lock_guard lock(mutex_);
  if (!servable_now_locked(1)) return std::nullopt;
  return take_one_locked();
}

std::vector<buffer_lease> buffer_pool::acquire_many(std::size_t n) { return acquire_n(n, std::nullopt); }

std::vector<buffer_lease> buffer_pool::acquire_many(std::size_t n, std::chrono::nanoseconds timeout) {
  return acquire_n(n, timeout);
}

std::optional<std::vector<buffer_lease>> buffer_pool::try_acquire_many(std::size_t n) {
  expect_count(n);
  if (n == 0) return std::vector<buffer_lease>{};
  const std::lock_guard lock(mutex_);
  if (!servable_now_locked(n)) return std::nullopt;
  return take_locked(n);
}

void buffer_pool::register_with(buffer_registrar& registrar) {
  {
    const std::lock_guard lock(mutex_);
    ZOE_EXPECTS(!registered_, name_, ": buffers are registered once; this pool already was");
    registered_ = true;
  }
  try {
    const auto all = buffers();
    registrar.register_buffers(all);
  } catch (...) {
    const std::lock_guard lock(mutex_);
    registered_ = false;
    throw;
  }
}

bool buffer_pool::registered() const noexcept {
  const std::lock_guard lock(mutex_);
  return registered_;
}

std::vector<std::span<std::byte>> buffer_pool::buffers() const {
  std::vector<std::span<std::byte>> out;
  out.reserve(count_);
  for (std::size_t i = 0; i < count_; ++i) out.push_back(buffer(i));
  return out;
}

std::size_t buffer_pool::available() const {
  const std::lock_guard lock(mutex_);
  return free_.size();
}

buffer_pool_stats buffer_pool::stats() const {
  const std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace zoe::allocators
