#include "io_test_support.hpp"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

namespace zoe::testing {
std::filesystem::path scratch_parent() {
  const char* env = std::getenv("ZOE_TEST_DIR");
  return env != nullptr ? std::filesystem::path(env) : std::filesystem::path("/var/tmp");
}

scratch_dir::scratch_dir() : scratch_dir(scratch_parent()) {}

scratch_dir::scratch_dir(const std::filesystem::path& parent) {
  std::string pattern = (parent / "zoe-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed under " + parent.string());
  path_ = pattern;
}

scratch_dir::~scratch_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::unique_ptr<scoped_mount> scoped_mount::ramfs() {
  std::unique_ptr<scoped_mount> m(new scoped_mount);
  if (::mount("ramfs", m->path().c_str(), "ramfs", 0, nullptr) != 0) return nullptr;
  return m;
}

std::unique_ptr<scoped_mount> scoped_mount::small_ext4(std::uint64_t bytes) {
  std::unique_ptr<scoped_mount> m(new scoped_mount);
  m->image_ = m->path().string() + ".img";
  const std::string img = m->image_.string();
  std::ofstream(img).close();
  std::filesystem::resize_file(img, bytes);
  const std::string mkfs = "mkfs.ext4 -q -F -E nodiscard '" + img + "' >/dev/null 2>&1";
  const std::string mnt = "mount -o loop '" + img + "' '" + m->path().string() + "' >/dev/null 2>&1";
  if (std::system(mkfs.c_str()) != 0 || std::system(mnt.c_str()) != 0) {
    std::filesystem::remove(m->image_);
    m->image_.clear();
    return nullptr;
  }
  return m;
}

bool scoped_mount::remount_read_only() {
  return ::mount(nullptr, path().c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) == 0;
}

scoped_mount::~scoped_mount() {
  // MNT_DETACH: a test that failed half-way may still hold a file open there.
  ::umount2(path().c_str(), MNT_DETACH);
  if (!image_.empty()) {
    std::error_code ec;
    std::filesystem::remove(image_, ec);
  }
}

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937_64 rng(seed);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t v = rng() | 0x0101010101010101ULL;  // no zero byte anywhere
    for (int b = 0; b < 8; ++b) out[i + static_cast<std::size_t>(b)] = static_cast<std::byte>(v >> (8 * b));
  }
  for (; i < n; ++i) out[i] = static_cast<std::byte>((rng() & 0xfe) | 1);
  return out;
}

aligned_buffer::aligned_buffer(std::size_t n)
    : data_(static_cast<std::byte*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096 + 4096))), size_(n) {
  if (!data_) throw std::bad_alloc();
}

void aligned_buffer::freer::operator()(std::byte* p) const noexcept { std::free(p); }

std::vector<std::byte> read_whole_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(raw.size());
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

::testing::AssertionResult same_bytes(std::span<const std::byte> actual, std::span<const std::byte> expected) {
  const std::size_t n = std::min(actual.size(), expected.size());
  std::size_t i = 0;
  while (i < n && actual[i] == expected[i]) ++i;
  if (i == n && actual.size() == expected.size()) return ::testing::AssertionSuccess();
  auto failure = ::testing::AssertionFailure();
  failure << "sizes " << actual.size() << " and " << expected.size();
  if (i < n) {
    std::size_t last = n;
    while (last > i && actual[last - 1] == expected[last - 1]) --last;
    failure << "; bytes differ from offset " << i << " to " << last;
  }
  return failure;
}

std::vector<std::filesystem::path> open_files_under(const std::filesystem::path& folder) {
  std::vector<std::filesystem::path> out;
  const std::string prefix = folder.string() + "/";
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (!ec && target.string().starts_with(prefix) && target.filename() != "lock") out.push_back(entry.path());
  }
  return out;
}

void poke_file(const std::filesystem::path& path, std::uint64_t offset, std::span<const std::byte> bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path.string());
  const ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
  ::fsync(fd);
  ::close(fd);
  if (n != static_cast<ssize_t>(bytes.size())) throw std::runtime_error("short pwrite to " + path.string());
}

std::vector<std::byte> peek_file(const std::filesystem::path& path, std::uint64_t offset, std::size_t n) {
  std::vector<std::byte> out(n);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path.string());
  const ssize_t got = ::pread(fd, out.data(), n, static_cast<off_t>(offset));
  ::close(fd);
  if (got != static_cast<ssize_t>(n)) throw std::runtime_error("short pread from " + path.string());
  return out;
}

std::optional<std::string> run_with_syscalls_failing(std::initializer_list<long> syscalls, int os_errno,
                                                     const std::function<std::string()>& body) {
#if defined(__x86_64__)
  std::vector<sock_filter> filter = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
  };
  // One test per call: equal jumps to the refusal at the end, the last miss falls to allow.
  const auto n = static_cast<unsigned char>(syscalls.size());
  unsigned char left = n;
  for (const long nr : syscalls) {
    filter.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(nr), left, 0));
    --left;
  }
  filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<unsigned>(os_errno) & SECCOMP_RET_DATA)));
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return "child failed: pipe";
  const pid_t child = ::fork();
  if (child < 0) return "child failed: fork";
  if (child == 0) {
    ::close(pipe_fds[0]);
    sock_fprog program{static_cast<unsigned short>(filter.size()), filter.data()};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
      ::_exit(2);
    }
    std::string report;
    try {
      report = body();
    } catch (const std::exception& e) {
      report = std::string("threw\n") + e.what();
    }
    const auto written = ::write(pipe_fds[1], report.data(), report.size());
    ::_exit(written == static_cast<ssize_t>(report.size()) ? 0 : 3);
  }
  ::close(pipe_fds[1]);
  std::string report;
  char chunk[512];
  for (ssize_t got; (got = ::read(pipe_fds[0], chunk, sizeof chunk)) > 0;)
    report.append(chunk, static_cast<std::size_t>(got));
  ::close(pipe_fds[0]);
  int status = 0;
  if (::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return "child failed: status " + std::to_string(status) + "\n" + report;
  }
  return report;
#else
  static_cast<void>(syscalls);
  static_cast<void>(os_errno);
  static_cast<void>(body);
  return std::nullopt;
#endif
}

void write_whole_file(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

bool readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  int n = 0;
  do {
    n = ::poll(&p, 1, ms);
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

}  // namespace zoe::testing
