#pragma once
// Overflow-checked arithmetic for sizes and counts that come from a caller. Each function returns
// nothing where the exact result does not fit 64 bits; the caller turns that into an error naming
// the size (memory_error when nothing could hold it, usage_error for a count that cannot be meant).
// A size near 2^64 rounded up by align_up wraps to a small number that under-allocates: round a
// caller's size here, and keep align_up and round_up for sizes zoe itself bounds.

#include <cassert>
#include <cstdint>
#include <limits>
#include <optional>

#include "zoe/core/units.hpp"

namespace zoe {

/// a + b.
[[nodiscard]] constexpr std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

/// a * b.
[[nodiscard]] constexpr std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

/// align_up: `alignment` a power of two (asserted in debug builds).
[[nodiscard]] constexpr std::optional<std::uint64_t> align_up_checked(std::uint64_t v,
                                                                      std::uint64_t alignment) noexcept {
  assert(is_pow2(alignment) && "align_up_checked needs a power of two; use round_up_checked");
  if (v > std::numeric_limits<std::uint64_t>::max() - (alignment - 1)) return std::nullopt;
  return align_up(v, alignment);
}

/// round_up: any positive `multiple`.
[[nodiscard]] constexpr std::optional<std::uint64_t> round_up_checked(std::uint64_t v,
                                                                      std::uint64_t multiple) noexcept {
  assert(multiple > 0);
  if (v > std::numeric_limits<std::uint64_t>::max() - (multiple - 1)) return std::nullopt;
  return round_up(v, multiple);
}

}  // namespace zoe
