#include "zoe/io/extent_allocator.hpp"

#include "zoe/core/check.hpp"
#include "zoe/core/checked.hpp"
#include "zoe/core/units.hpp"

namespace zoe::io {

extent_allocator::extent_allocator(std::uint64_t capacity, std::uint64_t granularity)
    : capacity_(align_down(capacity, granularity)), granularity_(granularity) {
  ZOE_EXPECTS(is_pow2(granularity), "extent granularity must be a power of two, got ", granularity);
  if (capacity_ > 0) ZOE_ASSERT(holes_.insert(0, capacity_));
}

std::optional<std::uint64_t> extent_allocator::rounded(std::uint64_t bytes) const noexcept {
  return align_up_checked(std::max<std::uint64_t>(bytes, 1), granularity_);
}

std::optional<std::uint64_t> extent_allocator::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  ZOE_EXPECTS(is_pow2(alignment) && alignment >= granularity_, "extent alignment must be a power of two of at least ",
              granularity_, ", got ", alignment);
  // A size that does not round up within 64 bits fits no hole.
  const std::optional<std::uint64_t> need = rounded(bytes);
  if (!need) return std::nullopt;
  // Smallest hole first; a hole that is big enough may still fail the alignment, so keep looking.
  // Every hole offered holds `need` bytes, so only the padding before `start` can tip it over.
  return holes_.take_best_fit(*need, [&](std::uint64_t offset, std::uint64_t size) -> std::optional<std::uint64_t> {
    const std::uint64_t start = align_up(offset, alignment);
    if (start - offset > size - *need) return std::nullopt;
    return start;
  });
}

void extent_allocator::free(std::uint64_t offset, std::uint64_t bytes) {
  const std::optional<std::uint64_t> size = rounded(bytes);
  ZOE_EXPECTS(offset % granularity_ == 0 && offset <= capacity_ && size && *size <= capacity_ - offset, "extent of ",
              bytes, " bytes at ", offset, " was not given out by this allocator (capacity ", capacity_, ")");
  ZOE_EXPECTS(holes_.insert(offset, *size), "extent [", offset, ", ", offset + *size,
              ") overlaps free space: freed twice?");
}

}  // namespace zoe::io
