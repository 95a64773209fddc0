#pragma once
// Byte sizes: parsing "1GiB"-style text from flags and config files, and printing sizes.

#include <cassert>
#include <cstdint>
#include <string>
#include <string_view>

namespace zoe {

inline constexpr std::uint64_t KiB = 1ULL << 10;
inline constexpr std::uint64_t MiB = 1ULL << 20;
inline constexpr std::uint64_t GiB = 1ULL << 30;
inline constexpr std::uint64_t TiB = 1ULL << 40;

/// Parses a byte count: a whole number with an optional suffix. Binary suffixes K, KiB, M, MiB,
/// G, GiB, T, TiB (case-insensitive, "K" means KiB as in fio) and decimal KB, MB, GB, TB.
/// Throws usage_error naming `what` (a flag or key) and the text when it is malformed or overflows.
[[nodiscard]] std::uint64_t parse_bytes(std::string_view text, std::string_view what);

/// Formats a byte count for people: "1 GiB", "1.5 MiB", "4097 B".
[[nodiscard]] std::string format_bytes(std::uint64_t bytes);

[[nodiscard]] constexpr bool is_pow2(std::uint64_t v) noexcept { return v != 0 && (v & (v - 1)) == 0; }

/// Rounds up to a multiple of `alignment`, which must be a power of two (a mask, for hot paths;
/// asserted in debug builds). For any other multiple use round_up.
[[nodiscard]] constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t alignment) noexcept {
  assert(is_pow2(alignment) && "align_up needs a power of two; use round_up");
  return (v + alignment - 1) & ~(alignment - 1);
}
/// Rounds down to a multiple of `alignment`, which must be a power of two (asserted in debug builds).
[[nodiscard]] constexpr std::uint64_t align_down(std::uint64_t v, std::uint64_t alignment) noexcept {
  assert(is_pow2(alignment) && "align_down needs a power of two; use round_down");
  return v & ~(alignment - 1);
}
/// Rounds up to a multiple of any positive `multiple` (e.g. a stripe of 3 files). The caller keeps
/// v + multiple - 1 within 64 bits.
[[nodiscard]] constexpr std::uint64_t round_up(std::uint64_t v, std::uint64_t multiple) noexcept {
  assert(multiple > 0);
  return (v + multiple - 1) / multiple * multiple;
}
/// Rounds down to a multiple of any positive `multiple`.
[[nodiscard]] constexpr std::uint64_t round_down(std::uint64_t v, std::uint64_t multiple) noexcept {
  assert(multiple > 0);
  return v / multiple * multiple;
}

}  // namespace zoe
