#pragma once
// Where the I/O layer's own O_DIRECT memory comes from: the engine's bounce buffers for unaligned
// heads and tails, and the swap channel's scratch for reading partial chunks whole to verify them.
// By default that is the heap; a caller that keeps pinned memory (a buffer pool) lends its own
// instead, so no pinned budget is spent twice and nothing is allocated on the I/O path. io/ knows
// only this interface: the engine adapts its allocators to it.

#include <cstddef>
#include <memory>
#include <span>

namespace zoe::io {

/// Thread-safety: one provider may serve several engines and channels, each driven by its own
/// thread, so lend() and take_back() must be safe to call from several threads at once.
class bounce_memory {
 public:
  virtual ~bounce_memory() = default;
  bounce_memory() = default;
  bounce_memory(const bounce_memory&) = delete;
  bounce_memory& operator=(const bounce_memory&) = delete;

  /// Lends at least `bytes` bytes starting at a multiple of `alignment` (a power of two: 4096,
  /// what O_DIRECT asks), until take_back(). Must not block: it is called inside poll(). Returns
  /// an empty span when it has none to lend now; the request that needed it then completes as
  /// failed (ENOMEM, naming the size). Never throws.
  [[nodiscard]] virtual std::span<std::byte> lend(std::size_t bytes, std::size_t alignment) noexcept = 0;
  /// Takes back a span lend() returned, unchanged. Never throws.
  virtual void take_back(std::span<std::byte> memory) noexcept = 0;
};

/// The heap (aligned_alloc), keeping up to `keep` returned spans for the next lend of the same
/// size. What the engine (keep: every buffer it ever needed at once) and the swap channel (keep:
/// one) use when the caller lends nothing.
[[nodiscard]] std::shared_ptr<bounce_memory> heap_bounce_memory(std::size_t keep);

}  // namespace zoe::io
