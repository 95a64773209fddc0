#pragma once
// How the host device copies "device" memory to device memory: the bulk copy a GPU's copy engine
// stands for, without polluting the CPU caches.

#include <cstddef>

namespace zoe::detail {

/// Copies `bytes` from `s` to `d`. The ranges must not overlap (the host device's copy_async
/// refuses overlapping ranges; the arena's compaction copies in pieces that never overlap).
void copy_device_memory(std::byte* d, const std::byte* s, std::size_t bytes);

}  // namespace zoe::detail
