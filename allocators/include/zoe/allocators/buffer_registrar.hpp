#pragma once
// How a buffer pool hands its buffers to whoever wants to register them once (the I/O engine's
// io_uring fixed buffers, a NIC). allocators/ and io/ do not include each other: the engine
// implements this interface over the I/O engine and passes it to buffer_pool::register_with().

#include <cstddef>
#include <span>

namespace zoe::allocators {

class buffer_registrar {
 public:
  virtual ~buffer_registrar() = default;
  /// Called once per pool with every buffer, in index order: buffer i is the memory of a lease
  /// whose index() is i, so a fixed-buffer API can be addressed by that index. The buffers stay
  /// valid until the pool is destroyed. May throw; the pool then counts as not registered.
  virtual void register_buffers(std::span<const std::span<std::byte>> buffers) = 0;
};

}  // namespace zoe::allocators
