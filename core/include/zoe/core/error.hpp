#pragma once
// The zoe exception hierarchy. Every error zoe raises derives from zoe::error and carries a
// category; there is one class per C status code, so the C API only translates.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace zoe {

/// The C status each error class maps to. Values are stable: they are the C API's codes.
enum class error_category : int {
  internal = 1,  ///< a bug in zoe: an invariant did not hold
  usage = 2,     ///< the caller passed something invalid (argument, flag, state)
  config = 3,    ///< a configuration key has a wrong type, value or combination
  io = 4,        ///< a file operation failed (path, offset, errno)
  corrupt = 5,   ///< stored data failed its integrity check (checksum, stamp, size)
  memory = 6,    ///< out of memory in some tier (device budget, pinned host, arena)
  device = 7,    ///< the compute device failed (driver, launch, stream)
  comm = 8,      ///< a collective or the communicator failed
  timeout = 9,   ///< a bounded wait ran out (e.g. acquiring a pool buffer)
};

/// Returns the lower-case name of a category ("io", "config", ...). Never throws.
[[nodiscard]] std::string_view category_name(error_category c) noexcept;

/// Base of every zoe exception. The message names the object concerned (path and offset,
/// config key, partition) and, when raised by a check macro, the source location.
class error : public std::runtime_error {
 public:
  error(error_category category, const std::string& message) : std::runtime_error(message), category_(category) {}
  [[nodiscard]] error_category category() const noexcept { return category_; }

 private:
  error_category category_;
};

class internal_error : public error {
 public:
  explicit internal_error(const std::string& m) : error(error_category::internal, m) {}
};
class usage_error : public error {
 public:
  explicit usage_error(const std::string& m) : error(error_category::usage, m) {}
};
class config_error : public error {
 public:
  explicit config_error(const std::string& m) : error(error_category::config, m) {}
};
class memory_error : public error {
 public:
  explicit memory_error(const std::string& m) : error(error_category::memory, m) {}
};
class device_error : public error {
 public:
  explicit device_error(const std::string& m) : error(error_category::device, m) {}
};
class comm_error : public error {
 public:
  explicit comm_error(const std::string& m) : error(error_category::comm, m) {}
};
class timeout_error : public error {
 public:
  explicit timeout_error(const std::string& m) : error(error_category::timeout, m) {}
};

/// A failed file operation. Keeps the OS errno (0 when the failure is not an OS error, such as
/// an unexpected end of file).
class io_error : public error {
 public:
  io_error(const std::string& m, int os_errno) : error(error_category::io, m), errno_(os_errno) {}
  [[nodiscard]] int os_errno() const noexcept { return errno_; }

 private:
  int errno_;
};

/// Stored data that failed an integrity check; the message names the file and offset.
class corruption_error : public error {
 public:
  explicit corruption_error(const std::string& m) : error(error_category::corrupt, m) {}
};

/// strerror_r as a std::string, thread-safe.
[[nodiscard]] std::string errno_text(int os_errno);

}  // namespace zoe
