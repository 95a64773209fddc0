#pragma once
// The per-process folder a swap store keeps its files in: created inside a user's swap path,
// locked (flock on the folder itself) for the life of the process, and reaped by a later process
// once that lock is free (its owner died), so a killed run leaves nothing behind for long.

#include <filesystem>
#include <memory>
#include <string>

#include "owned_fd.hpp"
#include "zoe/io/file.hpp"

namespace zoe::io::detail {

class swap_directory {
 public:
  /// Opens `parent` (it must exist, be a directory, readable and writable, and not be writable by
  /// everyone without the sticky bit; warns if it is tmpfs or ramfs), reaps this user's stale
  /// zoe-swap-* folders there (those whose lock no live process holds), then creates and locks a
  /// fresh one, named zoe-swap-<label>-<pid>-<random> (no "<label>-" when `label` is empty; the
  /// caller checked it is a safe name). Safe against any number of processes doing the same on one path at once: a
  /// folder is never reaped while its creator lives. Throws io_error naming `parent` (or the new
  /// folder) on any refusal. Thread-safe (several may be constructed at once).
  explicit swap_directory(const std::filesystem::path& parent, const std::string& label = {});
  /// Removes the folder, then drops its lock. Never throws.
  ~swap_directory();
  swap_directory(const swap_directory&) = delete;
  swap_directory& operator=(const swap_directory&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

  /// Creates an unlinked swap file inside the folder, resolved through the folder's descriptor
  /// so that nothing renamed or linked into the path can redirect it (O_TMPFILE | O_EXCL where
  /// the file system has it, else created 0600 with O_NOFOLLOW | O_EXCL and unlinked at once).
  /// `index` only names it in messages. Throws io_error naming the file. Thread-safe.
  [[nodiscard]] std::unique_ptr<file> create_swap_file(int index, bool direct) const;

 private:
  std::filesystem::path path_;
  owned_fd parent_;  // held so the folder is removed by name inside the parent it was made in
  owned_fd folder_;  // flocked exclusively: the mark of a live owner
};

}  // namespace zoe::io::detail
