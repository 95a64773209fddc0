#pragma once
// The device buckets backward writes module gradients into (gradient_path.hpp): each bucket hands
// out its memory front to back and starts over once every module in it is done. A module goes to
// the bucket backward is filling while it fits, else to an empty one; with none, it waits.
// Not thread-safe: the gradient path holds its lock around every call.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace zoe::engine::detail {

class gradient_buckets {
 public:
  /// `memory[i]` is bucket i's device memory of `bytes` bytes each.
  gradient_buckets(std::vector<std::byte*> memory, std::uint64_t bytes);

  struct lease {
    std::size_t bucket = 0;
    std::byte* memory = nullptr;
  };
  /// `bytes` (at most bucket_bytes()) from the bucket being filled, or from an empty one; nullopt
  /// when none has room (wait for release()). Never throws beyond allocation.
  [[nodiscard]] std::optional<lease> try_take(std::uint64_t bytes) noexcept;
  /// A module of bucket `index` is done: once none is left, the bucket is empty again.
  void release(std::size_t index) noexcept;

  [[nodiscard]] std::uint64_t bucket_bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::size_t count() const noexcept { return buckets_.size(); }
  [[nodiscard]] std::byte* memory(std::size_t index) const noexcept { return buckets_[index].memory; }

 private:
  struct entry {
    std::byte* memory = nullptr;
    std::uint64_t used = 0;  ///< bytes handed out since it was last empty
    std::size_t live = 0;    ///< modules in it not yet done
  };
  std::vector<entry> buckets_;
  std::uint64_t bytes_;
  std::size_t filling_ = 0;
};

}  // namespace zoe::engine::detail
