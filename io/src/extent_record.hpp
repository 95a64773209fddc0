#pragma once
// What the swap store knows about one extent: where it lies in the striped space and the state
// and checksum of each of its chunks. Channels on several threads update distinct chunks, hence
// the atomics; a write claims its chunks first, so two writers of one chunk cannot both proceed.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace zoe::io::detail {

enum class chunk_state : std::uint8_t {
  unwritten,  ///< nothing written yet: reading it is a caller error
  writing,    ///< claimed by a write in flight: contents changing
  unknown,    ///< the last write failed or was abandoned: contents unknown until rewritten
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
    for (std::uint64_t i = 0; i < chunks; ++i) states[i].store(chunk_state::unwritten, std::memory_order_relaxed);
  }

  /// Marks chunks [first, end) as being written. If another write holds one of them, gives back
  /// what it took (restoring the states it kept in `previous`) and returns that chunk's index.
  [[nodiscard]] std::optional<std::uint64_t> claim_for_write(std::uint64_t first, std::uint64_t end,
                                                             std::vector<chunk_state>& previous) {
    previous.clear();
    // Reserve first: a push_back that threw after its chunk's CAS would leave that chunk claimed.
    previous.reserve(end - first);
    for (std::uint64_t k = first; k < end; ++k) {
      chunk_state before = states[k].load(std::memory_order_relaxed);
      do {
        if (before == chunk_state::writing) {
          restore(first, first + previous.size(), previous);
          return k;
        }
      } while (!states[k].compare_exchange_weak(before, chunk_state::writing, std::memory_order_acquire));
      previous.push_back(before);
    }
    return std::nullopt;
  }

  /// Gives back a claim of [first, end) that never reached the drive, with the states it replaced.
  void restore(std::uint64_t first, std::uint64_t end, const std::vector<chunk_state>& previous) {
    for (std::uint64_t k = first; k < end; ++k) states[k].store(previous[k - first], std::memory_order_release);
  }

  /// Ends a claim: valid with the checksums written (`hashes[k - first]`, or none without
  /// checksums) when the write succeeded, unknown otherwise.
  void release_write(std::uint64_t first, std::uint64_t end, bool ok, const std::uint64_t* hashes) {
    for (std::uint64_t k = first; k < end; ++k) {
      if (ok && hashes != nullptr) checksums[k].store(hashes[k - first], std::memory_order_relaxed);
      // Release: a reader that sees valid sees the checksum stored before it.
      states[k].store(ok ? chunk_state::valid : chunk_state::unknown, std::memory_order_release);
    }
  }

  std::uint64_t id;
  std::uint64_t offset;  ///< in the striped (virtual) space
  std::uint64_t bytes;
  std::uint64_t chunks;
  std::unique_ptr<std::atomic<std::uint64_t>[]> checksums;
  std::unique_ptr<std::atomic<chunk_state>[]> states;
  /// Requests of channels that hold this record and may still touch its space. Raised only under
  /// the store's lock, so free() (which takes it exclusively) never frees space in use.
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
