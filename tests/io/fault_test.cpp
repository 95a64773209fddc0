// Failures injected under the engine: each must surface with path and offset, the caller's data
// must survive, and retryable results (short transfers, EINTR, EAGAIN) must be retried.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "backend_types.hpp"
#include "fault_injecting_backend.hpp"
#include "io_test_support.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/engine_factory.hpp"
#include "zoe/io/file.hpp"
#include "zoe/io/io_engine.hpp"

namespace zoe::testing {
namespace {

using io::io_completion;
using io::io_op;
using io::io_request;

// Every backend under the wrapper: the engine's checks must not depend on which one reports.
template <typename Backend>
class fault_test : public ::testing::Test {
 protected:
  void SetUp() override {
    plan_ = std::make_shared<fault_plan>();
    const io::engine_options o{.block_size = 256 * KiB, .queue_depth = 4};
    std::unique_ptr<io::io_backend> inner;
    try {
      inner = Backend::make(o);
    } catch (const std::exception& e) {
      GTEST_SKIP() << e.what();
    }
    engine_ = std::make_unique<io::io_engine>(std::make_unique<fault_injecting_backend>(std::move(inner), plan_), o);
    file_ = std::make_unique<io::file>(dir_ / "f.dat", io::open_mode::read_write, io::file_options{.create = true});
  }

  io_completion one(io_op op, std::span<std::byte> buffer, std::uint64_t offset) {
    engine_->submit({op, file_.get(), buffer, offset, 7});
    std::vector<io_completion> done;
    engine_->wait(done, 1);
    EXPECT_EQ(done.size(), 1u);
    return done.at(0);
  }

  scratch_dir dir_;
  std::shared_ptr<fault_plan> plan_;
  std::unique_ptr<io::io_engine> engine_;
  std::unique_ptr<io::file> file_;
};

TYPED_TEST_SUITE(fault_test, raw_backend_types, backend_type_names);

TYPED_TEST(fault_test, InjectedEioOnWriteNamesPathAndOffsetAndKeepsTheBuffer) {
  auto data = random_bytes(MiB, 1);
  const auto copy = data;
  this->plan_->add({.op = io_op::write, .begin = 512 * KiB, .end = 512 * KiB + 1, .inject_errno = EIO});
  const auto c = this->one(io_op::write, data, 0);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.os_errno, EIO);
  EXPECT_NE(c.message.find("f.dat"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("offset 524288"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("Input/output error"), std::string::npos) << c.message;
  EXPECT_EQ(data, copy) << "a failed write must leave the caller's buffer intact";
  EXPECT_EQ(this->plan_->fired(), 1);
}

TYPED_TEST(fault_test, InjectedEnospcSaysSoAndNamesThePath) {
  auto data = random_bytes(10000, 2);
  const auto copy = data;
  this->plan_->add({.op = io_op::write, .inject_errno = ENOSPC});
  const auto c = this->one(io_op::write, std::span(data).subspan(1), 3);  // unaligned: the bounce path
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.os_errno, ENOSPC);
  EXPECT_NE(c.message.find("No space left on device"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find((this->dir_ / "f.dat").string()), std::string::npos) << c.message;
  EXPECT_EQ(data, copy);
}

TYPED_TEST(fault_test, InjectedEioOnReadFailsTheRead) {
  auto data = random_bytes(MiB, 3);
  ASSERT_TRUE(this->one(io_op::write, data, 0).ok());
  this->plan_->add({.op = io_op::read, .begin = 0, .end = 1, .inject_errno = EIO});
  std::vector<std::byte> in(MiB);
  const auto c = this->one(io_op::read, in, 0);
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.message.find("read of"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("offset 0"), std::string::npos) << c.message;
}

TYPED_TEST(fault_test, ShortTransfersAreResubmittedUntilComplete) {
  auto data = random_bytes(MiB + 5, 4);
  this->plan_->add({.short_to = 4096, .times = -1});  // every operation moves one block at a time
  ASSERT_TRUE(this->one(io_op::write, data, 3).ok());
  std::vector<std::byte> in(data.size());
  const auto c = this->one(io_op::read, in, 3);
  ASSERT_TRUE(c.ok()) << c.message;
  EXPECT_EQ(in, data);
  EXPECT_GT(this->plan_->fired(), 256);
  const auto disk = read_whole_file(this->dir_ / "f.dat");
  ASSERT_EQ(disk.size(), data.size() + 3);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), disk.begin() + 3));
}

TYPED_TEST(fault_test, EintrAndEagainAreRetried) {
  auto data = random_bytes(300 * KiB, 5);
  this->plan_->add({.inject_errno = EINTR, .times = 3});
  this->plan_->add({.inject_errno = EAGAIN, .times = 3});
  ASSERT_TRUE(this->one(io_op::write, data, 0).ok());
  std::vector<std::byte> in(data.size());
  ASSERT_TRUE(this->one(io_op::read, in, 0).ok());
  EXPECT_EQ(in, data);
  EXPECT_EQ(this->plan_->fired(), 6);
}

TYPED_TEST(fault_test, EndlessEagainEventuallyFails) {
  auto data = random_bytes(4096, 6);
  this->plan_->add({.inject_errno = EAGAIN, .times = -1});
  const auto c = this->one(io_op::write, data, 0);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.os_errno, EAGAIN);
}

TYPED_TEST(fault_test, FailedReadModifyWriteReleasesItsBlockLock) {
  auto data = random_bytes(100, 7);
  this->plan_->add({.op = io_op::write, .inject_errno = EIO, .times = 1});
  EXPECT_FALSE(this->one(io_op::write, data, 10).ok());
  // The same block again: would hang if the first write had kept its lock.
  const auto c = this->one(io_op::write, data, 20);
  EXPECT_TRUE(c.ok()) << c.message;
}

TYPED_TEST(fault_test, ReadOfAnEmptyFileFailsAtOffsetZero) {
  std::vector<std::byte> in(8192);
  const auto c = this->one(io_op::read, in, 0);
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.message.find("unexpected end of file at offset 0"), std::string::npos) << c.message;
}

}  // namespace
}  // namespace zoe::testing
