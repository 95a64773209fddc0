#pragma once
// Self-verifying benchmark data, in the spirit of fio's verify: every 4 KiB sector starts with a
// stamp (magic, seed, its own file offset, a check word) followed by a body derived from the seed.
// A later process can tell a changed sector (body or check word), a moved one (offset), and a torn
// block (sectors of one block stamped by different runs: seeds differ) without any side file.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace zoe::bench {

inline constexpr std::size_t sector_size = 4096;

class stamped_data {
 public:
  explicit stamped_data(std::uint64_t seed);

  /// Fills every sector of `buffer` with the body (once per buffer: the body does not move).
  void fill_bodies(std::span<std::byte> buffer) const;
  /// Writes the stamps for `buffer` placed at `file_offset` (both sector multiples).
  void stamp(std::span<std::byte> buffer, std::uint64_t file_offset) const;
  /// Checks `buffer` read from `file_offset`; returns a description of the first bad sector
  /// ("at offset N: ...") or nothing when every sector is right.
  [[nodiscard]] std::optional<std::string> check(std::span<const std::byte> buffer, std::uint64_t file_offset) const;

  /// The seed stamped in a sector, if it carries a valid stamp at all.
  [[nodiscard]] static std::optional<std::uint64_t> seed_of(std::span<const std::byte> sector);

 private:
  std::uint64_t seed_;
  std::vector<std::byte> body_;
};

}  // namespace zoe::bench
