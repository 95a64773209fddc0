#pragma once
// What the swap store knows about one extent: where it lies in the striped space and the state
// and checksum of each of its chunks. Channels on several threads update distinct chunks, hence
// the atomics.

#include <atomic>
#include <cstdint>
#include <memory>

namespace zoe::io::detail {

enum class chunk_state : std::uint8_t {
  unwritten,  ///< nothing written yet: reading it is a caller error
  writing,    ///< a write is in flight, or one failed: contents unknown
  valid,      ///< the checksum describes what is on the drive
};

struct extent_record {
  extent_record(std::uint64_t extent_id, std::uint64_t start, std::uint64_t length, std::uint64_t chunk)
      : id(extent_id),
        offset(start),
        bytes(length),
        chunks((length + chunk - 1) / chunk),
        checksums(std::make_unique<std::atomic<std::uint64_t>[]>(chunks)),
        states(std::make_unique<std::atomic<chunk_state>[]>(chunks)) {
    for (std::uint64_t i = 0; i < chunks; ++i) states[i].store(chunk_state::unwritten);
  }

  std::uint64_t id;
  std::uint64_t offset;  ///< in the striped (virtual) space
  std::uint64_t bytes;
  std::uint64_t chunks;
  std::unique_ptr<std::atomic<std::uint64_t>[]> checksums;
  std::unique_ptr<std::atomic<chunk_state>[]> states;
  std::atomic<int> in_flight{0};
};

/// Maps the striped space onto the files: stripe unit u lives in file u % files at file offset
/// (u / files) * unit.
struct stripe_map {
  std::uint64_t unit;
  std::uint64_t files;

  struct piece {
    std::uint64_t file_index;
    std::uint64_t file_offset;
    std::uint64_t length;
    std::uint64_t skip;  ///< bytes of the range before this piece
  };

  /// Calls fn(piece) for each part of [offset, offset + length) that lies in one stripe unit.
  template <typename Fn>
  void for_each(std::uint64_t offset, std::uint64_t length, Fn&& fn) const {
    std::uint64_t done = 0;
    while (done < length) {
      const std::uint64_t at = offset + done;
      const std::uint64_t u = at / unit;
      const std::uint64_t within = at % unit;
      const std::uint64_t n = std::min(length - done, unit - within);
      fn(piece{u % files, (u / files) * unit + within, n, done});
      done += n;
    }
  }
};

}  // namespace zoe::io::detail
