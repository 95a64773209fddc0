// The pending memory's offsets (pending_space.hpp).
#include "pending_space.hpp"

#include <iterator>

#include "tiers/step_pieces.hpp"
#include "zoe/core/units.hpp"

namespace zoe::engine::detail {

std::optional<std::uint64_t> pending_space::take(std::uint64_t bytes) {
  bytes = round_up(bytes, pending_alignment);
  const std::lock_guard lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const std::uint64_t at = it->first;
    const std::uint64_t left = it->second - bytes;
    free_.erase(it);
    if (left > 0) free_.emplace(at + bytes, left);
    return at;
  }
  return std::nullopt;
}

void pending_space::give_back(std::uint64_t offset, std::uint64_t bytes) {
  bytes = round_up(bytes, pending_alignment);
  const std::lock_guard lock(mutex_);
  auto it = free_.emplace(offset, bytes).first;
  // Joins the free run after it, then the one before.
  const auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    const auto before = std::prev(it);
    if (before->first + before->second == it->first) {
      before->second += it->second;
      free_.erase(it);
    }
  }
}

void pending_space::clear() {
  const std::lock_guard lock(mutex_);
  free_.clear();
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

}  // namespace zoe::engine::detail
