#pragma once
// Logging to stderr. The level comes from ZOE_LOG_LEVEL (error, warn, info, debug; default
// warn) or set_log_level(). Every function here is thread-safe and never throws.

#include <string>
#include <string_view>

#include "zoe/core/str.hpp"

namespace zoe::log {

enum class level : int { error = 0, warn = 1, info = 2, debug = 3 };

/// Sets the process-wide threshold; messages above it are dropped.
void set_level(level l) noexcept;
[[nodiscard]] level current_level() noexcept;
[[nodiscard]] inline bool enabled(level l) noexcept { return static_cast<int>(l) <= static_cast<int>(current_level()); }

/// Writes one line "zoe <level>: message" to stderr, atomically with respect to other log lines.
void write(level l, std::string_view message) noexcept;

/// Writes a warning only the first time `key` is seen in this process (e.g. "one warning naming
/// the path" for a fallback that would otherwise repeat per file). Returns true if it was written.
bool warn_once(std::string_view key, std::string_view message) noexcept;

template <typename... Args>
void error(Args&&... args) {
  if (enabled(level::error)) write(level::error, str(std::forward<Args>(args)...));
}
template <typename... Args>
void warn(Args&&... args) {
  if (enabled(level::warn)) write(level::warn, str(std::forward<Args>(args)...));
}
template <typename... Args>
void info(Args&&... args) {
  if (enabled(level::info)) write(level::info, str(std::forward<Args>(args)...));
}
template <typename... Args>
void debug(Args&&... args) {
  if (enabled(level::debug)) write(level::debug, str(std::forward<Args>(args)...));
}

}  // namespace zoe::log
