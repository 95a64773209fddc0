#include <gtest/gtest.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <string>
#include <thread>

#include "zoe/core/log.hpp"

namespace zoe {
namespace {

TEST(log, WarnOnceWritesOnlyTheFirstTime) {
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(log::warn_once("log_test.key", "first"));
  EXPECT_FALSE(log::warn_once("log_test.key", "second"));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("zoe warning: first"), std::string::npos) << err;
  EXPECT_EQ(err.find("second"), std::string::npos) << err;
}

TEST(log, LevelFiltersMessages) {
  const auto saved = log::current_level();
  log::set_level(log::level::error);
  ::testing::internal::CaptureStderr();
  log::warn("hidden");
  log::error("shown");
  const std::string err = ::testing::internal::GetCapturedStderr();
  log::set_level(saved);
  EXPECT_EQ(err.find("hidden"), std::string::npos);
  EXPECT_NE(err.find("zoe error: shown"), std::string::npos);
}

// Whether thread `tid` of this process sits blocked in write(2): /proc names the system call a
// sleeping thread is in, and says "running" otherwise.
bool blocked_in_write(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  std::string first;
  return (in >> first) && first == std::to_string(SYS_write);
}

// stderr is a full pipe, so the line's write(2) blocks; a signal (no SA_RESTART) then interrupts
// it before any byte went out. The line must still arrive whole once the pipe drains.
TEST(log, ALineWhoseWriteASignalInterruptsIsWrittenAgain) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  static_cast<void>(::fcntl(fds[1], F_SETPIPE_SZ, 4096));
  const int flags = ::fcntl(fds[1], F_GETFL);
  ASSERT_EQ(::fcntl(fds[1], F_SETFL, flags | O_NONBLOCK), 0);
  std::size_t filled = 0;
  while (::write(fds[1], "x", 1) == 1) ++filled;
  ASSERT_EQ(::fcntl(fds[1], F_SETFL, flags), 0);

  static std::atomic<int> handled{0};
  handled = 0;
  struct sigaction interrupt {};
  interrupt.sa_handler = [](int) { ++handled; };
  struct sigaction saved_action {};
  ASSERT_EQ(::sigaction(SIGUSR1, &interrupt, &saved_action), 0);
  const int saved_stderr = ::dup(STDERR_FILENO);
  ASSERT_GE(::dup2(fds[1], STDERR_FILENO), 0);

  std::atomic<pid_t> tid{0};
  std::thread writer([&] {
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    log::write(log::level::error, "interrupted line");
  });
  while (tid == 0 || !blocked_in_write(tid)) std::this_thread::yield();
  ASSERT_EQ(::pthread_kill(writer.native_handle(), SIGUSR1), 0);
  // The handler runs once the interrupted write(2) has returned; only then make room, or the
  // write could find room before it sees the signal.
  while (handled == 0) std::this_thread::yield();

  std::string drained(filled, '\0');
  for (std::size_t got = 0; got < filled;) {
    const ssize_t n = ::read(fds[0], drained.data() + got, filled - got);
    ASSERT_GT(n, 0);
    got += static_cast<std::size_t>(n);
  }
  writer.join();
  ::dup2(saved_stderr, STDERR_FILENO);
  ::close(saved_stderr);
  ::close(fds[1]);
  ::sigaction(SIGUSR1, &saved_action, nullptr);
  std::string rest;
  char chunk[256];
  for (ssize_t n; (n = ::read(fds[0], chunk, sizeof chunk)) > 0;) rest.append(chunk, static_cast<std::size_t>(n));
  ::close(fds[0]);
  EXPECT_EQ(rest, "zoe error: interrupted line\n");
}

}  // namespace
}  // namespace zoe
