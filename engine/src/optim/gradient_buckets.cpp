#include "gradient_buckets.hpp"

#include <algorithm>
#include <utility>

namespace zoe::engine::detail {

gradient_buckets::gradient_buckets(std::vector<std::byte*> memory, std::uint64_t bytes) : bytes_(bytes) {
  buckets_.reserve(memory.size());
  for (std::byte* m : memory) buckets_.push_back({.memory = m});
}

std::optional<gradient_buckets::lease> gradient_buckets::try_take(std::uint64_t bytes) {
  if (bytes > bytes_) return std::nullopt;
  // Keep filling the current bucket while the module fits, so modules reduced together share one;
  // otherwise it is complete (sealed), and the module goes to the first empty one (with
  // overlap_comm, the other bucket).
  if (const entry& current = buckets_[filling_]; current.sealed || current.used + bytes > bytes_) seal();
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    const std::size_t b = (filling_ + k) % buckets_.size();
    entry& x = buckets_[b];
    if (x.sealed || x.used + bytes > bytes_ || (k != 0 && x.live != 0)) continue;
    filling_ = b;
    lease out{.bucket = b, .memory = x.memory + x.used};
    x.used += bytes;
    ++x.live;
    ++x.unreduced;
    return out;
  }
  return std::nullopt;
}

void gradient_buckets::seal() {
  entry& x = buckets_[filling_];
  if (x.sealed || x.used == 0) return;
  sealed_.push_back(filling_);
  x.sealed = true;
}

void gradient_buckets::reduced(std::size_t index, std::size_t module) {
  entry& x = buckets_[index];
  x.reduced.push_back(module);
  if (x.unreduced > 0) --x.unreduced;
}

void gradient_buckets::set_aside(std::size_t index) noexcept {
  entry& x = buckets_[index];
  if (x.unreduced > 0) --x.unreduced;
}

void gradient_buckets::dropped(std::size_t index) noexcept {
  set_aside(index);
  release(index);
}

std::vector<gradient_buckets::batch> gradient_buckets::take_ready() {
  std::vector<batch> out;
  while (!sealed_.empty() && buckets_[sealed_.front()].unreduced == 0) {
    const std::size_t b = sealed_.front();
    sealed_.pop_front();
    out.push_back({.bucket = b, .modules = std::exchange(buckets_[b].reduced, {})});
  }
  return out;
}

void gradient_buckets::release(std::size_t index, std::size_t modules) noexcept {
  entry& x = buckets_[index];
  x.live -= std::min(x.live, modules);
  if (x.live != 0) return;
  // Empty: it starts over. A sealed bucket emptied before it was handed out (its modules dropped)
  // has nothing left to reduce.
  x.used = 0;
  x.unreduced = 0;
  x.reduced.clear();
  if (x.sealed) {
    const auto it = std::find(sealed_.begin(), sealed_.end(), index);
    if (it != sealed_.end()) sealed_.erase(it);
  }
  x.sealed = false;
}

}  // namespace zoe::engine::detail
