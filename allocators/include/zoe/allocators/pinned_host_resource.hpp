#pragma once
// Pinned host memory: page-aligned anonymous mappings placed on a NUMA node (through hwloc),
// backed by transparent huge pages where the kernel offers them, and locked through the device
// seam (mlock on the host device, cudaHostRegister on CUDA), so allocators never call CUDA.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "zoe/core/device.hpp"

namespace zoe::allocators {

namespace detail {
class numa_topology;
}

/// Where a pinned_host_resource places its memory.
enum class numa_placement : int {
  device = 0,          ///< the node of the device (its PCI bus), else of the calling thread
  calling_thread = 1,  ///< the node of the CPU the allocating thread runs on
  explicit_node = 2,   ///< pinned_options::numa_node
  none = 3,            ///< first touch decides
};

struct pinned_options {
  numa_placement placement = numa_placement::device;
  int numa_node = -1;      ///< used with numa_placement::explicit_node
  bool huge_pages = true;  ///< ask for transparent huge pages on mappings of 2 MiB or more
  /// The most this resource may hand out at once (pinned memory is scarce); 0 means no limit.
  std::uint64_t limit_bytes = 0;
};

/// One pinned allocation. Move-only owner: destruction unregisters and unmaps it.
class pinned_buffer {
 public:
  pinned_buffer() noexcept = default;
  ~pinned_buffer();
  pinned_buffer(pinned_buffer&& o) noexcept;
  pinned_buffer& operator=(pinned_buffer&& o) noexcept;
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::span<std::byte> span() const noexcept { return {data_, size_}; }
  [[nodiscard]] explicit operator bool() const noexcept { return data_ != nullptr; }
  /// False when the OS refused to lock it (RLIMIT_MEMLOCK) and it is ordinary pageable memory.
  [[nodiscard]] bool locked() const noexcept { return locked_; }
  /// The NUMA node the memory sits on (asked of the kernel after faulting), -1 when unknown.
  [[nodiscard]] int numa_node() const noexcept { return numa_node_; }
  /// True when transparent huge pages were requested for it and the kernel has them enabled.
  [[nodiscard]] bool huge_pages() const noexcept { return huge_pages_; }

 private:
  friend class pinned_host_resource;
  struct owner;
  void reset() noexcept;
  std::shared_ptr<owner> owner_;  // the resource's accounting; outlives the resource if need be
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool locked_ = false;
  int numa_node_ = -1;
  bool huge_pages_ = false;
};

/// Hands out pinned_buffers. Thread-safe. The device must outlive every buffer.
class pinned_host_resource {
 public:
  /// Loads the machine topology. Throws device_error when hwloc cannot load it.
  explicit pinned_host_resource(device& dev, pinned_options options = {});
  ~pinned_host_resource();
  pinned_host_resource(const pinned_host_resource&) = delete;
  pinned_host_resource& operator=(const pinned_host_resource&) = delete;

  /// Maps, places, locks and faults in `bytes` (rounded up to whole pages; the buffer's size() is
  /// `bytes`). Zero bytes gives an empty buffer. Throws memory_error naming the size when the
  /// limit or the OS refuses; the lock fallback is a warning, not an error (see device).
  [[nodiscard]] pinned_buffer allocate(std::size_t bytes);

  /// The node memory is placed on for a caller on this thread, -1 when there is no placement.
  [[nodiscard]] int target_node() const;
  /// Number of NUMA nodes hwloc sees (1 on a machine without NUMA).
  [[nodiscard]] int numa_nodes() const noexcept;
  /// Bytes handed out and not yet freed.
  [[nodiscard]] std::uint64_t bytes_in_use() const noexcept;
  /// The most bytes_in_use() has been since the resource was made (so the engine can prove its
  /// pinned memory stayed within its footprint plan). Never throws.
  [[nodiscard]] std::uint64_t peak_bytes_in_use() const noexcept;
  [[nodiscard]] device& owner_device() const noexcept { return *device_; }

 private:
  device* device_;
  pinned_options options_;
  std::unique_ptr<detail::numa_topology> topology_;
  int device_node_ = -1;  // the node of the device's PCI bus (numa_placement::device), -1 if unknown
  std::shared_ptr<pinned_buffer::owner> owner_;
};

}  // namespace zoe::allocators
