#pragma once
// The activations' pinned host share: one pinned buffer cut into slots by a best-fit free list.
// A slot given back while a device copy may still touch it is held until the event recorded after
// that copy completes, so a later save never overwrites bytes a copy is still reading or writing.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/free_list.hpp"

namespace zoe::engine::detail {

/// Not thread-safe: the activation store's driving thread owns it.
class host_share {
 public:
  /// Slots start on multiples of this and take whole multiples of it.
  static constexpr std::uint64_t slot_alignment = 256;

  /// Nothing is allocated until the first take(). `capacity` 0: the share holds nothing.
  host_share(device& dev, allocators::pinned_host_resource& pinned, std::uint64_t capacity);
  /// Waits for the copies of slots still held (never throws).
  ~host_share();
  host_share(const host_share&) = delete;
  host_share& operator=(const host_share&) = delete;

  /// The offset of a free slot of `bytes`, waiting for held slots when nothing fits otherwise;
  /// nothing when the share cannot hold them. Maps the pinned buffer on first use: memory_error
  /// naming zoe.activations.host_bytes when the pinned resource refuses it.
  [[nodiscard]] std::optional<std::uint64_t> take(std::uint64_t bytes);
  /// Gives the slot back once `last_use` has completed (an event never recorded: at once).
  void give_back(std::uint64_t offset, std::uint64_t bytes, device_event last_use);
  /// Waits for every held slot and frees it. Never throws (a failed wait is logged).
  void drain() noexcept;

  [[nodiscard]] std::byte* at(std::uint64_t offset) const noexcept { return buffer_.data() + offset; }
  /// Bytes in slots taken or held, alignment included.
  [[nodiscard]] std::uint64_t in_use() const noexcept { return in_use_; }

 private:
  struct held_slot {
    std::uint64_t offset = 0;
    std::uint64_t bytes = 0;
    device_event last_use;
  };
  void release(std::uint64_t offset, std::uint64_t bytes);
  /// Frees the held slots whose copies are done; with `wait`, waits for the oldest first.
  bool reap(bool wait);

  device& dev_;
  allocators::pinned_host_resource& pinned_;
  std::uint64_t capacity_;
  allocators::pinned_buffer buffer_;
  zoe::detail::coalescing_free_list holes_;
  std::vector<held_slot> held_;
  std::uint64_t in_use_ = 0;
};

}  // namespace zoe::engine::detail
