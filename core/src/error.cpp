#include "zoe/core/error.hpp"

#include <cstring>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"

namespace zoe {

std::string_view category_name(error_category c) noexcept {
  switch (c) {
    case error_category::internal: return "internal";
    case error_category::usage: return "usage";
    case error_category::config: return "config";
    case error_category::io: return "io";
    case error_category::corrupt: return "corrupt";
    case error_category::memory: return "memory";
    case error_category::device: return "device";
    case error_category::comm: return "comm";
    case error_category::timeout: return "timeout";
  }
  return "unknown";
}

std::string errno_text(int os_errno) {
  char buf[256];
  // GNU strerror_r returns the message pointer, which may or may not be buf.
  const char* text = strerror_r(os_errno, buf, sizeof buf);
  return str(text, " (errno ", os_errno, ")");
}

namespace detail {
void throw_errno(int os_errno, const std::string& what, const char* file, int line) {
  std::string message = str(what, ": ", errno_text(os_errno));
  log_raise_site(str(" [", file, ":", line, "]"), message);
  throw io_error(message, os_errno);
}

void log_raise_site(std::string_view where, std::string_view message) noexcept {
  // The location comes as " [file:line]", the form an internal error's message ends with.
  if (!where.empty() && where.front() == ' ') where.remove_prefix(1);
  try {
    log::debug("error raised at ", where, ": ", message);
  } catch (...) {  // NOLINT(bugprone-empty-catch): out of memory here; the error itself is still thrown
  }
}
}  // namespace detail

}  // namespace zoe
