#pragma once
// A defragmenting arena: one preallocated region of device memory, handed out best-fit with
// coalescing of freed neighbours. When a request fits the total free space but no single hole,
// the arena compacts: it slides live, unpinned blocks down with device-to-device copies on its
// own stream, each after the last use recorded on the block has completed, and updates the
// blocks' addresses. Holders keep arena_block handles and ask them for the current address.
//
// Pinned blocks (in use, e.g. a parameter being computed on) are never moved. When compaction
// cannot make room without moving a pinned block, the request fails: allocate() throws
// memory_error, try_allocate() returns nullopt. It never waits for pins to drop, because the
// holder of a pin may be the very thread asking.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/core/free_list.hpp"

namespace zoe::allocators {

struct arena_options {
  /// Compact when fragmented; off gives the same arena without it (for comparison).
  bool compaction = true;
  /// Every block starts at a multiple of this (a power of two, at least 256 like cudaMalloc).
  std::size_t alignment = 256;
  /// Named in errors ("parameter arena").
  std::string name = "arena";
};

struct arena_stats {
  std::uint64_t capacity = 0;
  std::uint64_t used = 0;           ///< bytes in live blocks (rounded to the alignment)
  std::uint64_t peak_used = 0;
  std::uint64_t free = 0;
  std::uint64_t largest_hole = 0;
  double fragmentation = 0;         ///< 1 - largest_hole / free (0 when free is one hole or none)
  std::size_t live_blocks = 0;
  std::size_t pinned_blocks = 0;
  std::uint64_t compactions = 0;
  std::uint64_t bytes_moved = 0;
  std::uint64_t copies = 0;         ///< device-to-device copies issued by compaction (one per run
                                    ///< of adjacent blocks, or per piece when a run overlaps its target)
  double seconds_compacting = 0;
  std::uint64_t failed_allocations = 0;
};

class arena;

/// One block of an arena. Move-only owner: destruction frees it. Must not outlive its arena.
/// All members are thread-safe, but an unpinned block's address may change during any allocation
/// on the arena: pin it while its memory is used outside the arena's knowledge.
class arena_block {
 public:
  arena_block() noexcept = default;
  ~arena_block() { reset(); }
  arena_block(arena_block&& o) noexcept;
  arena_block& operator=(arena_block&& o) noexcept;
  arena_block(const arena_block&) = delete;
  arena_block& operator=(const arena_block&) = delete;

  /// Current device address (nullptr for an empty or zero-size block).
  [[nodiscard]] void* data() const;
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] explicit operator bool() const noexcept { return arena_ != nullptr; }
  /// Pins the block in place (counted; each pin() needs an unpin()).
  void pin();
  void unpin();
  [[nodiscard]] bool pinned() const;
  /// Records that work now queued on `stream` uses the block: compaction (and the free of the
  /// block, when compaction reuses its space) waits for that work before copying.
  void record_use(stream_view stream);
  /// Frees the block now. Never throws.
  void reset() noexcept;

 private:
  friend class arena;
  arena_block(arena* a, std::uint32_t id, std::size_t size) noexcept : arena_(a), id_(id), size_(size) {}
  arena* arena_ = nullptr;
  std::uint32_t id_ = 0;
  std::size_t size_ = 0;
};

/// Thread-safe. The device must outlive the arena.
class arena {
 public:
  /// Allocates `capacity` bytes of device memory up front (memory_error when the device refuses),
  /// creates the arena's copy stream and zero-fills the region on it, so its pages are committed
  /// before any compaction moves a block onto them.
  arena(device& dev, std::size_t capacity, arena_options options = {});
  ~arena();
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;

  /// A block of `bytes` (0 gives a block of size 0 with a null address). Throws memory_error
  /// naming the arena, the size, the free space and the largest hole when it cannot make room.
  [[nodiscard]] arena_block allocate(std::size_t bytes);
  /// As allocate(), but nullopt instead of memory_error.
  [[nodiscard]] std::optional<arena_block> try_allocate(std::size_t bytes);
  /// Compacts now (also when compaction is off for allocations). Returns the bytes moved.
  std::uint64_t compact();

  [[nodiscard]] arena_stats stats() const;
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::size_t alignment() const noexcept { return alignment_; }
  /// The start of the region: block addresses lie in [base, base + capacity).
  [[nodiscard]] std::byte* base() const noexcept { return base_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

 private:
  friend class arena_block;
  struct use {
    stream_view stream;
    device_event event;
  };
  struct block {
    std::uint64_t offset = 0;
    std::uint64_t size = 0;  // rounded to the alignment
    int pins = 0;
    std::vector<use> uses;
  };

  std::optional<arena_block> allocate_locked(std::size_t bytes);
  std::uint64_t compact_locked(bool thorough);
  void free_block(std::uint32_t id) noexcept;
  device_event take_event();

  device* device_;
  std::string name_;
  std::size_t capacity_;
  std::size_t alignment_;
  bool compaction_;
  std::byte* base_ = nullptr;
  device_stream stream_;

  mutable std::mutex mutex_;
  std::vector<block> blocks_;              // by id
  std::vector<std::uint32_t> free_ids_;
  std::map<std::uint64_t, std::uint32_t> live_by_offset_;
  zoe::detail::coalescing_free_list holes_;
  std::vector<use> retired_uses_;          // recorded uses of freed blocks, until compaction
  std::vector<device_event> spare_events_;
  arena_stats stats_;  // the counters; stats() adds capacity, free, live blocks and the holes
};

}  // namespace zoe::allocators
