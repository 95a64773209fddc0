#include "zoe/allocators/buffer_pool.hpp"

#include <cstring>
#include <utility>

#include "zoe/allocators/poison.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
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
  stride_ = align_up(size_, options.alignment);
  ZOE_EXPECTS(stride_ <= SIZE_MAX / count_, name_, ": ", count_, " buffers of ", size_, " bytes overflow");
  log::info(name_, ": allocating ", count_, " pinned buffers of ", format_bytes(size_), " (",
            format_bytes(stride_ * count_), ")");
  memory_ = resource.allocate(stride_ * count_);
  free_.reserve(count_);
  // Reverse order so the first acquire hands out buffer 0.
  for (std::size_t i = count_; i-- > 0;) free_.push_back(i);
  stats_.min_available = count_;
}

buffer_pool::~buffer_pool() {
  const std::lock_guard lock(mutex_);
  if (free_.size() != count_) {
    log::error(name_, ": destroyed with ", count_ - free_.size(), " of ", count_,
               " buffers still leased; those leases now dangle");
  }
}

buffer_lease buffer_pool::take_locked() {
  const std::size_t index = free_.back();
  free_.pop_back();
  ++stats_.acquires;
  if (free_.size() < stats_.min_available) stats_.min_available = free_.size();
  return {this, index, buffer(index)};
}

std::span<std::byte> buffer_pool::buffer(std::size_t index) const noexcept {
  return memory_.span().subspan(index * stride_, size_);
}

bool buffer_pool::wait_for_buffer_locked(std::unique_lock<std::mutex>& lock,
                                         std::optional<std::chrono::nanoseconds> timeout) {
  if (!free_.empty()) return true;
  ++stats_.waits;
  ++waiting_;
  const auto any_free = [this] { return !free_.empty(); };
  const bool got = timeout ? returned_.wait_for(lock, *timeout, any_free) : (returned_.wait(lock, any_free), true);
  --waiting_;
  return got;
}

void buffer_pool::give_back(std::size_t index) noexcept {
  bool wake = false;
  {
    const std::lock_guard lock(mutex_);
    free_.push_back(index);  // never reallocates: reserved for every buffer
    wake = waiting_ > 0;
  }
  if (wake) returned_.notify_one();
}

buffer_lease buffer_pool::acquire() {
  std::unique_lock lock(mutex_);
  (void)wait_for_buffer_locked(lock, std::nullopt);
  return take_locked();
}

buffer_lease buffer_pool::acquire(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(mutex_);
  if (!wait_for_buffer_locked(lock, timeout)) {
    ++stats_.timeouts;
    throw timeout_error(str(name_, ": no buffer came back within ",
                            std::chrono::duration<double, std::milli>(timeout).count(), " ms (all ", count_,
                            " buffers of ", format_bytes(size_), " are leased)"));
  }
  return take_locked();
}

std::optional<buffer_lease> buffer_pool::try_acquire() {
  const std::lock_guard lock(mutex_);
  if (free_.empty()) return std::nullopt;
  return take_locked();
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
