#pragma once
// Self-verifying benchmark data, in the spirit of fio's verify: every 4 KiB sector starts with a
// stamp (magic, seed, its own file offset, a check word) followed by a pseudo-random body derived
// from the seed and that offset, so no two sectors of a run and no two runs (seeds differ) write the
// same bytes: a drive or file system that compresses or deduplicates cannot shortcut the data. A
// later process can tell a changed sector (body or check word), a moved one (offset), and a torn
// block (sectors of one block stamped by different runs: seeds differ) without any side file.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace zoe::bench {

inline constexpr std::size_t sector_size = 4096;

class stamped_data {
 public:
  explicit stamped_data(std::uint64_t seed) noexcept : seed_(seed) {}

  /// Writes the data of the sectors of `buffer` placed at `file_offset` (both sector multiples):
  /// each sector's stamp and body. Cheap enough for the submitting thread of a timed pass.
  void fill(std::span<std::byte> buffer, std::uint64_t file_offset) const noexcept;
  /// Checks `buffer` read from `file_offset`; returns a description of the first bad sector
  /// ("at offset N: ...") or nothing when every sector is right.
  [[nodiscard]] std::optional<std::string> check(std::span<const std::byte> buffer, std::uint64_t file_offset) const;

  /// The seed stamped in a sector, if it carries a valid stamp at all.
  [[nodiscard]] static std::optional<std::uint64_t> seed_of(std::span<const std::byte> sector);

 private:
  std::uint64_t seed_;
};

}  // namespace zoe::bench
