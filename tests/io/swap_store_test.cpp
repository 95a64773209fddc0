// The swap store's folders and set-up: the backend is chosen once, folders of dead processes are
// reaped, and every refusal names its path. The data path is in swap_store_data_test.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "swap_store_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"

namespace zoe::testing {
namespace {

using io::swap_channel;
using io::swap_extent;
using io::swap_store;

class swap_store_test : public ::testing::Test {
 protected:
  scratch_dir dir_;
};

TEST_F(swap_store_test, AutoChoosesTheBackendOnceForTheStore) {
  auto options = store_options({dir_.path()}, 4 * store_chunk);
  options.engine = "auto";
  const auto saved = log::current_level();
  log::set_level(log::level::info);
  ::testing::internal::CaptureStderr();
  std::string err;
  std::string first;
  std::string second;
  try {
    swap_store store(options);  // prewrite makes engines too
    swap_channel a(store);
    swap_channel b(store);
    first = a.backend_name();
    second = b.backend_name();
  } catch (...) {
    err = ::testing::internal::GetCapturedStderr();
    log::set_level(saved);
    throw;
  }
  err = ::testing::internal::GetCapturedStderr();
  log::set_level(saved);
  EXPECT_EQ(first, second);
  std::size_t choices = 0;
  for (auto at = err.find("I/O engine auto"); at != std::string::npos; at = err.find("I/O engine auto", at + 1))
    ++choices;
  EXPECT_EQ(choices, 1u) << err;
  EXPECT_NE(err.find("took " + first), std::string::npos) << err;
}

TEST_F(swap_store_test, FullStoreErrorNamesTheSizes) {
  swap_store store(store_options({dir_.path()}, MiB));
  try {
    (void)store.allocate(2 * MiB);
    FAIL();
  } catch (const memory_error& e) {
    EXPECT_NE(std::string(e.what()).find("2 MiB"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("capacity 1 MiB"), std::string::npos) << e.what();
  }
}

void expect_refused(const std::filesystem::path& p, const std::string& why) {
  try {
    swap_store store(store_options({p}, MiB));
    FAIL() << "accepted " << p;
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST_F(swap_store_test, RefusalsNameThePath) {
  expect_refused(dir_ / "missing", "does not exist");
  write_whole_file(dir_ / "plain", random_bytes(10, 1));
  expect_refused(dir_ / "plain", "not a directory");
}

TEST_F(swap_store_test, ReadOnlyPathIsRefusedNamingIt) {
  const auto ro = scoped_mount::ramfs();
  if (!ro) GTEST_SKIP() << "mounting ramfs is refused here, so there is no read-only folder to offer";
  if (!ro->remount_read_only()) GTEST_SKIP() << "remounting ramfs read-only is refused here";
  expect_refused(ro->path(), "not writable");
}

TEST_F(swap_store_test, MemoryFileSystemGetsAWarning) {
  const auto mount = scoped_mount::ramfs();
  if (!mount) GTEST_SKIP() << "mounting ramfs is refused here";
  ::testing::internal::CaptureStderr();
  swap_store store(store_options({mount->path()}, MiB));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(mount->path().string()), std::string::npos) << err;
  EXPECT_NE(err.find("memory, not a drive"), std::string::npos) << err;
  EXPECT_FALSE(store.direct());
}

TEST_F(swap_store_test, StaleFoldersAreReapedAndLiveOnesKept) {
  const auto stale = dir_ / "zoe-swap-999999-dead";
  std::filesystem::create_directory(stale);
  write_whole_file(stale / "swap-0", random_bytes(100, 2));  // left by a crash before unlink
  const auto live = dir_ / "zoe-swap-1-alive";
  std::filesystem::create_directory(live);
  const int held = ::open(live.c_str(), O_RDONLY | O_DIRECTORY);  // its owner's lock is on the folder
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  {
    swap_store store(store_options({dir_.path()}, MiB));
    EXPECT_FALSE(std::filesystem::exists(stale)) << "a folder whose lock is free belongs to a dead process";
    EXPECT_TRUE(std::filesystem::exists(live)) << "a locked folder belongs to a live process";
    EXPECT_EQ(store.folders()[0].parent_path(), dir_.path());
  }
  ::close(held);
  EXPECT_TRUE(std::filesystem::exists(live));
}

TEST_F(swap_store_test, TheFolderLabelNamesTheFolderAndOnlySafeLabelsAreTaken) {
  io::swap_store_options o = store_options({dir_.path()}, MiB);
  o.folder_label = "rank-3";
  {
    const swap_store store(o);
    EXPECT_TRUE(store.folders()[0].filename().string().starts_with("zoe-swap-rank-3-")) << store.folders()[0];
  }
  o.folder_label = "../up";
  try {
    const swap_store refused(o);
    FAIL() << "a label with '/' was taken";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("folder_label '../up'"), std::string::npos) << e.what();
  }
}

TEST_F(swap_store_test, AProcessKilledMidWriteLeavesNothingAfterTheNextRunStarts) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      swap_store store(store_options({dir_.path()}, 16 * MiB));
      swap_channel ch(store);
      const swap_extent e = store.allocate(16 * MiB);
      auto data = random_bytes(16 * MiB, 1);
      for (;;) store_write(ch, e, 0, data);
    } catch (...) {
    }
    ::_exit(3);
  }
  // Wait until the child's folder exists and it is writing, then kill it without warning.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
      seen = seen || entry.path().filename().string().starts_with("zoe-swap-" + std::to_string(child) + "-");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(seen) << "the child never created its swap folder";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child should have been killed mid-write";

  swap_store next(store_options({dir_.path()}, MiB));
  std::size_t entries = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_.path())) {
    ++entries;
    EXPECT_EQ(entry.path(), next.folders()[0]) << "left behind: " << entry.path();
  }
  EXPECT_EQ(entries, 1u);
}

}  // namespace
}  // namespace zoe::testing
