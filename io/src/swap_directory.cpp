#include "swap_directory.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/io/file_system.hpp"

namespace zoe::io::detail {
namespace {

constexpr std::string_view prefix = "zoe-swap-";
constexpr const char* lock_name = "lock";

void check_parent(const std::filesystem::path& parent) {
  std::error_code ec;
  const auto st = std::filesystem::status(parent, ec);
  if (!std::filesystem::exists(st)) {
    throw io_error(str("swap path '", parent.string(), "' does not exist"), ENOENT);
  }
  if (!std::filesystem::is_directory(st)) {
    throw io_error(str("swap path '", parent.string(), "' is not a directory"), ENOTDIR);
  }
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    throw io_error(str("swap path '", parent.string(), "' is not writable: ", errno_text(errno)), errno);
  }
  if (const auto memory = memory_file_system(parent)) {
    log::warn_once(str("swap.memfs:", parent.string()),
                   str("swap path '", parent.string(), "' is on ", *memory,
                       ": that is memory, not a drive"));
  }
}

// Holds an exclusive flock on the folder's lock file; returns -1 if someone else holds it.
int try_lock(const std::filesystem::path& lock_path, bool create) {
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT | O_EXCL : 0), 0600);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Removes zoe-swap-* folders under `parent` whose lock no live process holds.
void reap_stale(const std::filesystem::path& parent) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix) || !entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    const int fd = try_lock(entry.path() / lock_name, false);
    // A folder without a lock file is one whose creator died between mkdir and lock: stale too.
    const bool lockless = fd < 0 && !std::filesystem::exists(entry.path() / lock_name, ec);
    if (fd < 0 && !lockless) continue;
    std::filesystem::remove_all(entry.path(), ec);
    if (fd >= 0) ::close(fd);
    if (!ec) log::info("reaped stale swap folder '", entry.path().string(), "'");
  }
}

}  // namespace

swap_directory::swap_directory(const std::filesystem::path& parent) {
  check_parent(parent);
  reap_stale(parent);
  std::random_device rd;
  for (int attempt = 0; attempt < 16 && lock_fd_ < 0; ++attempt) {
    path_ = parent / str(prefix, ::getpid(), "-", std::hex, rd());
    if (::mkdir(path_.c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;
      throw io_error(str("cannot create swap folder '", path_.string(), "': ", errno_text(errno)), errno);
    }
    lock_fd_ = try_lock(path_ / lock_name, true);
    if (lock_fd_ < 0) {
      const int e = errno;
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
      throw io_error(str("cannot lock swap folder '", path_.string(), "': ", errno_text(e)), e);
    }
  }
  if (lock_fd_ < 0) throw io_error(str("cannot find a free swap folder name under '", parent.string(), "'"), EEXIST);
}

swap_directory::~swap_directory() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::unique_ptr<file> swap_directory::create_swap_file(int index, bool direct) const {
  return std::make_unique<file>(path_ / str("swap-", index), open_mode::read_write,
                                file_options{.create = true, .direct = direct, .unlinked = true});
}

}  // namespace zoe::io::detail
