// Failures injected under the engine: each must surface with path and offset, the caller's data
// must survive, and retryable results (short transfers, EINTR, EAGAIN) must be retried.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "backend_types.hpp"
#include "fault_injecting_backend.hpp"
#include "faulty_engine_fixture.hpp"
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
class fault_test : public faulty_engine_fixture<Backend> {
 protected:
  fault_test() : faulty_engine_fixture<Backend>({.block_size = 256 * KiB, .queue_depth = 4}) {}

  io_completion one(io_op op, std::span<std::byte> buffer, std::uint64_t offset) {
    this->engine_->submit({op, this->file_.get(), buffer, offset, 7});
    std::vector<io_completion> done;
    this->engine_->wait(done, 1);
    EXPECT_EQ(done.size(), 1u);
    return done.at(0);
  }
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

TYPED_TEST(fault_test, EagainIsRetriedAfterABackoffNotInATightLoop) {
  auto data = random_bytes(4096, 6);
  this->plan_->add({.inject_errno = EAGAIN, .times = -1});
  this->engine_->submit({io_op::write, this->file_.get(), data, 0, 7});
  std::vector<io_completion> done;
  // One poll sees the EAGAIN; resubmitting at once would only meet the same busy kernel again.
  EXPECT_EQ(this->engine_->poll(done), 0u);
  EXPECT_EQ(this->plan_->fired(), 1) << "poll resubmitted an EAGAIN'd operation without backing off";
  EXPECT_EQ(this->engine_->outstanding(), 1u);
  this->engine_->wait(done, 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].os_errno, EAGAIN);
}

// run() answers for its own requests only: earlier submit()ed ones, failed or not, stay for
// poll and wait, whatever order they finish in.
TYPED_TEST(fault_test, RunReportsOnlyItsOwnRequestsAndLeavesEarlierOnesToWait) {
  auto early_bad = random_bytes(4096, 8);
  auto early_good = random_bytes(4096, 9);
  auto own = random_bytes(4096, 10);
  this->plan_->add({.op = io_op::write, .begin = 0, .end = 4096, .inject_errno = EIO});
  this->engine_->submit({io_op::write, this->file_.get(), early_bad, 0, 1});
  this->engine_->submit({io_op::write, this->file_.get(), early_good, 4096, 2});
  const io_request mine{io_op::write, this->file_.get(), own, 8192, 3};
  EXPECT_NO_THROW(this->engine_->run(std::span(&mine, 1))) << "run() threw an earlier request's failure";
  EXPECT_EQ(this->engine_->outstanding(), 2u);
  std::vector<io_completion> done;
  while (this->engine_->outstanding() > 0) this->engine_->wait(done, 1);
  ASSERT_EQ(done.size(), 2u) << "the earlier requests' completions must reach wait()";
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.user_data < b.user_data; });
  EXPECT_EQ(done[0].user_data, 1u);
  EXPECT_FALSE(done[0].ok());
  EXPECT_EQ(done[1].user_data, 2u);
  EXPECT_TRUE(done[1].ok()) << done[1].message;
}

// A run() whose request k cannot start throws before starting requests 0..k-1: the caller may
// free their buffers as it unwinds, so none of them may be queued or in flight.
TYPED_TEST(fault_test, RunThatRefusesRequestKStartsNoneOfTheOthers) {
  auto data = random_bytes(MiB, 11);
  const io_request reqs[] = {{io_op::write, this->file_.get(), data, 0, 1}, {io_op::write, nullptr, data, 0, 2}};
  EXPECT_THROW(this->engine_->run(reqs), usage_error);
  EXPECT_EQ(this->engine_->outstanding(), 0u);
  EXPECT_THROW(this->engine_->submit(reqs), usage_error);
  EXPECT_EQ(this->engine_->outstanding(), 0u) << "submit() of several requests is all or nothing";
  std::vector<io_completion> done;
  EXPECT_EQ(this->engine_->wait(done, 1), 0u);
  EXPECT_EQ(std::filesystem::file_size(this->dir_ / "f.dat"), 0u) << "a refused request's neighbour was written";
}

// A backend whose submit() throws (broken) takes none of the batch: those requests fail with its
// reason, nothing stays counted as in flight, and the engine goes on working and closes.
TYPED_TEST(fault_test, BackendThatThrowsOnSubmitFailsTheRequestsAndTheEngineGoesOn) {
  auto data = random_bytes(MiB, 12);
  this->plan_->add(
      {.op = io_op::write, .begin = 512 * KiB, .end = 512 * KiB + 1, .inject_errno = ENOSPC, .throw_on_submit = true});
  const io_request w{io_op::write, this->file_.get(), data, 0, 1};
  try {
    this->engine_->run(std::span(&w, 1));
    FAIL() << "run() succeeded though the backend refused its write";
  } catch (const io_error& e) {
    EXPECT_EQ(e.os_errno(), ENOSPC);
    EXPECT_NE(std::string(e.what()).find("f.dat"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos) << e.what();
  }
  EXPECT_EQ(this->engine_->outstanding(), 0u);
  EXPECT_NO_THROW(this->engine_->run(std::span(&w, 1)));
  std::vector<std::byte> in(MiB);
  const io_request r{io_op::read, this->file_.get(), in, 0, 2};
  EXPECT_NO_THROW(this->engine_->run(std::span(&r, 1)));
  EXPECT_EQ(in, data);
}

TYPED_TEST(fault_test, ReadOfAnEmptyFileFailsAtOffsetZero) {
  std::vector<std::byte> in(8192);
  const auto c = this->one(io_op::read, in, 0);
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.message.find("unexpected end of file at offset 0"), std::string::npos) << c.message;
}

}  // namespace
}  // namespace zoe::testing
