#pragma once
// Check macros. The message is built only when the check fails, and ends with file:line so a
// report from the field points at the code.

#include <cerrno>

#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::detail {
[[noreturn]] void throw_errno(int os_errno, const std::string& what, const char* file, int line);
}  // namespace zoe::detail

#define ZOE_STRINGIFY_DETAIL(x) #x
#define ZOE_STRINGIFY(x) ZOE_STRINGIFY_DETAIL(x)
#define ZOE_WHERE " [" __FILE__ ":" ZOE_STRINGIFY(__LINE__) "]"

/// Throws `error_type(message...)` unless `cond` holds.
#define ZOE_CHECK(cond, error_type, ...)                    \
  do {                                                      \
    if (!(cond)) [[unlikely]] {                             \
      throw error_type(::zoe::str(__VA_ARGS__, ZOE_WHERE)); \
    }                                                       \
  } while (0)

/// Throws usage_error naming the violated precondition unless `cond` holds.
#define ZOE_EXPECTS(cond, ...) ZOE_CHECK(cond, ::zoe::usage_error, __VA_ARGS__)

/// Throws internal_error: an invariant of zoe itself did not hold.
#define ZOE_ASSERT(cond) ZOE_CHECK(cond, ::zoe::internal_error, "internal invariant failed: " #cond)

/// For POSIX calls that return -1 and set errno: throws io_error with the errno text.
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
