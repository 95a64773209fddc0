#include "zoe/io/extent_allocator.hpp"

#include "zoe/core/check.hpp"
#include "zoe/core/units.hpp"

namespace zoe::io {

extent_allocator::extent_allocator(std::uint64_t capacity, std::uint64_t granularity)
    : capacity_(align_down(capacity, granularity)), granularity_(granularity) {
  ZOE_EXPECTS(is_pow2(granularity), "extent granularity must be a power of two, got ", granularity);
  if (capacity_ > 0) insert_hole(0, capacity_);
}

std::uint64_t extent_allocator::rounded(std::uint64_t bytes) const noexcept {
  return align_up(std::max<std::uint64_t>(bytes, 1), granularity_);
}

std::uint64_t extent_allocator::largest_hole() const noexcept {
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

void extent_allocator::insert_hole(std::uint64_t offset, std::uint64_t bytes) {
  by_offset_.emplace(offset, bytes);
  by_size_.emplace(bytes, offset);
  free_bytes_ += bytes;
}

void extent_allocator::erase_hole(std::map<std::uint64_t, std::uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_bytes_ -= it->second;
  by_offset_.erase(it);
}

std::optional<std::uint64_t> extent_allocator::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  ZOE_EXPECTS(is_pow2(alignment) && alignment >= granularity_, "extent alignment must be a power of two of at least ",
              granularity_, ", got ", alignment);
  const std::uint64_t need = rounded(bytes);
  // Smallest hole first; a hole that is big enough may still fail the alignment, so keep looking.
  for (auto it = by_size_.lower_bound({need, 0}); it != by_size_.end(); ++it) {
    const auto [size, offset] = *it;
    const std::uint64_t start = align_up(offset, alignment);
    if (start + need > offset + size) continue;
    erase_hole(by_offset_.find(offset));
    if (start > offset) insert_hole(offset, start - offset);
    if (start + need < offset + size) insert_hole(start + need, offset + size - start - need);
    return start;
  }
  return std::nullopt;
}

void extent_allocator::free(std::uint64_t offset, std::uint64_t bytes) {
  std::uint64_t begin = offset;
  std::uint64_t end = offset + rounded(bytes);
  ZOE_EXPECTS(offset % granularity_ == 0 && end <= capacity_, "extent [", offset, ", ", end,
              ") was not given out by this allocator (capacity ", capacity_, ")");
  auto next = by_offset_.lower_bound(begin);
  ZOE_EXPECTS(next == by_offset_.end() || next->first >= end, "extent [", begin, ", ", end,
              ") overlaps free space: freed twice?");
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    ZOE_EXPECTS(prev->first + prev->second <= begin, "extent [", begin, ", ", end, ") overlaps free space: freed twice?");
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      erase_hole(prev);
    }
  }
  if (next != by_offset_.end() && next->first == end) {
    end += next->second;
    erase_hole(next);
  }
  insert_hole(begin, end - begin);
}

}  // namespace zoe::io
