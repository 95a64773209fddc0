#pragma once
// A constant-size buffer pool: N pinned buffers of S bytes (DeepSpeed's buffer_count and
// buffer_size), carved from one pinned allocation and handed out as RAII leases. Running out is
// back-pressure: acquire() waits for a lease to come back (up to a timeout), try_acquire() says no.
// A lease whose buffer an asynchronous copy still reads returns after that copy
// (buffer_lease::release_after), and several buffers can be had all at once or not at all
// (acquire_many), so one pipeline stage cannot hold part of the pool while another starves.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "zoe/allocators/buffer_registrar.hpp"
#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/stream_view.hpp"

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
  std::uint64_t acquires = 0;          ///< leases handed out (acquire_many(n) counts n)
  std::uint64_t waits = 0;             ///< acquires that could not be served at once and waited
  std::uint64_t timeouts = 0;          ///< acquires that gave up
  std::uint64_t deferred_returns = 0;  ///< leases given back with release_after
  std::size_t in_flight = 0;           ///< of those, buffers whose stream work has not finished yet
  std::size_t min_available = 0;       ///< fewest free buffers seen (0 means the pool ran dry)
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
  /// Returns the buffer once the work queued on `stream` of `dev` so far has completed (say the
  /// host->device copy that reads it), without blocking anyone: the return is a host task queued
  /// on the stream (device::launch_host), so it happens as the stream reaches it and no thread
  /// waits or polls for it; after dev.synchronize(stream) the buffer is back in the pool. Until
  /// then it counts in stats().in_flight and the pool's destructor waits for it. The lease is
  /// empty afterwards. Debug poisoning happens at the return, after the copy has read the buffer.
  /// Throws usage_error on an empty lease; when launch_host throws (device_error) the lease still
  /// holds the buffer. `stream` must belong to `dev`. Work queued on the stream before the return
  /// must not wait for a buffer of this pool (it would wait for itself). On CUDA the return is a
  /// cudaLaunchHostFunc: the stream's next work waits the microseconds the return takes (a lock
  /// and a push), the price of a return that needs no thread of ours. Thread-safe as the pool is.
  void release_after(device& dev, stream_view stream);

 private:
  friend class buffer_pool;
  buffer_lease(buffer_pool* pool, std::size_t index, std::span<std::byte> span) noexcept
      : pool_(pool), index_(index), span_(span) {}
  buffer_pool* pool_ = nullptr;
  std::size_t index_ = 0;
  std::span<std::byte> span_;
};

/// Thread-safe: any thread may acquire and release.
///
/// Fairness: buffers go to callers in the order they asked. A caller that cannot be served at once
/// queues; the first in the queue is served as soon as enough buffers are free for it, and nobody
/// passes it: an acquire (or a try_acquire, which then says no) arriving while others wait queues
/// behind them even if a buffer is free. So a multi-buffer acquire is never starved by a stream of
/// single acquires, at the price of a single acquire waiting behind a larger one. A waiting caller
/// holds no buffer, so callers that want several cannot deadlock each other by each holding part.
class buffer_pool {
 public:
  /// Allocates count * size (each rounded to the alignment) of pinned memory from `resource` at
  /// once, so the pool's size is known and paid up front. Throws usage_error for a zero count or
  /// size, a count and size whose rounded total exceeds 64 bits, or a bad alignment, and
  /// memory_error when the memory cannot be had.
  buffer_pool(pinned_host_resource& resource, buffer_pool_options options);
  /// Waits for the buffers given back with release_after whose stream work has not run yet (their
  /// streams must be able to finish it), then logs an error if leases are still out (they would
  /// dangle).
  ~buffer_pool();
  buffer_pool(const buffer_pool&) = delete;
  buffer_pool& operator=(const buffer_pool&) = delete;

  /// Waits as long as it takes for a free buffer.
  [[nodiscard]] buffer_lease acquire();
  /// Waits up to `timeout` for a free buffer; throws timeout_error naming the pool, its size and
  /// the timeout when none came back in time.
  [[nodiscard]] buffer_lease acquire(std::chrono::nanoseconds timeout);
  /// A free buffer if there is one right now and nobody is waiting, else nullopt. Never blocks.
  [[nodiscard]] std::optional<buffer_lease> try_acquire();

  /// `n` buffers at once or none: waits as long as it takes until `n` are free (and earlier
  /// callers are served). n == 0 gives an empty vector. Throws usage_error naming the pool when
  /// n exceeds buffer_count(), which could never be met.
  [[nodiscard]] std::vector<buffer_lease> acquire_many(std::size_t n);
  /// acquire_many(n) waiting at most `timeout`; throws timeout_error naming the pool, n, the free
  /// buffers and the timeout when they did not come back in time (it then holds none of them).
  [[nodiscard]] std::vector<buffer_lease> acquire_many(std::size_t n, std::chrono::nanoseconds timeout);
  /// `n` buffers if they are free right now and nobody is waiting, else nullopt (and no buffer is
  /// taken); n == 0 gives an empty vector. Never blocks. Throws usage_error when n exceeds
  /// buffer_count().
  [[nodiscard]] std::optional<std::vector<buffer_lease>> try_acquire_many(std::size_t n);

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
  // A caller queued for `count` buffers; it waits on its own condition variable, which whoever
  // frees buffers notifies when they suffice for the first in the queue.
  struct waiter {
    std::size_t count;
    std::condition_variable ready;
  };

  // True when `n` buffers can go to a caller that has not queued: enough free and nobody ahead.
  [[nodiscard]] bool servable_now_locked(std::size_t n) const noexcept;
  // Queues the caller until `n` buffers can go to it, at most `timeout` when given; throws
  // timeout_error (counted) when it ran out. Returns at once when servable_now_locked(n).
  void wait_locked(std::unique_lock<std::mutex>& lock, std::size_t n, std::optional<std::chrono::nanoseconds> timeout);
  // Wakes the first waiter if the free buffers now suffice for it.
  void wake_first_locked() noexcept;
  buffer_lease take_one_locked();
  std::vector<buffer_lease> take_locked(std::size_t n);
  // The bodies of the acquire calls; `timeout` unset waits as long as it takes.
  buffer_lease acquire_one(std::optional<std::chrono::nanoseconds> timeout);
  std::vector<buffer_lease> acquire_n(std::size_t n, std::optional<std::chrono::nanoseconds> timeout);
  void expect_count(std::size_t n) const;
  [[nodiscard]] std::span<std::byte> buffer(std::size_t index) const noexcept;
  void give_back(std::size_t index) noexcept;
  // Counts a buffer as in flight and queues its return on `stream`.
  void defer_return(std::size_t index, device& dev, stream_view stream);
  // The queued return: poisons (debug builds) and frees the buffer, no longer in flight.
  void give_back_deferred(std::size_t index) noexcept;

  std::string name_;
  std::size_t count_;
  std::size_t size_;
  std::size_t stride_;
  pinned_buffer memory_;
  mutable std::mutex mutex_;
  std::vector<std::size_t> free_;    // a stack: the most recently returned buffer is still warm in cache
  std::list<waiter*> queue_;         // callers waiting, first come first served
  std::condition_variable drained_;  // the destructor waits on it for in-flight returns
  bool registered_ = false;
  buffer_pool_stats stats_;
};

}  // namespace zoe::allocators
