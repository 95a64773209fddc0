#include "gradient_buckets.hpp"

#include <utility>

namespace zoe::engine::detail {

gradient_buckets::gradient_buckets(std::vector<std::byte*> memory, std::uint64_t bytes) : bytes_(bytes) {
  buckets_.reserve(memory.size());
  for (std::byte* m : memory) buckets_.push_back({.memory = m, .used = 0, .live = 0});
}

std::optional<gradient_buckets::lease> gradient_buckets::try_take(std::uint64_t bytes) noexcept {
  if (bytes > bytes_) return std::nullopt;
  // Keep filling the current bucket while the module fits, so modules reduced together share one;
  // otherwise move on to the first empty one (with overlap_comm, the other bucket).
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    const std::size_t b = (filling_ + k) % buckets_.size();
    entry& x = buckets_[b];
    if (x.used + bytes > bytes_ || (k != 0 && x.live != 0)) continue;
    filling_ = b;
    lease out{.bucket = b, .memory = x.memory + x.used};
    x.used += bytes;
    ++x.live;
    return out;
  }
  return std::nullopt;
}

void gradient_buckets::release(std::size_t index) noexcept {
  entry& x = buckets_[index];
  if (x.live > 0) --x.live;
  if (x.live == 0) x.used = 0;  // empty: it starts over
}

}  // namespace zoe::engine::detail
