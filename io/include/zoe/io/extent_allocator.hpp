#pragma once
// Hands out byte ranges ("extents") of a fixed address space: best fit, so large holes survive
// for large requests, and neighbours coalesce when freed. The swap store uses it inside its
// preallocated files; it knows nothing about files.

#include <cstdint>
#include <map>
#include <optional>
#include <set>

namespace zoe::io {

/// Not thread-safe: the owner serializes calls.
class extent_allocator {
 public:
  /// Manages [0, capacity). `granularity` (a power of two) is the unit and the least alignment.
  extent_allocator(std::uint64_t capacity, std::uint64_t granularity);

  /// Finds `bytes` (rounded up to the granularity) at an offset aligned to `alignment` (a power of
  /// two, at least the granularity). Returns the offset, or nothing when no hole fits.
  [[nodiscard]] std::optional<std::uint64_t> allocate(std::uint64_t bytes, std::uint64_t alignment);
  /// Returns an extent given out by allocate (same size). Throws usage_error if it overlaps free space.
  void free(std::uint64_t offset, std::uint64_t bytes);

  [[nodiscard]] std::uint64_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::uint64_t free_bytes() const noexcept { return free_bytes_; }
  [[nodiscard]] std::uint64_t largest_hole() const noexcept;
  [[nodiscard]] std::size_t hole_count() const noexcept { return by_offset_.size(); }
  [[nodiscard]] std::uint64_t rounded(std::uint64_t bytes) const noexcept;

 private:
  void insert_hole(std::uint64_t offset, std::uint64_t bytes);
  void erase_hole(std::map<std::uint64_t, std::uint64_t>::iterator it);

  std::uint64_t capacity_;
  std::uint64_t granularity_;
  std::uint64_t free_bytes_ = 0;
  std::map<std::uint64_t, std::uint64_t> by_offset_;            ///< hole offset -> size
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;   ///< (size, offset), for best fit
};

}  // namespace zoe::io
