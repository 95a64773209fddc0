#pragma once
// The file operations a checkpoint save and load use, behind one interface, as leveldb's Env: each
// method states its errors and thread-safety, and a test wraps the real one to fail an operation
// or to drop every write not yet made durable, as a crash would (tests/engine/fault_checkpoint_fs).
//
// What is durable, and when (the contract the save's sequence relies on, and what the test's
// crash model drops):
//  - bytes appended to a file are durable once that file's sync() returns;
//  - a name created, renamed, exchanged or removed in a folder is durable once that folder's
//    sync_directory() returns (a crash before then may undo it);
//  - a rename over an existing name, and an exchange, are atomic: after a crash the name holds
//    either the old file or the new one, never neither.
// Paths are used as given (absolute or relative to the working directory). A symbolic link at
// `path` is followed by create, open, create_directory, sync_directory and list; exists, is_link,
// rename, exchange and remove act on the link itself (the save relies on that to never touch what
// a link in its root names).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace zoe::engine {

/// A file being written from its start, append only. Not thread-safe: one thread at a time. Once a
/// call has thrown, the file's contents are undefined and every later call may throw again.
class checkpoint_writer {
 public:
  virtual ~checkpoint_writer() = default;
  checkpoint_writer() = default;
  checkpoint_writer(const checkpoint_writer&) = delete;
  checkpoint_writer& operator=(const checkpoint_writer&) = delete;

  /// Appends `data`. It is copied before the call returns (the caller may reuse it at once) and
  /// may reach the file later, in the background. Throws io_error naming the path and the file
  /// offset when a write (this one, or an earlier one that failed in the background) fails.
  virtual void append(std::span<const std::byte> data) = 0;
  /// Waits until every appended byte is in the file, then makes them durable (fdatasync). Throws
  /// io_error naming the path (and the offset for a failed write).
  virtual void sync() = 0;
  /// Bytes appended so far. Never throws.
  [[nodiscard]] virtual std::uint64_t size() const noexcept = 0;
};

/// A file opened for reading. Not thread-safe: one thread at a time.
class checkpoint_reader {
 public:
  virtual ~checkpoint_reader() = default;
  checkpoint_reader() = default;
  checkpoint_reader(const checkpoint_reader&) = delete;
  checkpoint_reader& operator=(const checkpoint_reader&) = delete;

  /// The file's length when it was opened. Never throws.
  [[nodiscard]] virtual std::uint64_t size() const noexcept = 0;
  /// Reads exactly out.size() bytes at `offset` into `out` (any address). Throws io_error naming
  /// the path and offset when the read fails or the range passes the end of the file.
  virtual void read(std::uint64_t offset, std::span<std::byte> out) = 0;
};

/// Every method is thread-safe (calls on different paths may run at once); the writers and readers
/// it returns are each for one thread at a time. Every error is an io_error naming the path(s) and
/// the OS reason.
class checkpoint_fs {
 public:
  virtual ~checkpoint_fs() = default;
  checkpoint_fs() = default;
  checkpoint_fs(const checkpoint_fs&) = delete;
  checkpoint_fs& operator=(const checkpoint_fs&) = delete;

  /// Creates `path` empty for writing (truncating a file there). Throws io_error when it cannot.
  [[nodiscard]] virtual std::unique_ptr<checkpoint_writer> create(const std::filesystem::path& path) = 0;
  /// Opens the existing file `path` for reading. Throws io_error when it is missing or cannot be
  /// opened (os_errno ENOENT when missing).
  [[nodiscard]] virtual std::unique_ptr<checkpoint_reader> open(const std::filesystem::path& path) = 0;
  /// Whether something (file, folder, or a symbolic link, not followed: a dangling one counts) is
  /// at `path`. Throws io_error when that cannot be told (a folder on the way that cannot be
  /// searched).
  [[nodiscard]] virtual bool exists(const std::filesystem::path& path) = 0;
  /// Whether `path` is a symbolic link (not followed); false when nothing is there. Throws
  /// io_error when that cannot be told.
  [[nodiscard]] virtual bool is_link(const std::filesystem::path& path) = 0;
  /// Creates the folder `path` (its parent must exist); nothing when a folder is already there.
  /// Throws io_error when it cannot, or when a file is there.
  virtual void create_directory(const std::filesystem::path& path) = 0;
  /// Makes the names in folder `path` durable (fsync of the folder). Throws io_error when it cannot.
  virtual void sync_directory(const std::filesystem::path& path) = 0;
  /// Renames `from` to `to`, atomically replacing a file at `to`. Throws io_error when it cannot.
  virtual void rename(const std::filesystem::path& from, const std::filesystem::path& to) = 0;
  /// Swaps what `a` and `b` name (both must exist; either may be a folder), atomically. Throws
  /// io_error when it cannot (also where the file system cannot exchange names).
  virtual void exchange(const std::filesystem::path& a, const std::filesystem::path& b) = 0;
  /// Removes the file, symbolic link (itself, not what it names) or empty folder `path`; nothing
  /// when it is missing. Throws io_error when it cannot.
  virtual void remove(const std::filesystem::path& path) = 0;
  /// The names in folder `path` (not "." or ".."), in no particular order. Throws io_error when it
  /// cannot be read.
  [[nodiscard]] virtual std::vector<std::string> list(const std::filesystem::path& path) = 0;

  /// The real file system with default options (shared; thread-safe as above).
  [[nodiscard]] static checkpoint_fs& posix();
};

/// How the real file system writes and reads large files.
struct posix_checkpoint_fs_options {
  std::string backend = "auto";  ///< the I/O engine backend (io/engine_factory.hpp)
  /// Bytes per write (a multiple of 4 KiB): appends are gathered into aligned buffers of this
  /// size, each written as soon as it is full.
  std::size_t block_size = std::size_t{1} << 20;
  std::size_t queue_depth = 8;    ///< the I/O engine's queue depth
  std::size_t write_buffers = 4;  ///< buffers of block_size per writer: writes in flight at most
  bool direct = true;             ///< O_DIRECT where the folder takes it (buffered otherwise)
  /// Throws usage_error naming the option that is out of range.
  void validate() const;
};

/// The real file system: large files written and read through zoe's I/O engine (one engine per
/// writer or reader, on the thread that uses it), O_DIRECT where the folder allows it. Throws
/// usage_error for invalid options.
[[nodiscard]] std::unique_ptr<checkpoint_fs> make_posix_checkpoint_fs(posix_checkpoint_fs_options options = {});

}  // namespace zoe::engine
