#pragma once
// The speculative step's pending memory (optimizer_step.hpp, "Speculation"), as offsets into one
// block of pageable host memory the step takes when it is made (footprint_plan::
// optimizer_pending_bytes): first fit, so the masters backward's fetches leave for the speculation
// (freed once it read them) and the speculated shards' new host states (freed with the step)
// share it. Thread-safe.

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace zoe::engine::detail {

class pending_space {
 public:
  explicit pending_space(std::uint64_t capacity) : capacity_(capacity) { clear(); }
  /// The offset of `bytes` (whole pending_alignment units) free until give_back; nullopt when no
  /// free run holds them.
  [[nodiscard]] std::optional<std::uint64_t> take(std::uint64_t bytes);
  /// Frees what take() returned at `offset` for `bytes`.
  void give_back(std::uint64_t offset, std::uint64_t bytes);
  /// Everything free again.
  void clear();
  [[nodiscard]] std::uint64_t capacity() const noexcept { return capacity_; }

 private:
  std::mutex mutex_;
  std::uint64_t capacity_;
  std::map<std::uint64_t, std::uint64_t> free_;  // offset -> bytes, no two adjacent
};

}  // namespace zoe::engine::detail
