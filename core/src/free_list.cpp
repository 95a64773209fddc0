#include "zoe/core/free_list.hpp"

#include <iterator>

#include "zoe/core/check.hpp"

namespace zoe::detail {

bool coalescing_free_list::insert(std::uint64_t offset, std::uint64_t size) {
  ZOE_EXPECTS(size > 0, "a free range must not be empty (at offset ", offset, ")");
  std::uint64_t begin = offset;
  std::uint64_t end = offset + size;
  auto next = by_offset_.lower_bound(begin);
  if (next != by_offset_.end() && next->first < end) return false;
  if (next != by_offset_.begin()) {
    const auto prev = std::prev(next);
    if (prev->first + prev->second > begin) return false;
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      erase(prev);
    }
  }
  if (next != by_offset_.end() && next->first == end) {
    end += next->second;
    erase(next);
  }
  add(begin, end - begin);
  return true;
}

std::optional<std::uint64_t> coalescing_free_list::take_best_fit(std::uint64_t size) {
  return take_best_fit(size, [](std::uint64_t hole_offset, std::uint64_t) { return std::optional(hole_offset); });
}

void coalescing_free_list::clear() noexcept {
  by_offset_.clear();
  by_size_.clear();
  free_bytes_ = 0;
}

std::uint64_t coalescing_free_list::largest() const noexcept { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }

void coalescing_free_list::add(std::uint64_t offset, std::uint64_t size) {
  by_offset_.emplace(offset, size);
  by_size_.emplace(size, offset);
  free_bytes_ += size;
}

void coalescing_free_list::erase(hole_iterator it) {
  by_size_.erase({it->second, it->first});
  free_bytes_ -= it->second;
  by_offset_.erase(it);
}

void coalescing_free_list::carve(std::uint64_t hole_offset, std::uint64_t hole_size, std::uint64_t start,
                                 std::uint64_t size) {
  ZOE_EXPECTS(start >= hole_offset && start + size <= hole_offset + hole_size, "placement [", start, ", ", start + size,
              ") lies outside the hole [", hole_offset, ", ", hole_offset + hole_size, ")");
  erase(by_offset_.find(hole_offset));
  // The pieces left keep their places; what borders them is in use, so nothing coalesces.
  if (start > hole_offset) add(hole_offset, start - hole_offset);
  if (start + size < hole_offset + hole_size) add(start + size, hole_offset + hole_size - start - size);
}

}  // namespace zoe::detail
