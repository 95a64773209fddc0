#pragma once
// Helpers for the I/O suites: a scratch directory on a real disk, random bytes, aligned buffers,
// and scoped mounts of ramfs / a small ext4 image (skipped where mounting is refused).

#include <cstddef>
#include <cstdint>
#include <filesystem>

#include <gtest/gtest.h>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace zoe::testing {

/// How long a notification test waits on an fd: long enough never to run out on a working engine,
/// short enough that a broken one fails the test instead of hanging it.
inline constexpr int stuck_ms = 30'000;

/// Whether `fd` (an engine's or channel's notify_fd) is readable within `ms` milliseconds (0: right now).
bool readable(int fd, int ms);

/// Where the suites make their scratch folders: $ZOE_TEST_DIR, default /var/tmp (a real disk, not tmpfs).
std::filesystem::path scratch_parent();

/// A fresh directory under $ZOE_TEST_DIR (default /var/tmp, a real disk, not tmpfs), removed
/// with its contents on destruction.
class scratch_dir {
 public:
  scratch_dir();
  explicit scratch_dir(const std::filesystem::path& parent);
  ~scratch_dir();
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

/// A file system mounted on a fresh directory for the life of the object.
class scoped_mount {
 public:
  /// ramfs (refuses O_DIRECT); nullopt where mounting is refused (not root, no privilege).
  static std::unique_ptr<scoped_mount> ramfs();
  /// ext4 on a loop device backed by an image of `bytes`; nullptr where refused.
  static std::unique_ptr<scoped_mount> small_ext4(std::uint64_t bytes);
  ~scoped_mount();
  /// Makes the mount read-only; false where refused.
  [[nodiscard]] bool remount_read_only();
  scoped_mount(const scoped_mount&) = delete;
  scoped_mount& operator=(const scoped_mount&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return dir_.path(); }

 private:
  scoped_mount() = default;
  scratch_dir dir_;
  std::filesystem::path image_;
};

/// Random bytes from a seed (never zeros: a zero-filled file would hide a missed write).
[[nodiscard]] std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed);

/// Compares byte ranges and, on a mismatch, says where the first difference is and the sizes
/// (gtest's own vector printout is unreadable for megabytes).
[[nodiscard]] ::testing::AssertionResult same_bytes(std::span<const std::byte> actual,
                                                    std::span<const std::byte> expected);

/// A 4 KiB-aligned heap buffer.
class aligned_buffer {
 public:
  explicit aligned_buffer(std::size_t n);
  [[nodiscard]] std::span<std::byte> span() noexcept { return {data_.get(), size_}; }
  [[nodiscard]] std::byte* data() noexcept { return data_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  struct freer {
    void operator()(std::byte* p) const noexcept;
  };
  std::unique_ptr<std::byte, freer> data_;
  std::size_t size_;
};

/// The file's whole contents, read with plain buffered I/O (an independent check on the engine).
[[nodiscard]] std::vector<std::byte> read_whole_file(const std::filesystem::path& path);
/// Paths under /proc/self/fd of this process's open files inside `folder`, unlinked ones
/// included: how a test reaches a swap file that has no name, to read or damage it.
[[nodiscard]] std::vector<std::filesystem::path> open_files_under(const std::filesystem::path& folder);

/// pwrite / pread through a fresh buffered descriptor of `path`; throws on a short transfer.
void poke_file(const std::filesystem::path& path, std::uint64_t offset, std::span<const std::byte> bytes);
[[nodiscard]] std::vector<std::byte> peek_file(const std::filesystem::path& path, std::uint64_t offset, std::size_t n);

/// Runs `body` in a forked child whose seccomp filter makes each system call in `syscalls` fail
/// with `os_errno` (as a container runtime's filter does), and returns what `body` returned, or
/// "child failed: ..." if the child died or could not install the filter. nullopt where such
/// filters are not written for this architecture (x86-64 only), so the caller skips.
[[nodiscard]] std::optional<std::string> run_with_syscalls_failing(std::initializer_list<long> syscalls, int os_errno,
                                                                   const std::function<std::string()>& body);

/// Writes `bytes` to `path` with plain buffered I/O, replacing it.
void write_whole_file(const std::filesystem::path& path, std::span<const std::byte> bytes);

}  // namespace zoe::testing
