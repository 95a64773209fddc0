#pragma once
// Byte sizes: parsing "1GiB"-style text from flags and config files, and printing sizes.

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

/// Rounds up to a multiple of `alignment` (a power of two).
[[nodiscard]] constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t alignment) noexcept {
  return (v + alignment - 1) & ~(alignment - 1);
}
/// Rounds down to a multiple of `alignment` (a power of two).
[[nodiscard]] constexpr std::uint64_t align_down(std::uint64_t v, std::uint64_t alignment) noexcept {
  return v & ~(alignment - 1);
}
[[nodiscard]] constexpr bool is_pow2(std::uint64_t v) noexcept { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace zoe
