#include "zoe/io/file.hpp"

#include <fcntl.h>
#include <linux/stat.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "fd_registry.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"

namespace zoe::io {
namespace {

// O_DIRECT needs 4 KiB at most on every file system we meet; it is the safe answer when the
// kernel does not report the file's own alignment.
constexpr std::size_t fallback_alignment = 4096;

int open_flags(open_mode mode, const file_options& o) {
  int flags = O_CLOEXEC | (mode == open_mode::read_only ? O_RDONLY : O_RDWR);
  if (o.create) flags |= O_CREAT;
  if (o.truncate) flags |= O_TRUNC;
  if (o.exclusive) flags |= O_EXCL;
  if (o.no_follow) flags |= O_NOFOLLOW;
  return flags;
}

struct opened {
  int fd = -1;
  bool direct = false;
};

// Opens with O_DIRECT when asked, and without it when the file system refuses (EINVAL).
opened open_maybe_direct(int at, const std::filesystem::path& path, const std::filesystem::path& named, int flags,
                         const file_options& o) {
  if (o.direct) {
    const int fd = ::openat(at, path.c_str(), flags | O_DIRECT, o.permissions);
    if (fd >= 0) return {fd, true};
    if (errno != EINVAL) return {};
    // ramfs and some FUSE mounts refuse O_DIRECT at open; the data is still safe buffered.
    log::warn_once(str("o_direct:", named.parent_path().string()),
                   str("'", named.string(), "' refuses O_DIRECT; using buffered I/O there"));
  }
  return {::openat(at, path.c_str(), flags, o.permissions), false};
}

// Closes a descriptor on every way out of the constructor but the one that keeps it.
class descriptor_guard {
 public:
  explicit descriptor_guard(int fd) noexcept : fd_(fd) {}
  ~descriptor_guard() {
    if (fd_ >= 0) ::close(fd_);
  }
  descriptor_guard(const descriptor_guard&) = delete;
  descriptor_guard& operator=(const descriptor_guard&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace

file::file(std::filesystem::path path, open_mode mode, file_options options) : path_(std::move(path)), mode_(mode) {
  ZOE_EXPECTS(!(mode == open_mode::read_only && (options.create || options.truncate || options.unlinked)),
              "cannot create or truncate '", path_.string(), "' when opening it read-only");
  const bool inside = options.directory_fd >= 0;
  const int at = inside ? options.directory_fd : AT_FDCWD;
  const std::filesystem::path name = inside ? path_.filename() : path_;
  opened o;
  bool named = false;  // created under path_ because the file system has no O_TMPFILE
  if (options.unlinked) {
    // O_EXCL: the file can never be linked into a name later.
    o = open_maybe_direct(at, inside ? std::filesystem::path(".") : path_.parent_path(), path_,
                          O_TMPFILE | O_EXCL | O_RDWR | O_CLOEXEC, options);
    if (o.fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR)) {
      options.create = options.exclusive = options.no_follow = true;
      o = open_maybe_direct(at, name, path_, open_flags(mode, options), options);
      named = o.fd >= 0;
    }
  } else {
    o = open_maybe_direct(at, name, path_, open_flags(mode, options), options);
  }
  ZOE_CHECK_ERRNO(o.fd, "cannot open '", path_.string(), "' for ",
                  mode == open_mode::read_only ? "reading" : "reading and writing");
  descriptor_guard fd(o.fd);
  // The caller asked for a file that leaves no name behind: one that keeps its name is an error.
  if (named) ZOE_CHECK_ERRNO(::unlinkat(at, name.c_str(), 0), "cannot unlink '", path_.string(), "' after creating it");
  direct_ = o.direct;

  struct stat st {};
  ZOE_CHECK_ERRNO(::fstat(fd.get(), &st), "cannot stat '", path_.string(), "'");
  if (!(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))) {
    const bool is_dir = S_ISDIR(st.st_mode);
    throw io_error(str("'", path_.string(), "' is ", is_dir ? "a directory" : "not a regular file or block device"),
                   is_dir ? EISDIR : EINVAL);
  }
  logical_size_ = static_cast<std::uint64_t>(st.st_size);

  if (direct_) {
    offset_align_ = mem_align_ = fallback_alignment;
    struct statx sx {};
    if (::statx(fd.get(), "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) != 0 &&
        sx.stx_dio_offset_align != 0) {
      offset_align_ = sx.stx_dio_offset_align;
      mem_align_ = std::max<std::size_t>(sx.stx_dio_mem_align, 1);
    }
  }
  detail::note_file_opened(fd.get());  // last: nothing after it may throw once backends know the fd
  fd_ = fd.release();
}

file::~file() {
  if (fd_ >= 0) {
    // Before close: a backend holding its own reference (io_uring registered files) must learn
    // that this fd number no longer names this file.
    detail::note_file_closing(fd_);
    ::close(fd_);
  }
}

std::uint64_t file::logical_size() const {
  const std::lock_guard lock(mutex_);
  return logical_size_;
}

void file::refresh_logical_size() {
  const std::lock_guard lock(mutex_);
  if (extensions_in_flight_ > 0) return;
  struct stat st {};
  ZOE_CHECK_ERRNO(::fstat(fd_, &st), "cannot stat '", path_.string(), "'");
  logical_size_ = std::max(logical_size_, static_cast<std::uint64_t>(st.st_size));
}

void file::note_write_end(std::uint64_t end) {
  const std::lock_guard lock(mutex_);
  logical_size_ = std::max(logical_size_, end);
}

void file::begin_extension() {
  const std::lock_guard lock(mutex_);
  ++extensions_in_flight_;
}

void file::end_extension() {
  const std::lock_guard lock(mutex_);
  --extensions_in_flight_;
  struct stat st {};
  ZOE_CHECK_ERRNO(::fstat(fd_, &st), "cannot stat '", path_.string(), "'");
  if (static_cast<std::uint64_t>(st.st_size) > logical_size_) {
    ZOE_CHECK_ERRNO(::ftruncate(fd_, static_cast<off_t>(logical_size_)), "cannot truncate '", path_.string(), "' to ",
                    logical_size_, " bytes");
  }
}

void file::resize(std::uint64_t length) {
  const std::lock_guard lock(mutex_);
  ZOE_CHECK_ERRNO(::ftruncate(fd_, static_cast<off_t>(length)), "cannot resize '", path_.string(), "' to ", length,
                  " bytes");
  logical_size_ = length;
}

void file::preallocate(std::uint64_t length) {
  const std::lock_guard lock(mutex_);
  if (::fallocate(fd_, 0, 0, static_cast<off_t>(length)) != 0) {
    ZOE_CHECK_ERRNO(errno == EOPNOTSUPP ? ::ftruncate(fd_, static_cast<off_t>(length)) : -1, "cannot reserve ", length,
                    " bytes for '", path_.string(), "'");
  }
  logical_size_ = std::max(logical_size_, length);
}

void file::sync() { ZOE_CHECK_ERRNO(::fdatasync(fd_), "cannot sync '", path_.string(), "'"); }

bool file::try_lock_range(std::uint64_t begin, std::uint64_t end) { return try_lock_range(begin, end, {}); }

bool file::try_lock_range(std::uint64_t begin, std::uint64_t end,
                          const std::weak_ptr<range_unlock_listener>& listener) {
  const std::lock_guard lock(mutex_);
  for (const auto& [b, e] : locked_) {
    if (begin < e && b < end) {
      // Listed under the same lock that saw the range taken, so its unlock cannot slip between.
      const bool listed = std::ranges::any_of(
          unlock_listeners_, [&](const auto& l) { return !l.owner_before(listener) && !listener.owner_before(l); });
      if (!listed && !listener.expired()) unlock_listeners_.push_back(listener);
      return false;
    }
  }
  locked_.emplace_back(begin, end);
  return true;
}

void file::unlock_range(std::uint64_t begin, std::uint64_t end) {
  std::vector<std::weak_ptr<range_unlock_listener>> listeners;
  {
    const std::lock_guard lock(mutex_);
    const auto it = std::find(locked_.begin(), locked_.end(), std::pair{begin, end});
    ZOE_ASSERT(it != locked_.end());
    locked_.erase(it);
    listeners.swap(unlock_listeners_);
  }
  unlocked_.notify_all();
  for (const auto& l : listeners) {
    if (const auto alive = l.lock()) alive->range_unlocked();
  }
}

void file::wait_for_unlock() {
  std::unique_lock lock(mutex_);
  // Bounded: the holder may be another engine whose owner has not polled yet.
  unlocked_.wait_for(lock, std::chrono::milliseconds(10));
}

}  // namespace zoe::io
