#include "zoe/allocators/arena.hpp"

#include <chrono>
#include <limits>
#include <utility>

#include "zoe/allocators/poison.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"

namespace zoe::allocators {
namespace {

constexpr std::uint32_t zero_size_id = std::numeric_limits<std::uint32_t>::max();

// A block moved into a gap smaller than itself must be copied in gap-sized pieces (copies may not
// overlap). Past this many pieces, the quick pass leaves the block where it is: the few bytes
// gained are not worth the copies unless the request still does not fit.
constexpr std::uint64_t max_pieces_per_move = 64;

// Recorded uses of freed blocks are kept until compaction waits on them; above this many, the
// completed ones are dropped so a long run without compaction does not accumulate events.
constexpr std::size_t retired_uses_pruning = 256;

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
  auto& uses = arena_->blocks_[id_].uses;
  for (auto& u : uses) {
    if (u.stream == stream) {
      arena_->device_->record(u.event, stream);  // the newer record supersedes the older
      return;
    }
  }
  arena::use u{stream, arena_->take_event()};
  arena_->device_->record(u.event, stream);
  uses.push_back(std::move(u));
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
    device_->synchronize(stream_.view());
  } catch (const std::exception& e) {
    log::error(name_, ": compaction stream failed at destruction: ", e.what());
  }
  device_->deallocate(base_, capacity_);
}

arena_block arena::allocate(std::size_t bytes) {
  const std::lock_guard lock(mutex_);
  if (auto b = allocate_locked(bytes)) return std::move(*b);
  throw memory_error(str(name_, ": cannot allocate ", format_bytes(bytes), ": ", format_bytes(holes_.free_bytes()),
                         " free of ", format_bytes(capacity_), ", largest hole ", format_bytes(holes_.largest()),
                         compaction_ ? str(", ", stats_.pinned_blocks, " pinned blocks in the way")
                                     : std::string(", compaction off")));
}

std::optional<arena_block> arena::try_allocate(std::size_t bytes) {
  const std::lock_guard lock(mutex_);
  return allocate_locked(bytes);
}

std::optional<arena_block> arena::allocate_locked(std::size_t bytes) {
  if (bytes == 0) return arena_block(this, zero_size_id, 0);
  const std::uint64_t rounded = align_up(bytes, alignment_);
  std::optional<std::uint64_t> offset = holes_.take_best_fit(rounded);
  if (!offset && compaction_ && rounded <= holes_.free_bytes()) {
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
  live_by_offset_.emplace(b.offset, id);
  stats_.used += rounded;
  if (stats_.used > stats_.peak_used) stats_.peak_used = stats_.used;
  return arena_block(this, id, bytes);
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
  try {
    if (poisons_freed_memory()) {
      // Debug builds: overwrite the block once the work using it is done, before anyone can
      // be handed the space again.
      for (auto& u : b.uses) device_->wait(stream_.view(), u.event);
      device_->memset_async(base_ + b.offset, poison_byte, b.size, stream_.view());
      device_->synchronize(stream_.view());
      for (auto& u : b.uses) spare_events_.push_back(std::move(u.event));
    } else {
      for (auto& u : b.uses) retired_uses_.push_back(std::move(u));
      if (retired_uses_.size() > retired_uses_pruning) {
        std::erase_if(retired_uses_, [&](use& u) {
          if (!device_->query(u.event)) return false;
          spare_events_.push_back(std::move(u.event));
          return true;
        });
      }
    }
  } catch (const std::exception& e) {
    log::error(name_, ": while freeing a block: ", e.what());
  }
  b.uses.clear();
  live_by_offset_.erase(b.offset);
  stats_.used -= b.size;
  if (!holes_.insert(b.offset, b.size)) {
    log::error(name_, ": a freed block overlaps free space; the arena's bookkeeping is broken");
  }
  free_ids_.push_back(id);
}

std::uint64_t arena::compact() {
  const std::lock_guard lock(mutex_);
  return compact_locked(true);
}

std::uint64_t arena::compact_locked(bool thorough) {
  const auto start = std::chrono::steady_clock::now();
  const stream_view s = stream_.view();
  // Freed space becomes a destination: work still reading the freed blocks must finish first.
  for (auto& u : retired_uses_) {
    device_->wait(s, u.event);
    spare_events_.push_back(std::move(u.event));
  }
  retired_uses_.clear();

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
    const bool stays = b.pins > 0 || gap == 0 ||
                       (!thorough && gap < b.size && (b.size + gap - 1) / gap > max_pieces_per_move);
    if (stays) {
      move_run();
      cursor = b.offset + b.size;
      new_index.emplace_hint(new_index.end(), b.offset, id);
      continue;
    }
    // Queued before the run's copies, so the copies of this block wait for its last use.
    for (auto& u : b.uses) {
      device_->wait(s, u.event);
      spare_events_.push_back(std::move(u.event));
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

arena_stats arena::stats() const {
  const std::lock_guard lock(mutex_);
  arena_stats out = stats_;
  out.capacity = capacity_;
  out.live_blocks = live_by_offset_.size();
  out.free = holes_.free_bytes();
  out.largest_hole = holes_.largest();
  out.fragmentation = out.free == 0 ? 0.0
                                    : 1.0 - static_cast<double>(out.largest_hole) / static_cast<double>(out.free);
  return out;
}

}  // namespace zoe::allocators
