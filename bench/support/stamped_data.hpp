#pragma once
// Self-verifying benchmark data, in the spirit of fio's verify: every 4 KiB sector starts with a
// stamp (magic, seed, its own file offset, a check word) followed by a pseudo-random body, so no two
// sectors of a run and no two runs (seeds differ) write the same bytes: a drive or file system that
// compresses or deduplicates cannot shortcut the data. A later process can tell a changed sector
// (body or check word), a moved one (offset), and a torn block (sectors of one block stamped by
// different runs: seeds differ) without any side file.
//
// The body is made as fio makes its buffers (fill once, then scramble_buffers): a random base laid
// once per buffer before timing, keyed by the seed and the sector's place in the block, and at write
// time only the stamp and one word per 512 bytes keyed by the file offset. Generating the whole body
// per write on the submitting thread held writes at 0.67x fio's (issue 23): a thread makes a few
// GiB/s of it, about what the drive takes.

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

  /// Lays the random base of every sector of `buffer` (a block's buffer, a sector multiple), keyed
  /// by the seed and the sector's place in the buffer: once per buffer, outside the timed path.
  void lay_bodies(std::span<std::byte> buffer) const noexcept;
  /// Turns a buffer laid by lay_bodies into this run's data for `file_offset` (a sector multiple):
  /// each sector's stamp and its offset-keyed words (64 bytes of every 4 KiB). What the submitting
  /// thread of a timed pass does per block; a later stamp of the same buffer for another offset
  /// overwrites every word this one wrote, so the base need not be laid again.
  void stamp(std::span<std::byte> buffer, std::uint64_t file_offset) const noexcept;
  /// lay_bodies then stamp: the whole data of `buffer` placed at `file_offset`.
  void fill(std::span<std::byte> buffer, std::uint64_t file_offset) const noexcept;
  /// Checks `buffer` read from `file_offset`, laid and stamped as one buffer of that size (a whole
  /// block of the pass that wrote it); returns a description of the first bad sector ("at offset N:
  /// ...") or nothing when every sector is right.
  [[nodiscard]] std::optional<std::string> check(std::span<const std::byte> buffer, std::uint64_t file_offset) const;

  /// The seed stamped in a sector, if it carries a valid stamp at all.
  [[nodiscard]] static std::optional<std::uint64_t> seed_of(std::span<const std::byte> sector);

 private:
  std::uint64_t seed_;
};

}  // namespace zoe::bench
