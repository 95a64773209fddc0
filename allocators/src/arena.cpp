#include "zoe/allocators/arena.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <limits>
#include <utility>

#include "zoe/allocators/poison.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/checked.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"

namespace zoe::allocators {
namespace {

constexpr std::uint32_t zero_size_id = std::numeric_limits<std::uint32_t>::max();

// A block moved into a gap smaller than itself must be copied in gap-sized pieces (copies may not
// overlap). Past this many pieces, the quick pass leaves the block where it is: the few bytes
// gained are not worth the copies unless the request still does not fit.
constexpr std::uint64_t max_pieces_per_move = 64;

// Erases the entries `settled` takes care of (it returns true). One at a time rather than
// std::erase_if, so a query that throws leaves every entry whole instead of some moved from.
template <typename T, typename Settled>
void erase_settled(std::vector<T>& entries, Settled&& settled) {
  for (std::size_t i = 0; i < entries.size();) {
    if (settled(entries[i])) {
      entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
}

}  // namespace

// ---- arena_block ----------------------------------------------------------------------------

arena_block::arena_block(arena_block&& o) noexcept
    : arena_(std::exchange(o.arena_, nullptr)), id_(o.id_), size_(std::exchange(o.size_, 0)) {}

arena_block& arena_block::operator=(arena_block&& o) noexcept {
  if (this != &o) {
    reset();
    arena_ = std::exchange(o.arena_, nullptr);
    id_ = o.id_;
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void* arena_block::data() const {
  if (arena_ == nullptr || id_ == zero_size_id) return nullptr;
  const std::lock_guard lock(arena_->mutex_);
  return arena_->base_ + arena_->blocks_[id_].offset;
}

void arena_block::pin() {
  ZOE_EXPECTS(arena_ != nullptr, "pin of an empty arena block");
  if (id_ == zero_size_id) return;
  const std::lock_guard lock(arena_->mutex_);
  if (arena_->blocks_[id_].pins++ == 0) ++arena_->stats_.pinned_blocks;
}

void arena_block::unpin() {
  ZOE_EXPECTS(arena_ != nullptr, "unpin of an empty arena block");
  if (id_ == zero_size_id) return;
  const std::lock_guard lock(arena_->mutex_);
  auto& b = arena_->blocks_[id_];
  ZOE_EXPECTS(b.pins > 0, arena_->name_, ": unpin of a block that is not pinned");
  if (--b.pins == 0) --arena_->stats_.pinned_blocks;
}

bool arena_block::pinned() const {
  if (arena_ == nullptr || id_ == zero_size_id) return false;
  const std::lock_guard lock(arena_->mutex_);
  return arena_->blocks_[id_].pins > 0;
}

void arena_block::record_use(stream_view stream) {
  ZOE_EXPECTS(arena_ != nullptr, "record_use on an empty arena block");
  if (id_ == zero_size_id) return;
  const std::lock_guard lock(arena_->mutex_);
  arena_->record_use(arena_->blocks_[id_], stream);
}

void arena_block::reset() noexcept {
  if (arena_ == nullptr) return;
  if (id_ != zero_size_id) arena_->free_block(id_);
  arena_ = nullptr;
  size_ = 0;
}

// ---- arena ----------------------------------------------------------------------------------

arena::arena(device& dev, std::size_t capacity, arena_options options)
    : device_(&dev),
      name_(std::move(options.name)),
      capacity_(capacity),
      alignment_(options.alignment),
      compaction_(options.compaction) {
  ZOE_EXPECTS(is_pow2(alignment_) && alignment_ >= 256, name_, ": alignment ", alignment_,
              " must be a power of two of at least 256");
  ZOE_EXPECTS(capacity_ > 0 && capacity_ % alignment_ == 0, name_, ": capacity ", capacity_,
              " must be a positive multiple of the alignment ", alignment_);
  stream_ = device_->create_stream();
  base_ = static_cast<std::byte*>(device_->allocate(capacity_, stream_.view()));
  // Commit the region now, as device memory is: on the host device its pages would otherwise be
  // faulted in by the first compaction that moves a block onto them, on its stream's time.
  device_->memset_async(base_, 0, capacity_, stream_.view());
  device_->synchronize(stream_.view());
  ZOE_ASSERT(holes_.insert(0, capacity_));
}

arena::~arena() {
  const std::lock_guard lock(mutex_);
  if (!live_by_offset_.empty()) {
    log::error(name_, ": destroyed with ", live_by_offset_.size(), " live blocks; their handles now dangle");
  }
  try {
    // Work still reading freed blocks must not outlive the region.
    settle_all();
    device_->synchronize(stream_.view());
  } catch (const std::exception& e) {
    log::error(name_, ": compaction stream failed at destruction: ", e.what());
  }
  device_->deallocate(base_, capacity_);
}

arena_block arena::allocate(std::size_t bytes, stream_view stream) {
  const std::lock_guard lock(mutex_);
  if (auto b = allocate_locked(bytes, stream, true)) return std::move(*b);
  throw memory_error(str(
      name_, ": cannot allocate ", format_bytes(bytes), ": ", format_bytes(free_bytes()), " free of ",
      format_bytes(capacity_), ", largest hole ", format_bytes(largest_hole()),
      compaction_ ? str(", ", stats_.pinned_blocks, " pinned blocks in the way") : std::string(", compaction off")));
}

std::optional<arena_block> arena::try_allocate(std::size_t bytes, stream_view stream) {
  const std::lock_guard lock(mutex_);
  return allocate_locked(bytes, stream, true);
}

std::optional<arena_block> arena::try_allocate_in_place(std::size_t bytes, stream_view stream) {
  const std::lock_guard lock(mutex_);
  return allocate_locked(bytes, stream, false);
}

std::optional<arena_block> arena::allocate_locked(std::size_t bytes, stream_view stream, bool may_compact) {
  if (bytes == 0) return arena_block(this, zero_size_id, 0);
  // A size within the alignment of 2^64 does not round up: larger than any arena, it fails as
  // such (allocate() names it) instead of wrapping to a tiny block.
  const std::optional<std::uint64_t> aligned = align_up_checked(bytes, alignment_);
  if (!aligned) {
    ++stats_.failed_allocations;
    return std::nullopt;
  }
  const std::uint64_t rounded = *aligned;
  std::optional<std::uint64_t> offset = take_space(rounded, stream);
  // take_space() has settled all pending space when nothing fitted, so only holes remain.
  if (!offset && may_compact && compaction_ && rounded <= holes_.free_bytes()) {
    compact_locked(false);
    offset = holes_.take_best_fit(rounded);
    if (!offset && rounded <= holes_.free_bytes()) {
      // The quick pass left blocks behind small gaps; close those too before giving up.
      compact_locked(true);
      offset = holes_.take_best_fit(rounded);
    }
  }
  if (!offset) {
    ++stats_.failed_allocations;
    return std::nullopt;
  }
  std::uint32_t id = 0;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<std::uint32_t>(blocks_.size());
    blocks_.emplace_back();
  }
  block& b = blocks_[id];
  b.offset = *offset;
  b.size = rounded;
  b.pins = 0;
  b.stream = stream;
  live_by_offset_.emplace(b.offset, id);
  stats_.used += rounded;
  if (stats_.used > stats_.peak_used) stats_.peak_used = stats_.used;
  return arena_block(this, id, bytes);
}

// The policy, in RMM's order: space pending on the allocating stream (reusable at once: stream
// order protects it), settled holes, then space pending on another stream behind an event wait on
// the allocating stream. When none fits, waits for all pending space and coalesces it.
std::optional<std::uint64_t> arena::take_space(std::uint64_t bytes, stream_view stream) {
  settle_completed();
  if (!stream.is_default()) {
    for (auto& p : pending_) {
      if (p.stream == stream) {
        if (auto at = p.space.take_best_fit(bytes)) return at;
      }
    }
  }
  if (auto at = holes_.take_best_fit(bytes)) return at;
  if (!stream.is_default()) {
    for (auto& p : pending_) {
      if (p.stream == stream || p.space.largest() < bytes) continue;
      device_->wait(stream, p.freed);  // before taking: if it throws, the space stays pending
      ++stats_.cross_stream_reuses;
      return p.space.take_best_fit(bytes);
    }
  }
  if (pending_.empty() || bytes > free_bytes()) return std::nullopt;
  settle_all();
  return holes_.take_best_fit(bytes);
}

arena::pending_space& arena::pending_on(stream_view stream) {
  for (auto& p : pending_) {
    if (p.stream == stream) return p;
  }
  pending_.push_back({stream, {}, take_event()});
  return pending_.back();
}

void arena::settle(pending_space& p) {
  p.space.for_each([&](std::uint64_t offset, std::uint64_t size) {
    if (!holes_.insert(offset, size)) {
      log::error(name_, ": pending space overlaps free space; the arena's bookkeeping is broken");
    }
  });
  p.space.clear();
  spare_events_.push_back(std::move(p.freed));
}

void arena::settle_completed() {
  erase_settled(pending_, [&](pending_space& p) {
    if (!device_->query(p.freed)) return false;
    settle(p);
    return true;
  });
  erase_settled(retiring_events_, [&](device_event& e) {
    if (!device_->query(e)) return false;
    spare_events_.push_back(std::move(e));
    return true;
  });
}

void arena::settle_all() {
  if (!pending_.empty()) ++stats_.host_waits;
  // One at a time, so a failing wait leaves the rest pending rather than half settled.
  while (!pending_.empty()) {
    device_->synchronize(pending_.back().freed);
    settle(pending_.back());
    pending_.pop_back();
  }
}

std::uint64_t arena::free_bytes() const noexcept {
  std::uint64_t n = holes_.free_bytes();
  for (const auto& p : pending_) n += p.space.free_bytes();
  return n;
}

std::uint64_t arena::largest_hole() const noexcept {
  std::uint64_t n = holes_.largest();
  for (const auto& p : pending_) n = std::max(n, p.space.largest());
  return n;
}

void arena::record_use(block& b, stream_view stream) {
  for (auto& u : b.uses) {
    if (u.stream == stream) {
      device_->record(u.event, stream);  // the newer record supersedes the older
      return;
    }
  }
  use u{stream, take_event()};
  device_->record(u.event, stream);
  b.uses.push_back(std::move(u));
}

device_event arena::take_event() {
  if (spare_events_.empty()) return device_->create_event();
  device_event e = std::move(spare_events_.back());
  spare_events_.pop_back();
  return e;
}

void arena::free_block(std::uint32_t id) noexcept {
  const std::lock_guard lock(mutex_);
  block& b = blocks_[id];
  if (b.pins > 0) {
    log::error(name_, ": a pinned block was freed; its pins are dropped");
    --stats_.pinned_blocks;
    b.pins = 0;
  }
  live_by_offset_.erase(b.offset);
  stats_.used -= b.size;
  try {
    free_pending(b);
  } catch (const std::exception& e) {
    // Without a record of where its work has got to, the space is safe only once the device is idle.
    log::error(name_, ": while freeing a block: ", e.what(), "; waiting for the whole device");
    try {
      device_->synchronize();
    } catch (const std::exception& again) {
      log::error(name_, ": ", again.what());
    }
    if (!holes_.insert(b.offset, b.size)) {
      log::error(name_, ": a freed block overlaps free space; the arena's bookkeeping is broken");
    }
  }
  b.uses.clear();
  free_ids_.push_back(id);
}

void arena::free_pending(block& b) {
  // The streams whose work may still use the block: those with a use not yet complete, and the
  // one it was allocated on (its work needs no record, so where it has got to is unknown).
  std::vector<stream_view> streams;
  if (!b.stream.is_default()) streams.push_back(b.stream);
  for (auto& u : b.uses) {
    const bool done = device_->query(u.event);
    // Nothing waits on a use's event outside compaction, which synchronizes: reusable now.
    spare_events_.push_back(std::move(u.event));
    if (!done && std::find(streams.begin(), streams.end(), u.stream) == streams.end()) streams.push_back(u.stream);
  }
  const bool poison = poisons_freed_memory();
  if (streams.empty()) {
    if (poison) {
      device_->memset_async(base_ + b.offset, poison_byte, b.size, stream_.view());
      device_->synchronize(stream_.view());
    }
    if (!holes_.insert(b.offset, b.size)) {
      log::error(name_, ": a freed block overlaps free space; the arena's bookkeeping is broken");
    }
    return;
  }
  stream_view owner = streams.front();
  if (streams.size() > 1) {
    // Used on several streams: the arena's own stream joins them, so the space waits on one stream
    // without making a user's stream wait for another's work.
    owner = stream_.view();
    for (const stream_view s : streams) {
      device_event e = take_event();
      device_->record(e, s);
      device_->wait(owner, e);
      retiring_events_.push_back(std::move(e));
    }
  }
  // Debug builds overwrite the block once the work using it is done, before anyone else gets it.
  if (poison) device_->memset_async(base_ + b.offset, poison_byte, b.size, owner);
  pending_space& p = pending_on(owner);
  device_->record(p.freed, owner);
  if (!p.space.insert(b.offset, b.size)) {
    log::error(name_, ": a freed block overlaps pending space; the arena's bookkeeping is broken");
  }
}

std::uint64_t arena::compact() {
  const std::lock_guard lock(mutex_);
  return compact_locked(true);
}

std::uint64_t arena::compact_locked(bool thorough) {
  const auto start = std::chrono::steady_clock::now();
  const stream_view s = stream_.view();
  // Freed space becomes a destination: work still reading the freed blocks must finish first.
  settle_all();

  std::uint64_t moved = 0;
  std::uint64_t cursor = 0;
  // Adjacent blocks that slide down by the same distance move together, as one run: one series of
  // copies instead of one per block. Pieces of at most the distance never overlap: each reads
  // bytes the previous one has read.
  std::uint64_t run_from = 0;
  std::uint64_t run_to = 0;
  std::uint64_t run_bytes = 0;
  // Blocks only slide down, so they keep their order: the new index is built as they are visited.
  std::map<std::uint64_t, std::uint32_t> new_index;
  const auto move_run = [&] {
    if (run_bytes == 0) return;
    const std::uint64_t piece = std::min(run_from - run_to, run_bytes);
    for (std::uint64_t done = 0; done < run_bytes; done += piece) {
      device_->copy_async(base_ + run_to + done, base_ + run_from + done, std::min(piece, run_bytes - done),
                          copy_kind::device_to_device, s);
      ++stats_.copies;
    }
    run_bytes = 0;
  };
  for (const auto& [offset, id] : live_by_offset_) {
    block& b = blocks_[id];
    const std::uint64_t gap = b.offset - cursor;
    const bool stays =
        b.pins > 0 || gap == 0 || (!thorough && gap < b.size && (b.size + gap - 1) / gap > max_pieces_per_move);
    if (stays) {
      move_run();
      cursor = b.offset + b.size;
      new_index.emplace_hint(new_index.end(), b.offset, id);
      continue;
    }
    // Queued before the run's copies, so the copies of this block wait for its last use: those
    // recorded, and the work queued so far on the stream it belongs to. The events are retired, not
    // made spare: re-recorded before the waits pass, they could release them early.
    if (!b.stream.is_default()) record_use(b, b.stream);
    for (auto& u : b.uses) {
      device_->wait(s, u.event);
      retiring_events_.push_back(std::move(u.event));
    }
    b.uses.clear();
    if (run_bytes == 0 || run_from + run_bytes != b.offset) {
      // Not adjacent to the run (a hole lies between): the distance grows, start a new run.
      move_run();
      run_from = b.offset;
      run_to = cursor;
    }
    run_bytes += b.size;
    b.offset = cursor;
    cursor += b.size;
    moved += b.size;
    new_index.emplace_hint(new_index.end(), b.offset, id);
  }
  move_run();

  // Offsets changed: the new index, and the holes rebuilt from it.
  live_by_offset_ = std::move(new_index);
  holes_.clear();
  std::uint64_t end = 0;
  for (const auto& [offset, id] : live_by_offset_) {
    if (offset > end) ZOE_ASSERT(holes_.insert(end, offset - end));
    end = offset + blocks_[id].size;
  }
  if (end < capacity_) ZOE_ASSERT(holes_.insert(end, capacity_ - end));

  // Callers get new addresses on return, so the copies must be done by then.
  device_->synchronize(s);
  ++stats_.compactions;
  stats_.bytes_moved += moved;
  stats_.seconds_compacting += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return moved;
}

std::uint64_t arena::largest_unpinned_span() const {
  const std::lock_guard lock(mutex_);
  std::uint64_t largest = 0;
  std::uint64_t from = 0;  // the end of the last pinned block
  for (const auto& [offset, id] : live_by_offset_) {
    const block& b = blocks_[id];
    if (b.pins == 0) continue;
    largest = std::max(largest, offset - from);
    from = offset + b.size;
  }
  return std::max(largest, capacity_ - from);
}

arena_stats arena::stats() const {
  const std::lock_guard lock(mutex_);
  arena_stats out = stats_;
  out.capacity = capacity_;
  out.live_blocks = live_by_offset_.size();
  out.free = free_bytes();
  out.pending_free = out.free - holes_.free_bytes();
  out.largest_hole = largest_hole();
  out.fragmentation = out.free == 0 ? 0.0 : 1.0 - static_cast<double>(out.largest_hole) / static_cast<double>(out.free);
  return out;
}

}  // namespace zoe::allocators
