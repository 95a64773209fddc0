#pragma once
// An error handed from one thread to another as plain data (category, errno, message), so the
// thread that reports it throws an exception object of its own. A std::exception_ptr shared across
// threads would do the same job, but its reference count lives in libstdc++, which the sanitizer
// builds do not instrument: the thread that frees the exception and the one still reading it in a
// catch block then look unordered to ThreadSanitizer.

#include <exception>
#include <string>

#include "zoe/core/error.hpp"

namespace zoe::engine {

struct carried_error {
  error_category category = error_category::internal;
  int os_errno = 0;  ///< for io errors
  std::string message;

  /// The error `e` holds: a zoe::error keeps its category (and an io_error its errno); any other
  /// exception becomes an internal error with its what(). Never throws beyond allocation.
  [[nodiscard]] static carried_error of(const std::exception_ptr& e);
  /// Throws a new exception of the class of `category` (io_error with the errno, corruption_error,
  /// usage_error, ...) with the message.
  [[noreturn]] void raise() const;
};

}  // namespace zoe::engine
