#include "swap_directory.hpp"

// How a live folder is kept from being reaped:
//  - Each folder is locked by an exclusive flock on its own directory descriptor for the life of
//    its owner. The kernel drops a flock when its holder dies, so a free lock means a dead owner,
//    except in one window: between the creator's mkdir and its flock.
//  - Creators cover that window with a shared flock on the parent directory, taken before mkdir
//    and dropped once their folder is locked. The reaper runs only under an exclusive flock on
//    the parent, taken without waiting: when it is busy someone is starting, and skipping the
//    reap costs nothing (any later start reaps).
// So while the reaper looks, no folder is inside that window, and every folder whose lock it can
// take belongs to a process that is gone. A creator that dies inside the window leaves a folder
// with a free lock, reaped by the next start.
//
// Everything below the parent is reached through descriptors (openat, mkdirat, unlinkat with
// O_NOFOLLOW), and folders of other users are left alone, so no entry someone else plants in a
// shared swap path can make us follow a link or remove what is not ours.

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/io/file_system.hpp"

namespace zoe::io::detail {
namespace {

constexpr std::string_view prefix = "zoe-swap-";
constexpr int folder_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

owned_fd open_parent(const std::filesystem::path& parent) {
  owned_fd fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.valid()) return fd;
  const int e = errno;
  if (e == ENOENT) throw io_error(str("swap path '", parent.string(), "' does not exist"), e);
  if (e == ENOTDIR) throw io_error(str("swap path '", parent.string(), "' is not a directory"), e);
  throw io_error(str("cannot open swap path '", parent.string(), "': ", errno_text(e)), e);
}

void check_parent(int parent_fd, const std::filesystem::path& parent) {
  struct stat st {};
  ZOE_CHECK_ERRNO(::fstat(parent_fd, &st), "cannot stat swap path '", parent.string(), "'");
  // There anyone could rename our folder away and put a link or a folder of theirs in its place.
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
    throw io_error(str("swap path '", parent.string(),
                       "' is writable by everyone and has no sticky bit, so another user could replace "
                       "its swap folders; set the sticky bit (chmod +t) or choose another path"),
                   EPERM);
  }
  if (::faccessat(parent_fd, ".", W_OK | X_OK, AT_EACCESS) != 0) {
    throw io_error(str("swap path '", parent.string(), "' is not writable: ", errno_text(errno)), errno);
  }
  if (const auto memory = memory_file_system(parent)) {
    log::warn_once(str("swap.memfs:", parent.string()),
                   str("swap path '", parent.string(), "' is on ", *memory, ": that is memory, not a drive"));
  }
}

int flock_retrying(int fd, int operation) {
  int r = 0;
  do {
    r = ::flock(fd, operation);
  } while (r != 0 && errno == EINTR);
  return r;
}

// Takes a flock on the swap path; false only when LOCK_NB finds it held. Throws io_error naming
// the path on any other failure (a file system without flock).
bool lock_parent(int parent_fd, int operation, const std::filesystem::path& parent) {
  if (flock_retrying(parent_fd, operation) == 0) return true;
  if (errno == EWOULDBLOCK && (operation & LOCK_NB) != 0) return false;
  throw io_error(str("cannot lock swap path '", parent.string(), "': ", errno_text(errno)), errno);
}

// The names in the directory `fd`, "." and ".." left out. Reads through a descriptor of its own,
// so the caller's descriptor (and any flock on it) is untouched.
std::vector<std::string> entries_of(int fd) {
  std::vector<std::string> names;
  const int listing_fd = ::openat(fd, ".", folder_flags);
  if (listing_fd < 0) return names;
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    ::close(listing_fd);
    return names;
  }
  while (const dirent* entry = ::readdir(listing)) {
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(listing);
  return names;
}

// Unlinks what a swap folder holds (swap files that a crash left named); a subdirectory is not
// ours to descend into, and then the folder stays.
void empty_folder(int folder_fd) {
  for (const auto& name : entries_of(folder_fd)) ::unlinkat(folder_fd, name.c_str(), 0);
}

// Removes this user's zoe-swap-* folders under `parent_fd` whose lock no live process holds. The
// caller holds the parent's lock exclusively, so no creator is between its mkdir and its lock.
void reap_stale(int parent_fd, const std::filesystem::path& parent) {
  for (const auto& name : entries_of(parent_fd)) {
    if (!name.starts_with(prefix)) continue;
    // O_NOFOLLOW: a link named like a folder is never followed (ELOOP), nor is anything but a
    // directory opened (ENOTDIR).
    const owned_fd folder(::openat(parent_fd, name.c_str(), folder_flags));
    struct stat st {};
    if (!folder.valid() || ::fstat(folder.get(), &st) != 0 || st.st_uid != ::geteuid()) continue;
    if (flock_retrying(folder.get(), LOCK_EX | LOCK_NB) != 0) continue;  // its owner lives
    empty_folder(folder.get());
    if (::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) == 0) {
      log::info("reaped stale swap folder '", (parent / name).string(), "'");
    } else {
      log::warn("cannot reap stale swap folder '", (parent / name).string(), "': ", errno_text(errno));
    }
  }
}

}  // namespace

swap_directory::swap_directory(const std::filesystem::path& parent, const std::string& label)
    : parent_(open_parent(parent)) {
  check_parent(parent_.get(), parent);
  const int p = parent_.get();
  if (lock_parent(p, LOCK_EX | LOCK_NB, parent)) reap_stale(p, parent);
  // Shared from here until our folder is locked: the reaper cannot run meanwhile. (Converting
  // from exclusive may let another reaper in first; we then wait for it to finish.)
  if (!lock_parent(p, LOCK_SH | LOCK_NB, parent)) {
    // A reap takes milliseconds; should someone hold the lock for longer, the log says why we wait.
    log::info("waiting for another process to finish reaping swap path '", parent.string(), "'");
    lock_parent(p, LOCK_SH, parent);
  }

  std::random_device rd;
  std::string name;
  for (int attempt = 0; attempt < 16 && name.empty(); ++attempt) {
    name = str(prefix, label, label.empty() ? "" : "-", ::getpid(), "-", std::hex, rd(), rd());
    if (::mkdirat(p, name.c_str(), 0700) != 0) {
      if (errno == EEXIST) {
        name.clear();
        continue;
      }
      throw io_error(str("cannot create swap folder '", (parent / name).string(), "': ", errno_text(errno)), errno);
    }
  }
  if (name.empty()) throw io_error(str("cannot find a free swap folder name under '", parent.string(), "'"), EEXIST);
  path_ = parent / name;

  folder_ = owned_fd(::openat(p, name.c_str(), folder_flags));
  int e = folder_.valid() ? 0 : errno;
  struct stat st {};
  if (e == 0 && ::fstat(folder_.get(), &st) != 0) e = errno;
  // mkdirat made it ours; anything else at that name now was put there by someone else.
  if (e == 0 && st.st_uid != ::geteuid()) e = EPERM;
  if (e == 0 && flock_retrying(folder_.get(), LOCK_EX | LOCK_NB) != 0) e = errno;
  if (e != 0) {
    if (e != EPERM) ::unlinkat(p, name.c_str(), AT_REMOVEDIR);
    throw io_error(str("cannot lock swap folder '", path_.string(), "': ", errno_text(e)), e);
  }
  // Our folder is locked: reapers may run again.
  ::flock(p, LOCK_UN);
}

swap_directory::~swap_directory() {
  // Removed while still locked, so no reaper races us for it; the lock goes with folder_.
  empty_folder(folder_.get());
  if (::unlinkat(parent_.get(), path_.filename().c_str(), AT_REMOVEDIR) != 0) {
    log::warn("cannot remove swap folder '", path_.string(), "': ", errno_text(errno));
  }
}

std::unique_ptr<file> swap_directory::create_swap_file(int index, bool direct) const {
  return std::make_unique<file>(
      path_ / str("swap-", index), open_mode::read_write,
      file_options{.create = true, .direct = direct, .unlinked = true, .directory_fd = folder_.get()});
}

}  // namespace zoe::io::detail
