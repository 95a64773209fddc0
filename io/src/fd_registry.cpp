#include "fd_registry.hpp"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace zoe::io::detail {
namespace {

// Opens and closes are rare next to I/O, and lookups happen only when a backend registers a new
// file or after a close, so one mutex is enough.
struct registry {
  std::mutex mutex;
  std::unordered_map<int, std::uint64_t> identity;
  std::uint64_t next_identity = 1;
  std::atomic<std::uint64_t> closes{0};
};

registry& the_registry() {
  static registry r;
  return r;
}

}  // namespace

std::uint64_t open_file_identity(int fd) {
  registry& r = the_registry();
  const std::lock_guard lock(r.mutex);
  const auto it = r.identity.find(fd);
  return it == r.identity.end() ? 0 : it->second;
}

std::uint64_t file_closes_so_far() noexcept { return the_registry().closes.load(std::memory_order_acquire); }

void note_file_opened(int fd) {
  registry& r = the_registry();
  const std::lock_guard lock(r.mutex);
  r.identity[fd] = r.next_identity++;
}

void note_file_closing(int fd) noexcept {
  registry& r = the_registry();
  {
    const std::lock_guard lock(r.mutex);
    r.identity.erase(fd);
  }
  r.closes.fetch_add(1, std::memory_order_release);
}

}  // namespace zoe::io::detail
