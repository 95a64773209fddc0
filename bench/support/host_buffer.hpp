#pragma once
// Page-aligned, locked, pre-faulted host memory for benchmark buffers, allocated before timing so
// no page fault or lock lands inside a timed region.

#include <cstddef>
#include <span>

namespace zoe::bench {

class host_buffer {
 public:
  /// Maps `bytes` (rounded up to pages), asks for transparent huge pages, locks it (one warning if the memlock limit refuses) and
  /// touches every page. Throws memory_error naming the size when the mapping fails.
  explicit host_buffer(std::size_t bytes);
  ~host_buffer();
  host_buffer(const host_buffer&) = delete;
  host_buffer& operator=(const host_buffer&) = delete;

  [[nodiscard]] std::span<std::byte> span() const noexcept { return {data_, bytes_}; }
  [[nodiscard]] bool locked() const noexcept { return locked_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t mapped_ = 0;
  bool locked_ = false;
};

}  // namespace zoe::bench
