#pragma once
// Every allocator the conformance suite runs, behind the same small adapter: a rig that owns the
// allocator (on a host device), try_allocate() that says no instead of throwing, and bytes() of
// an allocation. Each rig holds 16 units of `unit` bytes.

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <span>

#include "zoe/allocators/arena.hpp"
#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"

namespace zoe::testing {

inline constexpr std::size_t units = 16;

struct pinned_type {
  static constexpr std::size_t unit = 64 * KiB;
  static constexpr std::size_t alignment = 4096;
  static constexpr bool keeps_freed_memory = false;  // freed memory goes back to the OS
  struct rig {
    std::unique_ptr<device> dev = make_host_device(1 * MiB);
    allocators::pinned_host_resource resource{*dev, {.limit_bytes = units * unit}};
  };
  using allocation = allocators::pinned_buffer;
  static std::optional<allocation> try_allocate(rig& r, std::size_t bytes) {
    try {
      return r.resource.allocate(bytes);
    } catch (const memory_error&) {
      return std::nullopt;
    }
  }
  static std::span<std::byte> bytes(const allocation& a) { return a.span(); }
};

struct pool_type {
  static constexpr std::size_t unit = 64 * KiB;
  static constexpr std::size_t alignment = 4096;
  static constexpr bool keeps_freed_memory = true;
  struct rig {
    std::unique_ptr<device> dev = make_host_device(1 * MiB);
    allocators::pinned_host_resource resource{*dev};
    allocators::buffer_pool pool{resource, {.buffer_count = units, .buffer_size = unit}};
  };
  using allocation = allocators::buffer_lease;
  // A pool has fixed-size buffers and no zero-size request: zero bytes is an empty lease.
  static std::optional<allocation> try_allocate(rig& r, std::size_t bytes) {
    if (bytes > unit) return std::nullopt;
    if (bytes == 0) return allocation{};
    return r.pool.try_acquire();
  }
  static std::span<std::byte> bytes(const allocation& a) { return a.span(); }
};

// Arena blocks may move during any allocation; the suite touches memory from many threads, so its
// allocations stay pinned while held (compaction is exercised by arena_test.cpp).
struct arena_type {
  static constexpr std::size_t unit = 64 * KiB;
  static constexpr std::size_t alignment = 256;
  static constexpr bool keeps_freed_memory = true;
  struct rig {
    std::unique_ptr<device> dev = make_host_device(4 * MiB);
    allocators::arena arena{*dev, units* unit};
  };
  struct allocation {
    explicit allocation(allocators::arena_block b) : block(std::move(b)) {
      if (block.size() > 0) block.pin();
    }
    allocation(allocation&&) noexcept = default;
    allocation& operator=(allocation&&) noexcept = default;
    allocation(const allocation&) = delete;
    allocation& operator=(const allocation&) = delete;
    ~allocation() {
      if (block && block.pinned()) block.unpin();
    }
    allocators::arena_block block;
  };
  static std::optional<allocation> try_allocate(rig& r, std::size_t bytes) {
    auto b = r.arena.try_allocate(bytes);
    if (!b) return std::nullopt;
    return allocation(std::move(*b));
  }
  static std::span<std::byte> bytes(const allocation& a) {
    return {static_cast<std::byte*>(a.block.data()), a.block.size()};
  }
};

using allocator_types = ::testing::Types<pinned_type, pool_type, arena_type>;

class allocator_type_names {
 public:
  template <typename T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, pinned_type>) return "pinned";
    if constexpr (std::is_same_v<T, pool_type>) return "pool";
    if constexpr (std::is_same_v<T, arena_type>) return "arena";
    return "unknown";
  }
};

}  // namespace zoe::testing
