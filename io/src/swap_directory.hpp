#pragma once
// The per-process folder a swap store keeps its files in: created inside a user's swap path,
// locked for the life of the process, and reaped by a later process once that lock is free (its
// owner died), so a killed run leaves nothing behind for long.

#include <filesystem>
#include <memory>

#include "zoe/io/file.hpp"

namespace zoe::io::detail {

class swap_directory {
 public:
  /// Checks `parent` (exists, is a directory, is writable; warns if it is tmpfs or ramfs), reaps
  /// stale zoe-swap-* folders there (those whose lock no live process holds), then creates and
  /// locks a fresh one. Throws io_error naming
  /// `parent` on any refusal.
  explicit swap_directory(const std::filesystem::path& parent);
  /// Removes the folder (its swap files are already unlinked). Never throws.
  ~swap_directory();
  swap_directory(const swap_directory&) = delete;
  swap_directory& operator=(const swap_directory&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

  /// Creates an unlinked swap file (O_TMPFILE where the file system has it, else created 0600
  /// with O_NOFOLLOW | O_EXCL and unlinked at once). `index` only names it in messages.
  [[nodiscard]] std::unique_ptr<file> create_swap_file(int index, bool direct) const;

 private:
  std::filesystem::path path_;
  int lock_fd_ = -1;
};

}  // namespace zoe::io::detail
