// The real checkpoint_fs: files through zoe's I/O engine, folders through POSIX calls.

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "aligned_buffer.hpp"
#include "zoe/core/check.hpp"
#include "zoe/engine/checkpoint/checkpoint_fs.hpp"
#include "zoe/io/engine_factory.hpp"
#include "zoe/io/file.hpp"

namespace zoe::engine {

namespace {

io::engine_options engine_options_of(const posix_checkpoint_fs_options& o) {
  io::engine_options e;
  e.block_size = o.block_size;
  e.queue_depth = o.queue_depth;
  return e;
}

std::string quoted(const std::filesystem::path& p) { return str("'", p.string(), "'"); }

/// Appends gathered into write_buffers aligned buffers of block_size, each written (at an aligned
/// offset, so O_DIRECT takes it whole) as soon as it fills, while the caller fills the next: the
/// caller's next piece overlaps the drive's work on the last ones.
class posix_writer final : public checkpoint_writer {
 public:
  posix_writer(const std::filesystem::path& path, const posix_checkpoint_fs_options& o)
      : file_(path, io::open_mode::read_write, {.create = true, .truncate = true, .direct = o.direct}),
        block_(o.block_size),
        buffers_(o.write_buffers),
        engine_(io::make_engine(o.backend, engine_options_of(o))) {
    for (std::size_t i = 0; i < o.write_buffers; ++i) free_.push_back(o.write_buffers - 1 - i);
  }
  // The engine (declared last) is destroyed first: it waits for every write still using a buffer.
  ~posix_writer() override = default;
  posix_writer(const posix_writer&) = delete;
  posix_writer& operator=(const posix_writer&) = delete;

  void append(std::span<const std::byte> data) override {
    check_usable();
    while (!data.empty()) {
      if (!current_) current_ = take_free();
      const std::size_t n = std::min(block_ - fill_, data.size());
      std::memcpy(buffer(*current_).data() + fill_, data.data(), n);
      fill_ += n;
      size_ += n;
      data = data.subspan(n);
      if (fill_ == block_) submit_current();
    }
  }

  void sync() override {
    check_usable();
    if (current_ && fill_ > 0) submit_current();
    while (engine_->outstanding() > 0) {
      done_.clear();
      engine_->wait(done_, 1);
      take_completions();
    }
    file_.sync();
  }

  [[nodiscard]] std::uint64_t size() const noexcept override { return size_; }

 private:
  /// Buffers are allocated when first used: a small file (a manifest, `latest`) takes one.
  [[nodiscard]] std::span<std::byte> buffer(std::size_t slot) {
    if (buffers_[slot].size() == 0) buffers_[slot] = detail::aligned_buffer(block_);
    return buffers_[slot].span();
  }

  void check_usable() const {
    if (failure_) throw io_error(*failure_, failure_errno_);
  }

  std::size_t take_free() {
    while (free_.empty()) {
      done_.clear();
      engine_->wait(done_, 1);
      take_completions();
    }
    const std::size_t slot = free_.back();
    free_.pop_back();
    return slot;
  }

  void submit_current() {
    const std::size_t slot = *current_;
    const io::io_request r{io::io_op::write, &file_, buffer(slot).first(fill_), written_, slot};
    engine_->submit(r);
    written_ += fill_;
    current_.reset();
    fill_ = 0;
    // submit() starts nothing: a poll hands the write to the kernel now, so it runs while the
    // caller produces the next piece.
    done_.clear();
    engine_->poll(done_);
    take_completions();
  }

  void take_completions() {
    for (const io::io_completion& c : done_) {
      free_.push_back(static_cast<std::size_t>(c.user_data));
      if (!c.ok() && !failure_) {
        failure_ = c.message;
        failure_errno_ = c.os_errno;
      }
    }
    check_usable();
  }

  io::file file_;
  std::size_t block_;
  std::vector<detail::aligned_buffer> buffers_;
  std::vector<std::size_t> free_;
  std::optional<std::size_t> current_;  ///< the buffer being filled
  std::size_t fill_ = 0;                ///< bytes in it
  std::uint64_t written_ = 0;           ///< file offset of the next write
  std::uint64_t size_ = 0;
  std::optional<std::string> failure_;  ///< the first failed write: the file is lost from there on
  int failure_errno_ = 0;
  std::vector<io::io_completion> done_;
  std::unique_ptr<io::io_engine> engine_;
};

class posix_reader final : public checkpoint_reader {
 public:
  posix_reader(const std::filesystem::path& path, const posix_checkpoint_fs_options& o)
      : file_(path, io::open_mode::read_only, {.direct = o.direct}),
        size_(file_.logical_size()),
        engine_(io::make_engine(o.backend, engine_options_of(o))) {}

  [[nodiscard]] std::uint64_t size() const noexcept override { return size_; }

  void read(std::uint64_t offset, std::span<std::byte> out) override {
    if (offset > size_ || out.size() > size_ - offset) {
      throw io_error(str("cannot read ", out.size(), " bytes at offset ", offset, " of ", quoted(file_.path()),
                         ": the file ends at ", size_),
                     0);
    }
    if (out.empty()) return;
    const io::io_request r{io::io_op::read, &file_, out, offset, 0};
    engine_->run(std::span(&r, 1));
  }

 private:
  io::file file_;
  std::uint64_t size_;
  std::unique_ptr<io::io_engine> engine_;
};

class posix_fs final : public checkpoint_fs {
 public:
  explicit posix_fs(posix_checkpoint_fs_options o) : options_(std::move(o)) { options_.validate(); }

  std::unique_ptr<checkpoint_writer> create(const std::filesystem::path& path) override {
    return std::make_unique<posix_writer>(path, options_);
  }

  std::unique_ptr<checkpoint_reader> open(const std::filesystem::path& path) override {
    return std::make_unique<posix_reader>(path, options_);
  }

  bool exists(const std::filesystem::path& path) override {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) return true;
    if (errno == ENOENT || errno == ENOTDIR) return false;
    ::zoe::detail::throw_errno(errno, str("cannot tell whether ", quoted(path), " exists"), __FILE__, __LINE__);
  }

  bool is_link(const std::filesystem::path& path) override {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) return S_ISLNK(st.st_mode);
    if (errno == ENOENT || errno == ENOTDIR) return false;
    ::zoe::detail::throw_errno(errno, str("cannot tell whether ", quoted(path), " is a symbolic link"), __FILE__,
                               __LINE__);
  }

  void create_directory(const std::filesystem::path& path) override {
    if (::mkdir(path.c_str(), 0755) == 0) return;
    const int e = errno;
    struct stat st {};
    if (e == EEXIST && ::stat(path.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) return;
      throw io_error(str("cannot create the folder ", quoted(path), ": a file is there"), EEXIST);
    }
    ::zoe::detail::throw_errno(e, str("cannot create the folder ", quoted(path)), __FILE__, __LINE__);
  }

  void sync_directory(const std::filesystem::path& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ZOE_CHECK_ERRNO(fd, "cannot open the folder ", quoted(path), " to fsync it");
    const int rc = ::fsync(fd);
    const int e = errno;
    ::close(fd);
    if (rc != 0) ::zoe::detail::throw_errno(e, str("cannot fsync the folder ", quoted(path)), __FILE__, __LINE__);
  }

  void rename(const std::filesystem::path& from, const std::filesystem::path& to) override {
    ZOE_CHECK_ERRNO(::rename(from.c_str(), to.c_str()), "cannot rename ", quoted(from), " to ", quoted(to));
  }

  void exchange(const std::filesystem::path& a, const std::filesystem::path& b) override {
    ZOE_CHECK_ERRNO(::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE), "cannot exchange ",
                    quoted(a), " and ", quoted(b));
  }

  void remove(const std::filesystem::path& path) override {
    if (::unlink(path.c_str()) == 0 || errno == ENOENT) return;
    if (errno == EISDIR || errno == EPERM) {
      if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return;
    }
    ::zoe::detail::throw_errno(errno, str("cannot remove ", quoted(path)), __FILE__, __LINE__);
  }

  std::vector<std::string> list(const std::filesystem::path& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr)
      ::zoe::detail::throw_errno(errno, str("cannot list the folder ", quoted(path)), __FILE__, __LINE__);
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(dir)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    const int e = errno;
    ::closedir(dir);
    if (e != 0) ::zoe::detail::throw_errno(e, str("cannot list the folder ", quoted(path)), __FILE__, __LINE__);
    return names;
  }

 private:
  posix_checkpoint_fs_options options_;
};

}  // namespace

void posix_checkpoint_fs_options::validate() const {
  ZOE_EXPECTS(block_size >= 4096 && block_size % 4096 == 0 && block_size <= (std::size_t{1} << 30),
              "posix_checkpoint_fs_options.block_size ", block_size, " is not a multiple of 4 KiB up to 1 GiB");
  ZOE_EXPECTS(write_buffers >= 1 && write_buffers <= 1024, "posix_checkpoint_fs_options.write_buffers ", write_buffers,
              " is not in [1, 1024]");
  engine_options_of(*this).validate();
}

std::unique_ptr<checkpoint_fs> make_posix_checkpoint_fs(posix_checkpoint_fs_options options) {
  return std::make_unique<posix_fs>(std::move(options));
}

checkpoint_fs& checkpoint_fs::posix() {
  static posix_fs fs{posix_checkpoint_fs_options{}};
  return fs;
}

}  // namespace zoe::engine
