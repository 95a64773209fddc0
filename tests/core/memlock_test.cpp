// The memlock fallback of the host device, tested for real: a child process drops CAP_IPC_LOCK
// (root has it, and with it mlock ignores RLIMIT_MEMLOCK), then asks for more pinned memory than
// the limit allows. It must get usable, unlocked memory and exactly one warning naming the limit.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "zoe/core/device.hpp"
#include "zoe/core/units.hpp"

namespace zoe {
namespace {

bool has_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_IPC_LOCK / 32].effective & (1U << (CAP_IPC_LOCK % 32))) != 0;
}

bool drop_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  const unsigned bit = 1U << (CAP_IPC_LOCK % 32);
  data[CAP_IPC_LOCK / 32].effective &= ~bit;
  data[CAP_IPC_LOCK / 32].permitted &= ~bit;
  data[CAP_IPC_LOCK / 32].inheritable &= ~bit;
  return ::syscall(SYS_capset, &header, data) == 0;
}

std::uint64_t memlock_limit() {
  rlimit lim{};
  ::getrlimit(RLIMIT_MEMLOCK, &lim);
  return lim.rlim_cur;
}

// Runs `body` in a child with CAP_IPC_LOCK dropped; returns its exit code and its stderr.
template <typename Body>
std::pair<int, std::string> in_child_without_ipc_lock(Body body) {
  int err_pipe[2];
  EXPECT_EQ(::pipe(err_pipe), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(err_pipe[1], STDERR_FILENO);
    ::close(err_pipe[0]);
    if (!drop_ipc_lock() || has_ipc_lock()) ::_exit(90);
    int code = 0;
    try {
      code = body();
    } catch (...) {
      code = 91;
    }
    ::_exit(code);
  }
  ::close(err_pipe[1]);
  std::string text;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(err_pipe[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  ::close(err_pipe[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), text};
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class memlock_fallback : public ::testing::Test {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "the sanitizers turn mlock into a no-op that succeeds, so there is no refusal to see";
#endif
    if (!has_ipc_lock()) GTEST_SKIP() << "the test process lacks CAP_IPC_LOCK, so there is nothing to drop";
    limit_ = memlock_limit();
    if (limit_ == RLIM_INFINITY || limit_ > 256 * MiB) {
      GTEST_SKIP() << "RLIMIT_MEMLOCK is too large to exceed in a test";
    }
    bytes_ = align_up(limit_ + 8 * MiB, 4096);
  }
  std::uint64_t limit_ = 0;
  std::size_t bytes_ = 0;
};

TEST_F(memlock_fallback, RegistrationFallsBackToUnlockedMemoryWithOneWarningNamingTheLimit) {
  const std::size_t bytes = bytes_;
  const auto [code, err] = in_child_without_ipc_lock([bytes] {
    const auto dev = make_host_device(1 * MiB);
    for (int i = 0; i < 3; ++i) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return 1;
      const bool locked = dev->register_host(p, bytes);
      std::memset(p, 0x3c, bytes);  // the memory must be usable even though it is not locked
      const bool usable = static_cast<unsigned char*>(p)[bytes - 1] == 0x3c;
      dev->unregister_host(p, bytes);
      ::munmap(p, bytes);
      if (!usable) return 2;
      if (locked) return 3;
    }
    return 0;
  });
  ASSERT_EQ(code, 0) << err;
  EXPECT_EQ(count(err, "RLIMIT_MEMLOCK"), 1U) << "exactly one warning, naming the limit:\n" << err;
  EXPECT_NE(err.find(format_bytes(limit_)), std::string::npos) << err;
}

TEST_F(memlock_fallback, WithTheCapabilityTheSameSizeLocks) {
  const auto dev = make_host_device(1 * MiB);
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  EXPECT_TRUE(dev->register_host(p, bytes_));
  dev->unregister_host(p, bytes_);
  ::munmap(p, bytes_);
}

}  // namespace
}  // namespace zoe
