#pragma once
// Page-aligned, locked, pre-faulted host memory for benchmark buffers, allocated before timing so
// no page fault or lock lands inside a timed region. It is the pinned host memory zoe itself uses
// (allocators::pinned_host_resource on the host device), so zoe-bench measures the buffers the
// swap path will have, huge pages included: a 1 MiB O_DIRECT request from 4 KiB pages needs 256
// segments, more than a virtio drive's 254, so the kernel splits it in two; from a huge page it is
// one segment (measured on such a drive: 1.3-1.5 GiB/s reads without, 1.9-2.1 with).

#include <cstddef>
#include <span>

#include "zoe/allocators/pinned_host_resource.hpp"

namespace zoe::bench {

class host_buffer {
 public:
  /// Maps `bytes` (rounded up to pages; transparent huge pages from 2 MiB up), locks it (one
  /// warning naming RLIMIT_MEMLOCK if the limit refuses) and faults every page in. Throws
  /// memory_error naming the size when the mapping fails.
  explicit host_buffer(std::size_t bytes);

  [[nodiscard]] std::span<std::byte> span() const noexcept { return buffer_.span(); }
  /// False when RLIMIT_MEMLOCK refused the lock and the memory is ordinary pageable memory.
  [[nodiscard]] bool locked() const noexcept { return buffer_.locked(); }
  /// True when transparent huge pages were asked for and the kernel has them enabled.
  [[nodiscard]] bool huge_pages() const noexcept { return buffer_.huge_pages(); }

 private:
  allocators::pinned_buffer buffer_;
};

}  // namespace zoe::bench
