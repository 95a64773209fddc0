// Opening files: refusals name the path; O_DIRECT falls back to buffered where refused; a real
// full disk surfaces as ENOSPC with the caller's data intact.
#include <gtest/gtest.h>

#include <sys/syscall.h>

#include <cerrno>
#include <cstring>

#include "io_test_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/engine_factory.hpp"
#include "zoe/io/file.hpp"
#include "zoe/io/io_engine.hpp"

namespace zoe::testing {
namespace {

using io::file;
using io::open_mode;

TEST(file_test, MissingDirectoryIsNamed) {
  scratch_dir dir;
  const auto path = dir / "no-such-dir" / "x.dat";
  try {
    file f(path, open_mode::read_write, {.create = true});
    FAIL() << "opened a file in a missing directory";
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
    EXPECT_EQ(e.os_errno(), ENOENT);
  }
}

TEST(file_test, DirectoryIsRefusedByName) {
  scratch_dir dir;
  try {
    file f(dir.path(), open_mode::read_only);
    FAIL() << "opened a directory as a file";
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path().string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("directory"), std::string::npos) << e.what();
  }
}

// A stat that fails keeps its own errno in the error (it used to become EINVAL, "not a regular
// file", hiding the cause).
TEST(file_test, AFailedStatReportsItsOwnErrno) {
  scratch_dir dir;
  write_whole_file(dir / "a.dat", random_bytes(10, 1));
  const auto report = run_with_syscalls_failing({__NR_fstat, __NR_newfstatat}, EACCES, [&] {
    try {
      file f(dir / "a.dat", open_mode::read_only);
      return std::string("opened");
    } catch (const io_error& e) {
      return std::to_string(e.os_errno()) + "\n" + e.what();
    }
  });
  if (!report) GTEST_SKIP() << "seccomp filters are written for x86-64 only";
  EXPECT_EQ(report->rfind(std::to_string(EACCES) + "\n", 0), 0u) << *report;
  EXPECT_NE(report->find("cannot stat '" + (dir / "a.dat").string() + "'"), std::string::npos) << *report;
  EXPECT_NE(report->find("Permission denied"), std::string::npos) << *report;
}

TEST(file_test, WriteToAReadOnlyFileIsAUsageError) {
  scratch_dir dir;
  write_whole_file(dir / "ro.dat", random_bytes(10, 1));
  file f(dir / "ro.dat", open_mode::read_only);
  auto engine = io::make_engine("posix", {});
  auto data = random_bytes(10, 2);
  EXPECT_THROW(engine->submit({io::io_op::write, &f, data, 0, 0}), usage_error);
}

TEST(file_test, UnknownEngineIsNamed) {
  try {
    (void)io::make_engine("warp-drive", {});
    FAIL();
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("warp-drive"), std::string::npos);
  }
}

TEST(file_test, BadBlockSizeIsNamed) {
  try {
    (void)io::make_engine("posix", {.block_size = 1000});
    FAIL();
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("block_size"), std::string::npos);
  }
}

TEST(file_test, RamfsFallsBackToBufferedWithOneWarningNamingThePath) {
  const auto mount = scoped_mount::ramfs();
  if (!mount) GTEST_SKIP() << "mounting ramfs is refused here";
  ::testing::internal::CaptureStderr();
  file f(mount->path() / "a.dat", open_mode::read_write, {.create = true});
  file g(mount->path() / "b.dat", open_mode::read_write, {.create = true});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(f.direct());
  EXPECT_FALSE(g.direct());
  EXPECT_NE(err.find((mount->path() / "a.dat").string()), std::string::npos) << err;
  EXPECT_NE(err.find("O_DIRECT"), std::string::npos) << err;
  EXPECT_EQ(err.find("b.dat"), std::string::npos) << "warn once per directory, got: " << err;

  auto engine = io::make_engine("posix", {});
  auto data = random_bytes(MiB + 3, 3);
  const io::io_request w{io::io_op::write, &f, data, 5, 0};
  engine->run(std::span(&w, 1));
  std::vector<std::byte> in(data.size());
  const io::io_request r{io::io_op::read, &f, in, 5, 0};
  engine->run(std::span(&r, 1));
  EXPECT_EQ(in, data);
}

TEST(file_test, RealFullDiskIsEnospcNamingThePathAndKeepsTheData) {
  const auto mount = scoped_mount::small_ext4(8 * MiB);
  if (!mount) GTEST_SKIP() << "mounting a loop device is refused here";
  file f(mount->path() / "big.dat", open_mode::read_write, {.create = true});
  auto engine = io::make_engine("posix", {});
  auto data = random_bytes(16 * MiB, 4);
  const auto copy = data;
  engine->submit({io::io_op::write, &f, data, 0, 0});
  std::vector<io::io_completion> done;
  engine->wait(done, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].ok());
  EXPECT_EQ(done[0].os_errno, ENOSPC);
  EXPECT_NE(done[0].message.find("No space left on device"), std::string::npos) << done[0].message;
  EXPECT_NE(done[0].message.find((mount->path() / "big.dat").string()), std::string::npos) << done[0].message;
  EXPECT_EQ(data, copy);
}

}  // namespace
}  // namespace zoe::testing
