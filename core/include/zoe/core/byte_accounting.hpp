#pragma once
// Lock-free byte accounting shared by the devices and the pinned host resource: reserving bytes
// under a limit, and keeping a peak.

#include <atomic>
#include <cstdint>

namespace zoe::detail {

/// Adds `bytes` to `in_use` unless the sum would pass `limit`. Returns whether it did; `before` is
/// the count the attempt saw (for a message naming what was in use when it failed).
inline bool try_reserve(std::atomic<std::uint64_t>& in_use, std::uint64_t bytes, std::uint64_t limit,
                        std::uint64_t& before) noexcept {
  before = in_use.load();
  do {
    // Written so that no sum can wrap: `bytes` may be any size a caller asked for.
    if (bytes > limit || before > limit - bytes) return false;
  } while (!in_use.compare_exchange_weak(before, before + bytes));
  return true;
}

/// Raises `peak` to `value` if it is lower.
inline void raise_peak(std::atomic<std::uint64_t>& peak, std::uint64_t value) noexcept {
  std::uint64_t seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}

}  // namespace zoe::detail
