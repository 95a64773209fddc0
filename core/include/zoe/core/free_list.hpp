#pragma once
// The free space of an address space [0, capacity) as a set of holes: indexed by offset, so a
// freed range merges with the holes beside it, and by (size, offset), so the smallest hole that
// fits is found in log time. The bookkeeping under the swap store's extent allocator and the
// device arena; what an offset means, and any placement rule such as alignment, is theirs.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace zoe::detail {

/// Not thread-safe: the owner serializes calls.
class coalescing_free_list {
 public:
  /// Adds [offset, offset + size) as free space, merged with the holes that touch it. Returns
  /// false, and changes nothing, when the range overlaps a hole (freed twice). `size` > 0.
  [[nodiscard]] bool insert(std::uint64_t offset, std::uint64_t size);

  /// Best fit: takes `size` bytes from the start of the smallest hole that holds them (the lowest
  /// offset among equal sizes) and returns their offset; the rest of the hole stays free. Nothing
  /// when no hole is large enough.
  [[nodiscard]] std::optional<std::uint64_t> take_best_fit(std::uint64_t size);

  /// Best fit under a placement rule: offers the holes of at least `size` bytes, smallest first,
  /// to `place(hole_offset, hole_size)`, which returns where in that hole the `size` bytes would
  /// start, or nothing if they cannot go there. Takes them out of the first hole that accepts;
  /// what is left of it before and after stays free. Returns their offset, or nothing.
  template <typename Place>
  [[nodiscard]] std::optional<std::uint64_t> take_best_fit(std::uint64_t size, Place&& place) {
    for (auto it = by_size_.lower_bound({size, 0}); it != by_size_.end(); ++it) {
      const auto [hole_size, hole_offset] = *it;
      const std::optional<std::uint64_t> start = place(hole_offset, hole_size);
      if (!start) continue;
      carve(hole_offset, hole_size, *start, size);
      return start;
    }
    return std::nullopt;
  }

  /// Calls `visit(offset, size)` for every hole, in increasing offset (to move the holes elsewhere).
  template <typename Visit>
  void for_each(Visit&& visit) const {
    for (const auto& [offset, size] : by_offset_) visit(offset, size);
  }

  /// Forgets every hole.
  void clear() noexcept;

  [[nodiscard]] std::uint64_t free_bytes() const noexcept { return free_bytes_; }
  /// The size of the largest hole (0 when there is none).
  [[nodiscard]] std::uint64_t largest() const noexcept;
  [[nodiscard]] std::size_t hole_count() const noexcept { return by_offset_.size(); }

 private:
  using hole_iterator = std::map<std::uint64_t, std::uint64_t>::iterator;
  void add(std::uint64_t offset, std::uint64_t size);
  void erase(hole_iterator it);
  /// Takes [start, start + size) out of the hole at hole_offset; usage_error if it is not inside.
  void carve(std::uint64_t hole_offset, std::uint64_t hole_size, std::uint64_t start, std::uint64_t size);

  std::map<std::uint64_t, std::uint64_t> by_offset_;           ///< hole offset -> size
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;  ///< (size, offset)
  std::uint64_t free_bytes_ = 0;
};

}  // namespace zoe::detail
