#pragma once
// Page-aligned heap memory for O_DIRECT transfers and checkpoint staging.

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <span>

#include "zoe/core/check.hpp"
#include "zoe/core/units.hpp"

namespace zoe::engine::detail {

/// Move-only owner of `bytes` (rounded up to the alignment) of memory starting at a multiple of
/// 4 KiB. Throws memory_error when the heap refuses.
class aligned_buffer {
 public:
  static constexpr std::size_t alignment = 4096;

  aligned_buffer() = default;
  explicit aligned_buffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    memory_.reset(
        static_cast<std::byte*>(std::aligned_alloc(alignment, rounded)));  // NOLINT(cppcoreguidelines-owning-memory)
    ZOE_CHECK(memory_ != nullptr, memory_error, "cannot allocate ", format_bytes(bytes),
              " of aligned host memory for a checkpoint");
  }

  [[nodiscard]] std::span<std::byte> span() const noexcept { return {memory_.get(), bytes_}; }
  [[nodiscard]] std::byte* data() const noexcept { return memory_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  struct free_deleter {
    void operator()(std::byte* p) const noexcept { std::free(p); }  // NOLINT(cppcoreguidelines-no-malloc)
  };
  std::unique_ptr<std::byte, free_deleter> memory_;
  std::size_t bytes_ = 0;
};

}  // namespace zoe::engine::detail
