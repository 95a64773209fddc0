#pragma once
// Which open file stands behind a file descriptor that an io::file owns. A backend that keeps
// its own reference to an open file (io_uring's registered files) must notice when the io::file
// closes and the number is reused for another file: otherwise an operation on the new file
// would land in the old one. io::file reports its opens and closes here; a backend asks.

#include <cstdint>

namespace zoe::io::detail {

/// A number that names the open file behind `fd` for as long as the io::file that owns it is
/// alive, never reused; 0 when no live io::file owns `fd`. Thread-safe.
[[nodiscard]] std::uint64_t open_file_identity(int fd);

/// Counts io::file closes in this process. A backend that cached identities only needs to look
/// again when this changed since it last looked (a close, then a reuse, both advance it).
/// Thread-safe; acquire ordering, so a caller that got the new file knows of the close.
[[nodiscard]] std::uint64_t file_closes_so_far() noexcept;

/// Called by io::file once `fd` is open and by its destructor before closing it.
void note_file_opened(int fd);
void note_file_closing(int fd) noexcept;

}  // namespace zoe::io::detail
