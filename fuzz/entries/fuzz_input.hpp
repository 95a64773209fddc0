#pragma once
// The fuzzer's bytes read as a stream of small decisions. Every read succeeds: past the end it
// gives zeros (and an empty tail), so any byte string is a valid input and a mutation that cuts
// an input short still runs the same code up to the cut.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace zoe::fuzz {

class fuzz_input {
 public:
  explicit fuzz_input(std::span<const std::uint8_t> bytes) noexcept : bytes_(bytes) {}

  [[nodiscard]] bool empty() const noexcept { return at_ >= bytes_.size(); }

  [[nodiscard]] std::uint8_t byte() noexcept { return empty() ? 0 : bytes_[at_++]; }

  /// A value in [0, n) for n > 0, from as few bytes as n needs.
  [[nodiscard]] std::uint32_t below(std::uint32_t n) noexcept {
    std::uint32_t v = byte();
    if (n > 256) v = (v << 8) | byte();
    if (n > 65536) v = (v << 8) | byte();
    return v % n;
  }

  /// Two bytes, little-endian.
  [[nodiscard]] std::uint16_t u16() noexcept {
    const std::uint16_t lo = byte();
    return static_cast<std::uint16_t>(lo | (byte() << 8));
  }

  /// The next `n` bytes (fewer at the end).
  [[nodiscard]] std::span<const std::uint8_t> take(std::size_t n) noexcept {
    const std::size_t start = std::min(at_, bytes_.size());
    const std::size_t count = std::min(n, bytes_.size() - start);
    at_ = start + count;
    return bytes_.subspan(start, count);
  }

  [[nodiscard]] std::span<const std::uint8_t> rest() noexcept { return take(bytes_.size()); }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

/// The bytes as text (for parsers that take text).
[[nodiscard]] inline std::string_view as_text(std::span<const std::uint8_t> bytes) noexcept {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};  // NOLINT(*-reinterpret-cast)
}

}  // namespace zoe::fuzz
