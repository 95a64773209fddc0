#pragma once
// What callers hand the I/O engine and what they get back.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "zoe/core/error.hpp"

namespace zoe::io {

class file;

enum class io_op : std::uint8_t { read, write };

[[nodiscard]] constexpr const char* op_name(io_op op) noexcept { return op == io_op::read ? "read" : "write"; }

/// One read or write of a host memory span at a file offset. Any length, any offset, any buffer
/// address: alignment for O_DIRECT is the engine's job. The file and the buffer must stay alive
/// and untouched (for reads) until the request's completion has been returned.
struct io_request {
  io_op op = io_op::read;
  file* target = nullptr;
  std::span<std::byte> buffer;  ///< read into / written from; a write never modifies it
  std::uint64_t offset = 0;
  std::uint64_t user_data = 0;  ///< returned unchanged in the completion
};

/// The outcome of one io_request. On failure `message` names the operation, file, offset, length
/// and cause; the buffer of a failed write is intact, the buffer of a failed read is undefined.
struct io_completion {
  std::uint64_t user_data = 0;
  std::uint64_t bytes = 0;  ///< bytes transferred: the request's length on success
  int os_errno = 0;         ///< the OS error, or 0 (also 0 for an unexpected end of file)
  bool failed = false;
  bool corrupt = false;  ///< the data read failed its integrity check (swap store)
  std::string message;

  [[nodiscard]] bool ok() const noexcept { return !failed; }
  /// Throws corruption_error or io_error(message, os_errno) if the request failed.
  void throw_if_failed() const {
    if (corrupt) throw corruption_error(message);
    if (failed) throw io_error(message, os_errno);
  }
};

}  // namespace zoe::io
