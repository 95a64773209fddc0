#pragma once
// Hands out byte ranges ("extents") of a fixed address space: best fit, so large holes survive
// for large requests, and neighbours coalesce when freed. The swap store uses it inside its
// preallocated files; it knows nothing about files.

#include <cstdint>
#include <optional>

#include "zoe/core/free_list.hpp"

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
  [[nodiscard]] std::uint64_t free_bytes() const noexcept { return holes_.free_bytes(); }
  [[nodiscard]] std::uint64_t largest_hole() const noexcept { return holes_.largest(); }
  [[nodiscard]] std::size_t hole_count() const noexcept { return holes_.hole_count(); }
  /// What an extent of `bytes` takes: rounded up to the granularity; nothing when that does not
  /// fit 64 bits (no extent that large can exist).
  [[nodiscard]] std::optional<std::uint64_t> rounded(std::uint64_t bytes) const noexcept;

 private:
  std::uint64_t capacity_;
  std::uint64_t granularity_;
  zoe::detail::coalescing_free_list holes_;
};

}  // namespace zoe::io
