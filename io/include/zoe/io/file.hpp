#pragma once
// An open file for the I/O engine: O_DIRECT when the file system allows it (buffered with one
// warning naming the path when it refuses), the alignment O_DIRECT needs there, the length the
// file is meant to have, and locks on block ranges for read-modify-write of shared blocks.

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

namespace zoe::io {

/// Told that a block range of a file was unlocked (see file::try_lock_range). Called on the
/// unlocking thread, outside the file's lock; must not block.
class range_unlock_listener {
 public:
  virtual void range_unlocked() noexcept = 0;

 protected:
  range_unlock_listener() = default;
  ~range_unlock_listener() = default;
  range_unlock_listener(const range_unlock_listener&) = default;
  range_unlock_listener& operator=(const range_unlock_listener&) = default;
};

enum class open_mode { read_only, read_write };

struct file_options {
  bool create = false;     ///< create the file if missing (with `permissions`)
  bool truncate = false;   ///< start empty
  bool direct = true;      ///< ask for O_DIRECT; falls back to buffered where refused
  bool exclusive = false;  ///< with create: fail if it exists (O_EXCL)
  bool no_follow = false;  ///< refuse a symbolic link at the last component (O_NOFOLLOW)
  /// Leave no name behind: an O_TMPFILE in the path's directory where the file system supports it,
  /// else created exclusively without following links and unlinked at once. path() then names
  /// the file for messages only.
  bool unlinked = false;
  mode_t permissions = 0600;
  /// When >= 0, a directory descriptor in which path's last component is opened (openat), so that
  /// nothing renamed or linked into the path above it can redirect the file; path() still names
  /// the whole path in messages. Only borrowed: it must stay open while the constructor runs.
  int directory_fd = -1;
};

/// Move-only owner of a file descriptor. Thread-safe: several engines may use one file at once.
class file {
 public:
  /// Opens `path`. Throws io_error naming the path and the OS reason when it cannot be opened,
  /// is a directory, or is not a regular file or block device.
  file(std::filesystem::path path, open_mode mode, file_options options = {});
  ~file();
  file(const file&) = delete;
  file& operator=(const file&) = delete;

  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] bool writable() const noexcept { return mode_ == open_mode::read_write; }
  /// True only if O_DIRECT is really in use.
  [[nodiscard]] bool direct() const noexcept { return direct_; }
  /// Alignment of file offsets and lengths for raw I/O (1 when buffered).
  [[nodiscard]] std::size_t offset_alignment() const noexcept { return offset_align_; }
  /// Alignment of buffer addresses for raw I/O (1 when buffered).
  [[nodiscard]] std::size_t memory_alignment() const noexcept { return mem_align_; }

  /// The length the file has once all writes submitted so far land.
  [[nodiscard]] std::uint64_t logical_size() const;
  /// Raises the logical size to the file's current length if that is larger (another writer grew
  /// it), unless one of our own aligned writes of a partial last block is in flight: the length
  /// then includes bytes that are about to be cut back. Throws io_error naming the path.
  void refresh_logical_size();
  /// Records that a write reaching `end` was submitted.
  void note_write_end(std::uint64_t end);
  /// Marks an aligned write of a partial last block (which makes the file longer than asked) as
  /// in flight; pair with end_extension.
  void begin_extension();
  /// Cuts the file back to its logical size and ends the mark (also when it throws). Throws
  /// io_error naming the path.
  void end_extension();
  /// Sets the length (ftruncate) and the logical size. Throws io_error naming the path.
  void resize(std::uint64_t length);
  /// Reserves `length` bytes on the device (fallocate; ftruncate where the file system has no
  /// fallocate) and sets the logical size. Throws io_error naming the path, ENOSPC included.
  void preallocate(std::uint64_t length);
  /// fdatasync. Throws io_error naming the path.
  void sync();

  /// Block-range locks held by read-modify-write of partial blocks, so two writes that share a
  /// block never overwrite each other's bytes. [begin, end) in file offsets.
  [[nodiscard]] bool try_lock_range(std::uint64_t begin, std::uint64_t end);
  /// Like try_lock_range; when it fails, `listener` (if still alive then) is told once, at the
  /// next unlock_range of any range of this file, so an engine polled from an event loop learns
  /// when to try again. Listing one listener twice before that unlock tells it once.
  [[nodiscard]] bool try_lock_range(std::uint64_t begin, std::uint64_t end,
                                    const std::weak_ptr<range_unlock_listener>& listener);
  void unlock_range(std::uint64_t begin, std::uint64_t end);
  /// Blocks until some range is unlocked (or a short while passes).
  void wait_for_unlock();

 private:
  std::filesystem::path path_;
  open_mode mode_;
  int fd_ = -1;
  bool direct_ = false;
  std::size_t offset_align_ = 1;
  std::size_t mem_align_ = 1;

  mutable std::mutex mutex_;
  std::condition_variable unlocked_;
  std::uint64_t logical_size_ = 0;
  int extensions_in_flight_ = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> locked_;
  std::vector<std::weak_ptr<range_unlock_listener>> unlock_listeners_;
};

}  // namespace zoe::io
