#pragma once
// Check macros. The message is built only when the check fails. Where it was raised (file:line)
// ends the message of an internal error only: that is zoe's own bug, and a report from the field
// must point at the code. Every other error is about what the caller gave (a config key, a value,
// a file, a size) and is read by the user, to whom a path on the build machine means nothing; its
// location goes to the debug log (ZOE_LOG_LEVEL=debug) instead.

#include <cerrno>
#include <string>
#include <string_view>
#include <type_traits>

#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::detail {
[[noreturn]] void throw_errno(int os_errno, const std::string& what, const char* file, int line);

/// Logs "<where>: <message>" at debug level: the source location of an error raised without it.
/// Never throws.
void log_raise_site(std::string_view where, std::string_view message) noexcept;

/// Throws `ErrorType(message)`, with `where` (" [file:line]") appended for an internal error and
/// logged at debug level for any other.
template <typename ErrorType>
[[noreturn]] void raise_checked(std::string message, std::string_view where) {
  if constexpr (std::is_base_of_v<internal_error, ErrorType>) {
    message.append(where);
  } else {
    log_raise_site(where, message);
  }
  throw ErrorType(message);
}
}  // namespace zoe::detail

#define ZOE_STRINGIFY_DETAIL(x) #x
#define ZOE_STRINGIFY(x) ZOE_STRINGIFY_DETAIL(x)
#define ZOE_WHERE " [" __FILE__ ":" ZOE_STRINGIFY(__LINE__) "]"

/// Throws `error_type(message...)` unless `cond` holds (the location as raise_checked says).
#define ZOE_CHECK(cond, error_type, ...)                                            \
  do {                                                                              \
    if (!(cond)) [[unlikely]] {                                                     \
      ::zoe::detail::raise_checked<error_type>(::zoe::str(__VA_ARGS__), ZOE_WHERE); \
    }                                                                               \
  } while (0)

/// Throws usage_error naming the violated precondition unless `cond` holds.
#define ZOE_EXPECTS(cond, ...) ZOE_CHECK(cond, ::zoe::usage_error, __VA_ARGS__)

/// Throws internal_error: an invariant of zoe itself did not hold.
#define ZOE_ASSERT(cond) ZOE_CHECK(cond, ::zoe::internal_error, "internal invariant failed: " #cond)

/// For POSIX calls that return -1 and set errno: throws io_error with the errno text (the
/// location in the debug log: an I/O error names the user's file, not zoe's).
#define ZOE_CHECK_ERRNO(call, ...)                                                    \
  do {                                                                                \
    if ((call) == -1) [[unlikely]] {                                                  \
      ::zoe::detail::throw_errno(errno, ::zoe::str(__VA_ARGS__), __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)

/// For calls that return -errno on failure (liburing, libaio): throws io_error with the errno
/// text when `call` is negative. `call` is evaluated once.
#define ZOE_CHECK_NEG_ERRNO(call, ...)                                                                               \
  do {                                                                                                               \
    if (const auto zoe_check_result_ = (call); zoe_check_result_ < 0) [[unlikely]] {                                 \
      ::zoe::detail::throw_errno(static_cast<int>(-zoe_check_result_), ::zoe::str(__VA_ARGS__), __FILE__, __LINE__); \
    }                                                                                                                \
  } while (0)
