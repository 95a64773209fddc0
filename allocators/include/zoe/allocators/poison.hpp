#pragma once
// Poisoning of freed memory: debug builds of zoe overwrite memory returned to an allocator with a
// recognizable byte, so a use after free reads garbage that tests (and people) can spot.

#include <cstddef>

namespace zoe::allocators {

/// The byte freed memory is filled with when poisoning is on.
inline constexpr unsigned char poison_byte = 0xDB;

/// True when this build of the allocators poisons freed memory (debug builds). Never throws.
[[nodiscard]] bool poisons_freed_memory() noexcept;

}  // namespace zoe::allocators
