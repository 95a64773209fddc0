#pragma once
// A defragmenting arena: one preallocated region of device memory, handed out best-fit with
// coalescing of freed neighbours. When a request fits the total free space but no single hole,
// the arena compacts: it slides live, unpinned blocks down with device-to-device copies on its
// own stream, each after the work queued so far on the block's stream and its last recorded
// uses have completed, and updates the blocks' addresses. Holders keep arena_block handles and
// ask them for the current address.
//
// Pinned blocks (in use, e.g. a parameter being computed on) are never moved. When compaction
// cannot make room without moving a pinned block, the request fails: allocate() throws
// memory_error, try_allocate() returns nullopt. It never waits for pins to drop, because the
// holder of a pin may be the very thread asking.
//
// Reuse is stream-ordered, as in RMM's stream-ordered resource. A block belongs to the stream it
// was allocated on; freeing it records where that stream (and every stream named by record_use)
// has got to, and until that work completes the space is pending: it is handed out again at once
// to an allocation on the one stream that freed it (stream order protects it), and to an
// allocation on another stream only behind an event wait queued on that stream. An allocation on
// no stream (the default) is used at once from anywhere, so it takes only space whose work has
// completed. Pending space whose work has completed is settled and coalesces with its neighbours.
//
// Back-pressure: when nothing can be handed out at once but the free space, pending included,
// covers the request, the arena blocks the calling thread (holding its lock) until the work on
// all pending space completes, coalesces it, and only then compacts or fails; so the work using a
// freed block must not wait for a thread that allocates. A request larger than all free space
// fails at once.

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
  std::uint64_t used = 0;  ///< bytes in live blocks (rounded to the alignment)
  std::uint64_t peak_used = 0;
  std::uint64_t free = 0;          ///< bytes in no live block, pending ones included
  std::uint64_t pending_free = 0;  ///< freed bytes whose work may still run (see the arena)
  std::uint64_t largest_hole = 0;  ///< settled or pending
  double fragmentation = 0;        ///< 1 - largest_hole / free (0 when free is one hole or none)
  std::size_t live_blocks = 0;
  std::size_t pinned_blocks = 0;
  std::uint64_t compactions = 0;
  std::uint64_t bytes_moved = 0;
  std::uint64_t copies = 0;  ///< device-to-device copies issued by compaction (one per run
                             ///< of adjacent blocks, or per piece when a run overlaps its target)
  double seconds_compacting = 0;
  std::uint64_t failed_allocations = 0;
  std::uint64_t cross_stream_reuses = 0;  ///< allocations given another stream's pending space
                                          ///< behind an event wait
  std::uint64_t host_waits = 0;           ///< times a caller was blocked until pending space settled
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
  /// Records that work now queued on `stream` uses the block: compaction waits for that work
  /// before moving the block, and once the block is freed its space is reused only in order after
  /// it. Work on the stream the block was allocated on needs no record: the arena treats it so.
  void record_use(stream_view stream);
  /// Frees the block now; its space stays pending until the work recorded on it has completed
  /// (see arena). Never throws.
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

  /// A block of `bytes` (0 gives a block of size 0 with a null address) for work queued on
  /// `stream`: it may lie in space freed on `stream` whose work is still queued, or in space freed
  /// on another stream behind an event wait queued on `stream`. A block on the default stream is
  /// free of pending work when returned. May block while freed space settles (see arena). Throws
  /// memory_error naming the arena, the size, the free space and the largest hole when it cannot
  /// make room; device_error when waiting on the device fails.
  [[nodiscard]] arena_block allocate(std::size_t bytes, stream_view stream = {});
  /// As allocate(), but nullopt instead of memory_error.
  [[nodiscard]] std::optional<arena_block> try_allocate(std::size_t bytes, stream_view stream = {});
  /// As try_allocate(), but never compacts: nullopt when no hole fits. For a request that can come
  /// back later (a prefetch), rather than stall every user of the arena behind its copies now.
  [[nodiscard]] std::optional<arena_block> try_allocate_in_place(std::size_t bytes, stream_view stream = {});
  /// Waits for the work on pending space, then compacts (also when compaction is off for
  /// allocations). Returns the bytes moved.
  std::uint64_t compact();

  /// The largest hole the pinned blocks leave: what compaction makes of the free space once the
  /// unpinned blocks are freed (pending space counts as free: compaction settles it first). A
  /// request larger than this cannot be met until a pin is dropped.
  [[nodiscard]] std::uint64_t largest_unpinned_span() const;
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
    stream_view stream;  // allocated on
    std::vector<use> uses;
  };
  // Space freed on `stream` whose work may still run: all of it is free once `freed`, recorded on
  // `stream` at every free into it, completes (stream order makes the latest record cover them all).
  struct pending_space {
    stream_view stream;
    zoe::detail::coalescing_free_list space;
    device_event freed;
  };

  std::optional<arena_block> allocate_locked(std::size_t bytes, stream_view stream, bool may_compact);
  std::optional<std::uint64_t> take_space(std::uint64_t bytes, stream_view stream);
  std::uint64_t compact_locked(bool thorough);
  void free_block(std::uint32_t id) noexcept;
  void free_pending(block& b);
  void record_use(block& b, stream_view stream);
  pending_space& pending_on(stream_view stream);
  void settle_completed();
  void settle_all();
  void settle(pending_space& p);
  [[nodiscard]] std::uint64_t free_bytes() const noexcept;
  [[nodiscard]] std::uint64_t largest_hole() const noexcept;
  device_event take_event();

  device* device_;
  std::string name_;
  std::size_t capacity_;
  std::size_t alignment_;
  bool compaction_;
  std::byte* base_ = nullptr;
  device_stream stream_;

  mutable std::mutex mutex_;
  std::vector<block> blocks_;  // by id
  std::vector<std::uint32_t> free_ids_;
  std::map<std::uint64_t, std::uint32_t> live_by_offset_;
  zoe::detail::coalescing_free_list holes_;  // settled free space
  std::vector<pending_space> pending_;       // one per stream with pending space
  // Events a wait was queued on (uses of moved blocks, the streams joined for a block used on
  // several), kept until they complete: re-recorded earlier, they could release that wait early on
  // the host device, whose waits are released by any later completion.
  std::vector<device_event> retiring_events_;
  std::vector<device_event> spare_events_;
  arena_stats stats_;  // the counters; stats() adds capacity, free, live blocks and the holes
};

}  // namespace zoe::allocators
