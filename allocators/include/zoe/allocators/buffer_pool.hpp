#pragma once
// A constant-size buffer pool: N pinned buffers of S bytes (DeepSpeed's buffer_count and
// buffer_size), carved from one pinned allocation and handed out as RAII leases. Running out is
// back-pressure: acquire() waits for a lease to come back (up to a timeout), try_acquire() says no.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "zoe/allocators/buffer_registrar.hpp"
#include "zoe/allocators/pinned_host_resource.hpp"

namespace zoe::allocators {

struct buffer_pool_options {
  std::size_t buffer_count = 0;
  std::size_t buffer_size = 0;
  /// Each buffer starts at a multiple of this (a power of two; 4 KiB suits O_DIRECT).
  std::size_t alignment = 4096;
  /// Named in errors and logs ("optimizer swap buffers").
  std::string name = "buffer pool";
};

struct buffer_pool_stats {
  std::uint64_t acquires = 0;     ///< leases handed out
  std::uint64_t waits = 0;        ///< acquires that found the pool empty and waited
  std::uint64_t timeouts = 0;     ///< acquires that gave up
  std::size_t min_available = 0;  ///< fewest free buffers seen (0 means the pool ran dry)
};

class buffer_pool;

/// One buffer on loan. Move-only; returns to its pool when destroyed or release()d. A lease must
/// not outlive its pool.
class buffer_lease {
 public:
  buffer_lease() noexcept = default;
  ~buffer_lease() { release(); }
  buffer_lease(buffer_lease&& o) noexcept;
  buffer_lease& operator=(buffer_lease&& o) noexcept;
  buffer_lease(const buffer_lease&) = delete;
  buffer_lease& operator=(const buffer_lease&) = delete;

  [[nodiscard]] std::span<std::byte> span() const noexcept { return span_; }
  [[nodiscard]] std::byte* data() const noexcept { return span_.data(); }
  [[nodiscard]] std::size_t size() const noexcept { return span_.size(); }
  /// The buffer's position in the pool, as given to buffer_registrar::register_buffers().
  [[nodiscard]] std::size_t index() const noexcept { return index_; }
  [[nodiscard]] explicit operator bool() const noexcept { return pool_ != nullptr; }
  /// Returns the buffer now. Never throws.
  void release() noexcept;

 private:
  friend class buffer_pool;
  buffer_lease(buffer_pool* pool, std::size_t index, std::span<std::byte> span) noexcept
      : pool_(pool), index_(index), span_(span) {}
  buffer_pool* pool_ = nullptr;
  std::size_t index_ = 0;
  std::span<std::byte> span_;
};

/// Thread-safe: any thread may acquire and release.
class buffer_pool {
 public:
  /// Allocates count * size (each rounded to the alignment) of pinned memory from `resource` at
  /// once, so the pool's size is known and paid up front. Throws usage_error for a zero count or
  /// size, or a bad alignment, and memory_error when the memory cannot be had.
  buffer_pool(pinned_host_resource& resource, buffer_pool_options options);
  /// Logs an error if leases are still out (they would dangle).
  ~buffer_pool();
  buffer_pool(const buffer_pool&) = delete;
  buffer_pool& operator=(const buffer_pool&) = delete;

  /// Waits as long as it takes for a free buffer.
  [[nodiscard]] buffer_lease acquire();
  /// Waits up to `timeout` for a free buffer; throws timeout_error naming the pool, its size and
  /// the timeout when none came back in time.
  [[nodiscard]] buffer_lease acquire(std::chrono::nanoseconds timeout);
  /// A free buffer if there is one right now, else nullopt. Never blocks.
  [[nodiscard]] std::optional<buffer_lease> try_acquire();

  /// Hands every buffer to `registrar` (e.g. the I/O engine's fixed buffers). Once per pool:
  /// a second call throws usage_error. A throwing registrar leaves the pool unregistered.
  void register_with(buffer_registrar& registrar);
  [[nodiscard]] bool registered() const noexcept;

  /// Every buffer in index order.
  [[nodiscard]] std::vector<std::span<std::byte>> buffers() const;
  [[nodiscard]] std::size_t buffer_count() const noexcept { return count_; }
  [[nodiscard]] std::size_t buffer_size() const noexcept { return size_; }
  [[nodiscard]] std::size_t available() const;
  [[nodiscard]] buffer_pool_stats stats() const;
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  friend class buffer_lease;
  buffer_lease take_locked();
  // Waits on `lock` until a buffer is free, at most `timeout` when given; false when it ran out.
  bool wait_for_buffer_locked(std::unique_lock<std::mutex>& lock, std::optional<std::chrono::nanoseconds> timeout);
  [[nodiscard]] std::span<std::byte> buffer(std::size_t index) const noexcept;
  void give_back(std::size_t index) noexcept;

  std::string name_;
  std::size_t count_;
  std::size_t size_;
  std::size_t stride_;
  pinned_buffer memory_;
  mutable std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::size_t> free_;  // a stack: the most recently returned buffer is still warm in cache
  std::size_t waiting_ = 0;
  bool registered_ = false;
  buffer_pool_stats stats_;
};

}  // namespace zoe::allocators
