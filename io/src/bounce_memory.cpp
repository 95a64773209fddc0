#include "zoe/io/bounce_memory.hpp"

#include <cstdint>
#include <cstdlib>
#include <new>
#include <mutex>
#include <vector>

#include "zoe/core/units.hpp"

namespace zoe::io {
namespace {

class heap_memory final : public bounce_memory {
 public:
  explicit heap_memory(std::size_t keep) : keep_(keep) {}
  ~heap_memory() override {
    for (const auto span : kept_) std::free(span.data());
  }
  heap_memory(const heap_memory&) = delete;
  heap_memory& operator=(const heap_memory&) = delete;

  std::span<std::byte> lend(std::size_t bytes, std::size_t alignment) noexcept override {
    {
      const std::lock_guard lock(mutex_);
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->size() != bytes || reinterpret_cast<std::uintptr_t>(it->data()) % alignment != 0) continue;
        const std::span<std::byte> reused = *it;
        kept_.erase(it);
        return reused;
      }
    }
    auto* memory = static_cast<std::byte*>(std::aligned_alloc(alignment, align_up(bytes, alignment)));
    if (memory == nullptr) return {};
    return {memory, bytes};
  }

  void take_back(std::span<std::byte> memory) noexcept override {
    {
      const std::lock_guard lock(mutex_);
      if (kept_.size() < keep_) {
        try {
          kept_.push_back(memory);
          return;
        } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): no room to keep it: free it
        }
      }
    }
    std::free(memory.data());
  }

 private:
  std::size_t keep_;
  std::mutex mutex_;
  std::vector<std::span<std::byte>> kept_;
};

}  // namespace

std::shared_ptr<bounce_memory> heap_bounce_memory(std::size_t keep) { return std::make_shared<heap_memory>(keep); }

}  // namespace zoe::io
