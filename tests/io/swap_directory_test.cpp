// The per-process swap folder: a folder is never reaped while its creator lives, not even between
// its mkdir and its lock; many processes starting on one path at once each get their own; the
// reaper follows no link, touches no other user's folder and takes only folders of dead
// processes; a swap path anyone could tamper with is refused; swap files land in the folder the
// directory holds, whatever is renamed or linked into its path.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io_test_support.hpp"
#include "swap_directory.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"

// A seam between a creator's mkdir and whatever follows it: this binary's own mkdirat (and mkdir)
// stand in for libc's, and once armed in a child they announce the new zoe-swap-* folder on a
// pipe and wait for a byte on another before returning. Only this test binary has them.
namespace {
int announce_fd = -1;
int resume_fd = -1;

int pausing_mkdirat(int dir_fd, const char* path, mode_t mode) {
  const auto r = static_cast<int>(::syscall(SYS_mkdirat, dir_fd, path, mode));
  if (r == 0 && announce_fd >= 0 && std::string_view(path).find("zoe-swap-") != std::string_view::npos) {
    const std::string name = std::filesystem::path(path).filename().string() + "\n";
    char byte = 0;
    if (::write(announce_fd, name.data(), name.size()) != static_cast<ssize_t>(name.size()) ||
        ::read(resume_fd, &byte, 1) != 1) {
      ::_exit(4);
    }
    announce_fd = resume_fd = -1;
  }
  return r;
}
}  // namespace

extern "C" int mkdirat(int dir_fd, const char* path, mode_t mode) { return pausing_mkdirat(dir_fd, path, mode); }
extern "C" int mkdir(const char* path, mode_t mode) { return pausing_mkdirat(AT_FDCWD, path, mode); }

namespace zoe::testing {
namespace {

using io::detail::swap_directory;

std::vector<std::string> names_in(const std::filesystem::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) names.push_back(entry.path().filename());
  return names;
}

struct pipe_pair {
  std::array<int, 2> fds{-1, -1};
  pipe_pair() {
    if (::pipe(fds.data()) != 0) throw std::runtime_error("pipe failed");
  }
  ~pipe_pair() {
    close_read();
    close_write();
  }
  pipe_pair(const pipe_pair&) = delete;
  pipe_pair& operator=(const pipe_pair&) = delete;
  [[nodiscard]] int read_end() const { return fds[0]; }
  [[nodiscard]] int write_end() const { return fds[1]; }
  void close_read() {
    if (fds[0] >= 0) ::close(std::exchange(fds[0], -1));
  }
  void close_write() {
    if (fds[1] >= 0) ::close(std::exchange(fds[1], -1));
  }
};

// One line from `fd` (without its newline); empty at end of file.
std::string read_line(int fd) {
  std::string line;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  return line;
}

bool write_line(int fd, const std::string& text) {
  const std::string line = text + "\n";
  return ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
}

int exit_code(pid_t child) {
  int status = 0;
  if (::waitpid(child, &status, 0) != child) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Reports the child's folder (or "FAIL: why") on `report`, then holds it until `release` closes;
// exits 0 only if the folder still existed then, and a swap file in it took a write.
[[noreturn]] void hold_a_folder(const std::filesystem::path& parent, int report, int release) {
  int code = 0;
  try {
    const swap_directory folder(parent);
    const auto swap = folder.create_swap_file(0, false);
    const std::string body = "swap data of " + std::to_string(::getpid());
    if (::pwrite(swap->fd(), body.data(), body.size(), 0) != static_cast<ssize_t>(body.size())) code = 5;
    if (!write_line(report, folder.path().string())) code = 6;
    char byte = 0;
    while (::read(release, &byte, 1) > 0) {
    }
    if (!std::filesystem::is_directory(folder.path())) code = 2;
  } catch (const std::exception& e) {
    write_line(report, std::string("FAIL: ") + e.what());
    code = 1;
  }
  ::_exit(code);
}

// Forks a child that runs `prepare`, then holds a folder under `parent` (hold_a_folder); returns
// its pid, or -1 where fork fails.
template <typename Prepare>
pid_t fork_holder(const std::filesystem::path& parent, pipe_pair& report, pipe_pair& release, Prepare prepare) {
  const pid_t child = ::fork();
  if (child == 0) {
    release.close_write();
    prepare();
    hold_a_folder(parent, report.write_end(), release.read_end());
  }
  return child;
}

class swap_directory_test : public ::testing::Test {
 protected:
  scratch_dir dir_;
};

TEST_F(swap_directory_test, AFolderBetweenItsMkdirAndItsLockIsNotReaped) {
  pipe_pair announce;
  pipe_pair resume;
  pipe_pair report;
  pipe_pair release;
  const pid_t child = fork_holder(dir_.path(), report, release, [&] {
    announce_fd = announce.write_end();
    resume_fd = resume.read_end();
  });
  ASSERT_GE(child, 0);
  release.close_read();
  // The child now stands between its mkdir and its lock, for as long as we like.
  const auto between = dir_ / read_line(announce.read_end());
  ASSERT_TRUE(std::filesystem::is_directory(between)) << between;
  {
    const swap_directory other(dir_.path());
    EXPECT_TRUE(std::filesystem::is_directory(between)) << "reaped the folder of a process still starting";
    EXPECT_NE(other.path(), between);
  }
  ASSERT_EQ(::write(resume.write_end(), "x", 1), 1);
  EXPECT_EQ(read_line(report.read_end()), between.string());
  release.close_write();
  EXPECT_EQ(exit_code(child), 0);
}

// The other half of the protocol: while a reaper holds the swap path, a creator makes nothing
// there; it says that it waits, and goes on once the reap is over.
TEST_F(swap_directory_test, NoFolderIsMadeWhileAReaperHoldsThePath) {
  const int reaper = ::open(dir_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_EQ(::flock(reaper, LOCK_EX), 0);
  pipe_pair log;
  pipe_pair report;
  pipe_pair release;
  const pid_t child = fork_holder(dir_.path(), report, release, [&] {
    ::close(reaper);  // the lock belongs to the open file, which the child's copy would keep alive
    if (::dup2(log.write_end(), STDERR_FILENO) < 0) ::_exit(2);
    log::set_level(log::level::info);
  });
  ASSERT_GE(child, 0);
  release.close_read();
  std::string line;
  do {
    line = read_line(log.read_end());
  } while (!line.empty() && line.find("waiting for another process to finish reaping") == std::string::npos);
  ASSERT_NE(line.find(dir_.path().string()), std::string::npos) << "the child never said it waits";
  EXPECT_EQ(names_in(dir_.path()), std::vector<std::string>{}) << "made a folder while the reaper looked";
  ::close(reaper);
  const std::filesystem::path made = read_line(report.read_end());
  EXPECT_EQ(made.parent_path(), dir_.path());
  release.close_write();
  EXPECT_EQ(exit_code(child), 0);
}

// Sixteen processes start on one path: eight at once, all held between their mkdir and their
// lock, then eight more at once while those wait. Every one gets its own folder and keeps it.
TEST_F(swap_directory_test, ManyProcessesStartingAtOnceEachGetTheirOwnFolder) {
  constexpr int per_group = 8;
  for (int i = 0; i < 4; ++i) std::filesystem::create_directory(dir_ / ("zoe-swap-999999-stale" + std::to_string(i)));
  pipe_pair go_first;
  pipe_pair go_second;
  pipe_pair announce;
  pipe_pair resume;
  pipe_pair report;
  pipe_pair release;
  std::vector<pid_t> children;
  for (int i = 0; i < 2 * per_group; ++i) {
    const bool first = i < per_group;
    const pid_t child = fork_holder(dir_.path(), report, release, [&] {
      go_first.close_write();
      go_second.close_write();
      char byte = 0;
      while (::read((first ? go_first : go_second).read_end(), &byte, 1) > 0) {
      }
      if (first) {
        announce_fd = announce.write_end();
        resume_fd = resume.read_end();
      }
    });
    ASSERT_GE(child, 0);
    children.push_back(child);
  }
  release.close_read();
  std::set<std::string> folders;
  const auto collect_reports = [&] {
    for (int i = 0; i < per_group; ++i) {
      const std::string line = read_line(report.read_end());
      EXPECT_FALSE(line.empty() || line.starts_with("FAIL")) << line;
      folders.insert(line);
    }
  };
  go_first.close_write();
  for (int i = 0; i < per_group; ++i) ASSERT_FALSE(read_line(announce.read_end()).empty());
  go_second.close_write();
  collect_reports();
  const std::string bytes(per_group, 'x');
  ASSERT_EQ(::write(resume.write_end(), bytes.data(), bytes.size()), per_group);
  collect_reports();
  EXPECT_EQ(folders.size(), 2u * per_group) << "two processes share a folder";
  // All are alive and hold their folders now; each checks that its own is still there.
  release.close_write();
  for (const pid_t child : children) EXPECT_EQ(exit_code(child), 0) << "child " << child;
  const swap_directory next(dir_.path());
  EXPECT_EQ(names_in(dir_.path()), std::vector<std::string>{next.path().filename()})
      << "every process removes its folder, and stale ones are reaped by a start that finds the path quiet";
}

TEST_F(swap_directory_test, ALiveFolderIsNeverReaped) {
  pipe_pair report;
  pipe_pair release;
  const pid_t child = fork_holder(dir_.path(), report, release, [] {});
  ASSERT_GE(child, 0);
  release.close_read();
  const std::filesystem::path theirs = read_line(report.read_end());
  {
    const swap_directory first(dir_.path());
    const swap_directory second(dir_.path());  // one process, two stores on one path
    EXPECT_TRUE(std::filesystem::is_directory(first.path()));
    EXPECT_TRUE(std::filesystem::is_directory(theirs));
  }
  release.close_write();
  EXPECT_EQ(exit_code(child), 0);
  EXPECT_EQ(names_in(dir_.path()), std::vector<std::string>{});
}

TEST_F(swap_directory_test, FoldersOfDeadProcessesAreReaped) {
  pipe_pair report;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      // A crash: no destructor runs, the folder stays, its lock goes with the process.
      const auto* leaked = new swap_directory(dir_.path());
      write_line(report.write_end(), leaked->path().string());
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  const std::filesystem::path dead = read_line(report.read_end());
  ASSERT_EQ(exit_code(child), 0);
  ASSERT_TRUE(std::filesystem::is_directory(dead));
  // One that a crash left with a named swap file (the create-and-unlink fallback, killed between).
  const auto named = dir_ / "zoe-swap-999999-dead";
  std::filesystem::create_directory(named);
  write_whole_file(named / "swap-0", random_bytes(100, 1));

  const swap_directory next(dir_.path());
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_FALSE(std::filesystem::exists(named));
  EXPECT_EQ(names_in(dir_.path()), std::vector<std::string>{next.path().filename()});
}

TEST_F(swap_directory_test, ALinkNamedLikeAFolderIsNeitherFollowedNorRemoved) {
  const scratch_dir elsewhere;
  write_whole_file(elsewhere / "precious", random_bytes(100, 2));
  const auto link = dir_ / "zoe-swap-999999-link";
  std::filesystem::create_directory_symlink(elsewhere.path(), link);
  const swap_directory folder(dir_.path());
  EXPECT_TRUE(std::filesystem::is_symlink(std::filesystem::symlink_status(link)));
  EXPECT_EQ(names_in(elsewhere.path()), std::vector<std::string>{"precious"});
}

TEST_F(swap_directory_test, AFolderOfAnotherUserIsLeftAlone) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can give a folder to another user";
  const auto theirs = dir_ / "zoe-swap-999999-theirs";
  std::filesystem::create_directory(theirs);
  write_whole_file(theirs / "swap-0", random_bytes(100, 3));
  constexpr uid_t other_user = 54321;
  ASSERT_EQ(::chown(theirs.c_str(), other_user, other_user), 0);
  const swap_directory folder(dir_.path());
  EXPECT_EQ(names_in(theirs), std::vector<std::string>{"swap-0"}) << "its lock is free, but it is not ours to judge";
}

TEST_F(swap_directory_test, AParentAnyoneCanRenameInIsRefusedNamingIt) {
  const auto open_to_all = dir_ / "open";
  std::filesystem::create_directory(open_to_all);
  ASSERT_EQ(::chmod(open_to_all.c_str(), 0777), 0);
  try {
    const swap_directory folder(open_to_all);
    FAIL() << "accepted a world-writable parent without the sticky bit";
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + open_to_all.string() + "'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sticky"), std::string::npos) << e.what();
  }
  EXPECT_EQ(names_in(open_to_all), std::vector<std::string>{}) << "refused before anything was created";
  ASSERT_EQ(::chmod(open_to_all.c_str(), 01777), 0);  // as /tmp is: only owners rename their entries
  EXPECT_NO_THROW(swap_directory{open_to_all});
}

// What is wrong with the swap files `folder` creates, empty if nothing: each must have no name,
// be 0600, give back what was written, and land in the folder the object holds even once that is
// renamed away and a link to `elsewhere` takes its name (files are opened through the folder's
// descriptor, never its path).
std::string swap_file_faults(const swap_directory& folder, const std::filesystem::path& elsewhere) {
  std::string faults;
  const auto moved = folder.path().parent_path() / "moved";
  std::filesystem::rename(folder.path(), moved);
  std::filesystem::create_directory_symlink(elsewhere, folder.path());
  {
    const auto direct = folder.create_swap_file(0, true);
    const auto buffered = folder.create_swap_file(1, false);
    for (const auto* swap : {direct.get(), buffered.get()}) {
      struct stat st {};
      const auto target = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(swap->fd()));
      if (::fstat(swap->fd(), &st) != 0 || st.st_nlink != 0) faults += "a swap file has a name; ";
      if ((st.st_mode & 0777) != 0600) faults += "a swap file is not 0600; ";
      if (!target.string().starts_with(moved.string() + "/")) faults += "a swap file is at " + target.string() + "; ";
    }
    const auto data = random_bytes(4096, 4);
    aligned_buffer buffer(4096);  // for O_DIRECT where the file system takes it
    std::copy(data.begin(), data.end(), buffer.data());
    const bool wrote = ::pwrite(direct->fd(), buffer.data(), buffer.size(), 0) == 4096;
    std::fill_n(buffer.data(), buffer.size(), std::byte{0});
    if (!wrote || ::pread(direct->fd(), buffer.data(), buffer.size(), 0) != 4096 ||
        !std::equal(data.begin(), data.end(), buffer.data())) {
      faults += "a swap file lost its data; ";
    }
  }
  if (!names_in(moved).empty()) faults += "names were left in the folder; ";
  if (!names_in(elsewhere).empty()) faults += "a file went through the link; ";
  std::filesystem::remove(folder.path());
  std::filesystem::rename(moved, folder.path());
  return faults;
}

// O_TMPFILE where the file system has it: here on the disk, on ramfs and on tmpfs.
TEST_F(swap_directory_test, SwapFilesAreNamelessAndLandInTheHeldFolderWhateverTakesItsName) {
  const scratch_dir elsewhere;
  std::vector<std::filesystem::path> parents{dir_.path()};
  const auto ramfs = scoped_mount::ramfs();
  if (ramfs) parents.push_back(ramfs->path());
  const scratch_dir tmpfs;
  const bool tmpfs_mounted = ::mount("tmpfs", tmpfs.path().c_str(), "tmpfs", 0, "size=1m") == 0;
  if (tmpfs_mounted) parents.push_back(tmpfs.path());
  for (const auto& parent : parents) {
    const swap_directory folder(parent);
    EXPECT_EQ(swap_file_faults(folder, elsewhere.path()), "") << parent;
  }
  if (tmpfs_mounted) ::umount2(tmpfs.path().c_str(), MNT_DETACH);
}

#if defined(__x86_64__)
// The fallback, where the file system has no O_TMPFILE: a child whose seccomp filter answers
// every O_TMPFILE open with EOPNOTSUPP, as such a file system does. Its swap files are created
// exclusively inside the held folder and unlinked at once.
TEST_F(swap_directory_test, WithoutOTmpfileSwapFilesAreCreatedAndUnlinkedInsideTheHeldFolder) {
  const scratch_dir elsewhere;
  pipe_pair report;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    constexpr std::uint32_t tmpfile_bit = O_TMPFILE & ~O_DIRECTORY;
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_openat, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[2])),  // flags, low word
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, tmpfile_bit, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EOPNOTSUPP & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
      ::_exit(2);
    }
    std::string faults;
    try {
      if (::open(dir_.path().c_str(), O_TMPFILE | O_RDWR, 0600) >= 0 || errno != EOPNOTSUPP) {
        faults = "the filter does not refuse O_TMPFILE";
      } else {
        const swap_directory folder(dir_.path());
        faults = swap_file_faults(folder, elsewhere.path());
      }
    } catch (const std::exception& e) {
      faults = e.what();
    }
    ::_exit(write_line(report.write_end(), faults) ? 0 : 3);
  }
  EXPECT_EQ(read_line(report.read_end()), "");
  EXPECT_EQ(exit_code(child), 0);
}
#endif

TEST_F(swap_directory_test, TheFolderGoesWithItsOwner) {
  std::filesystem::path path;
  {
    const swap_directory folder(dir_.path());
    path = folder.path();
    EXPECT_EQ(path.parent_path(), dir_.path());
    EXPECT_TRUE(path.filename().string().starts_with("zoe-swap-" + std::to_string(::getpid()) + "-")) << path;
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace zoe::testing
