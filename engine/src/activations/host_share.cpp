#include "host_share.hpp"

#include <exception>
#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/checked.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"

namespace zoe::engine::detail {

host_share::host_share(device& dev, allocators::pinned_host_resource& pinned, std::uint64_t capacity)
    : dev_(dev), pinned_(pinned), capacity_(capacity) {}

host_share::~host_share() { drain(); }

std::optional<std::uint64_t> host_share::take(std::uint64_t bytes) {
  // A size that does not round up within 64 bits is larger than any share.
  const std::optional<std::uint64_t> rounded = align_up_checked(bytes, slot_alignment);
  if (!rounded || *rounded > capacity_) return std::nullopt;
  const std::uint64_t size = *rounded;
  if (!buffer_) {
    try {
      buffer_ = pinned_.allocate(static_cast<std::size_t>(capacity_));
    } catch (const memory_error& e) {
      throw memory_error(str("activation checkpoints: the pinned host share of ", format_bytes(capacity_),
                             " (zoe.activations.host_bytes) was refused: ", e.what()));
    }
    ZOE_ASSERT(holes_.insert(0, capacity_));
  }
  for (;;) {
    if (const std::optional<std::uint64_t> at = holes_.take_best_fit(size)) {
      in_use_ += size;
      return at;
    }
    // Slots whose copies are done make room first; only then wait for one still copying.
    if (reap(false)) continue;
    if (!reap(true)) return std::nullopt;
  }
}

void host_share::give_back(std::uint64_t offset, std::uint64_t bytes, device_event last_use) {
  const std::uint64_t size = align_up(bytes, slot_alignment);
  if (!last_use.valid()) {
    release(offset, size);
    return;
  }
  held_.push_back({.offset = offset, .bytes = size, .last_use = std::move(last_use)});
}

void host_share::drain() noexcept {
  for (held_slot& h : held_) {
    try {
      dev_.synchronize(h.last_use);
    } catch (const std::exception& e) {
      log::error("activation checkpoints: waiting for a copy of the pinned host share failed: ", e.what());
    }
    release(h.offset, h.bytes);
  }
  held_.clear();
}

void host_share::release(std::uint64_t offset, std::uint64_t bytes) {
  in_use_ -= bytes;
  // Never fails: every slot given back was taken once from these holes.
  (void)holes_.insert(offset, bytes);
}

bool host_share::reap(bool wait) {
  bool any = false;
  for (std::size_t i = 0; i < held_.size();) {
    held_slot& h = held_[i];
    if (wait && !any) {
      dev_.synchronize(h.last_use);
    } else if (!dev_.query(h.last_use)) {
      ++i;
      continue;
    }
    release(h.offset, h.bytes);
    held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
    any = true;
  }
  return any;
}

}  // namespace zoe::engine::detail
