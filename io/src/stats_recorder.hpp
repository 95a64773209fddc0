#pragma once
// The counters behind io_engine::stats and swap_channel::stats.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "zoe/io/io_stats.hpp"

namespace zoe::io::detail {

/// Thread-safety: started, finished and withdrawn from the owner's driving thread only;
/// snapshot from any thread (each figure is exact, the set of them may be a moment apart).
class stats_recorder {
 public:
  using clock = std::chrono::steady_clock;

  /// A request of `op` became outstanding at `now`.
  void started(io_op op, clock::time_point now) noexcept;
  /// A request of `op` outstanding since `since` completed at `now`, having moved `bytes` (its
  /// length, if it succeeded).
  void finished(io_op op, clock::time_point since, clock::time_point now, std::uint64_t bytes, bool failed) noexcept;
  /// A request that started() and will never complete (its submit threw half-way): it leaves
  /// the busy time without counting as a request.
  void withdrawn(io_op op, clock::time_point now) noexcept;
  [[nodiscard]] io_stats snapshot() const noexcept;

 private:
  struct direction {
    std::atomic<std::uint64_t> requests{0};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> errors{0};
    std::atomic<std::uint64_t> busy_ns{0};
    std::atomic<std::uint64_t> latency_ns{0};
    std::atomic<std::int64_t> busy_since{0};  ///< clock ticks (ns) when it became busy; 0: idle
    std::size_t outstanding = 0;              ///< driving thread only
  };
  [[nodiscard]] direction& of(io_op op) noexcept { return op == io_op::read ? read_ : write_; }
  void leave(direction& d, clock::time_point now) noexcept;

  direction read_;
  direction write_;
};

}  // namespace zoe::io::detail
