#include "zoe/core/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

namespace zoe::log {
namespace {

level level_from_env() noexcept {
  const char* v = std::getenv("ZOE_LOG_LEVEL");
  if (v == nullptr) return level::warn;
  const std::string_view s(v);
  if (s == "error") return level::error;
  if (s == "info") return level::info;
  if (s == "debug") return level::debug;
  return level::warn;
}

std::atomic<int>& threshold() noexcept {
  static std::atomic<int> t{static_cast<int>(level_from_env())};
  return t;
}

std::string_view name(level l) noexcept {
  switch (l) {
    case level::error: return "error";
    case level::warn: return "warning";
    case level::info: return "info";
    case level::debug: return "debug";
  }
  return "?";
}

}  // namespace

void set_level(level l) noexcept { threshold().store(static_cast<int>(l)); }

level current_level() noexcept { return static_cast<level>(threshold().load(std::memory_order_relaxed)); }

void write(level l, std::string_view message) noexcept {
  try {
    std::string line = "zoe ";
    line.append(name(l)).append(": ").append(message).append("\n");
    // One write(2) per line keeps lines from different threads and processes whole.
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(STDERR_FILENO, p, left);
      if (n < 0 && errno == EINTR) continue;  // a signal came before anything was written
      if (n <= 0) break;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): logging must never throw into its caller
  }
}

bool warn_once(std::string_view key, std::string_view message) noexcept {
  try {
    static std::mutex mutex;
    static std::set<std::string, std::less<>> seen;
    {
      const std::lock_guard lock(mutex);
      if (!seen.emplace(key).second) return false;
    }
    if (enabled(level::warn)) write(level::warn, message);
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace zoe::log
