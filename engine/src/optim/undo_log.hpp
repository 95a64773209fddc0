#pragma once
// The optimizer step's undo log: the bytes of in-memory states (host or device homes) as they were
// before Adam changed them in place, so that a step whose read, write or device call fails can put
// every state back. One pageable allocation, sized once (footprint_plan::optimizer_undo_bytes); a step fills it
// from the front and clears it when it ends.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"

namespace zoe::engine::detail {

class undo_log {
 public:
  /// Takes `capacity` bytes of pageable memory; memory_error when refused.
  explicit undo_log(std::uint64_t capacity);

  /// Keeps `before`, the bytes at `offset` of state `s` of `p` as they are now (host memory: the
  /// home itself, or a copy of a device home). usage_error when the log is full (the capacity was
  /// sized for another placement).
  void record(parameter_id p, state_kind s, std::uint64_t offset, std::span<const std::byte> before);
  /// Copies every record back to its home (host: memcpy; device: a copy on `stream`, waited for),
  /// then clears the log. Throws what the device throws.
  void restore(const tier_manager& tiers, device& dev, stream_view stream);
  void clear() noexcept {
    entries_.clear();
    used_ = 0;
  }
  [[nodiscard]] std::uint64_t used() const noexcept { return used_; }
  [[nodiscard]] std::uint64_t capacity() const noexcept { return capacity_; }

 private:
  struct entry {
    parameter_id param;
    state_kind state;
    std::uint64_t offset;  ///< within the state
    std::uint64_t bytes;
    std::uint64_t at;  ///< within the log
  };
  std::uint64_t capacity_;
  std::unique_ptr<std::byte[]> memory_;  // NOLINT(cppcoreguidelines-avoid-c-arrays): one raw pageable block
  std::vector<entry> entries_;
  std::uint64_t used_ = 0;

  void check_room(parameter_id p, state_kind s, std::uint64_t bytes) const;
};

}  // namespace zoe::engine::detail
