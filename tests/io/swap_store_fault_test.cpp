// The fault-injecting backend under the swap store, on every backend: a failed write leaves its
// chunks unreadable (their contents are not known good) until they are written again, and a
// failed read reports the drive's error without harming the data.
#include <gtest/gtest.h>

#include <cerrno>

#include "backend_types.hpp"
#include "fault_injecting_backend.hpp"
#include "swap_store_support.hpp"

namespace zoe::testing {
namespace {

using io::io_op;
using io::swap_channel;
using io::swap_extent;
using io::swap_store;

template <typename Backend>
class swap_store_fault_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto refusal = backend_refusal(Backend::name)) GTEST_SKIP() << *refusal;
    auto options = store_options({dir_.path()}, 16 * store_chunk, Backend::name);
    options.wrap_backend = [plan = plan_](std::unique_ptr<io::io_backend> inner) -> std::unique_ptr<io::io_backend> {
      return std::make_unique<fault_injecting_backend>(std::move(inner), plan);
    };
    store_ = std::make_unique<swap_store>(std::move(options));
    channel_ = std::make_unique<swap_channel>(*store_);
  }

  scratch_dir dir_;
  std::shared_ptr<fault_plan> plan_ = std::make_shared<fault_plan>();
  std::unique_ptr<swap_store> store_;
  std::unique_ptr<swap_channel> channel_;
};

TYPED_TEST_SUITE(swap_store_fault_test, raw_backend_types, backend_type_names);

TYPED_TEST(swap_store_fault_test, AFailedWriteLeavesItsExtentUnreadableUntilWrittenAgain) {
  swap_channel& ch = *this->channel_;
  const swap_extent e = this->store_->allocate(4 * store_chunk);  // at the start of the one file
  auto first = random_bytes(e.bytes, 1);
  store_write(ch, e, 0, first);
  this->plan_->add({.op = io_op::write, .begin = 2 * store_chunk, .end = 2 * store_chunk + 1, .inject_errno = EIO});
  auto second = random_bytes(e.bytes, 2);
  try {
    store_write(ch, e, 0, second);
    FAIL() << "the injected EIO was lost";
  } catch (const io_error& err) {
    EXPECT_EQ(err.os_errno(), EIO) << err.what();
  }
  EXPECT_EQ(this->plan_->fired(), 1);
  std::vector<std::byte> back(e.bytes);
  const auto c = store_read(ch, e, 2 * store_chunk, std::span(back).first(store_chunk));
  EXPECT_FALSE(c.ok()) << "read chunk 2 back after its write failed";
  EXPECT_FALSE(c.corrupt) << "refused before reading, not a checksum mismatch";
  EXPECT_NE(c.message.find("swap extent " + std::to_string(e.id)), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("failed"), std::string::npos) << c.message;
  store_write(ch, e, 0, second);
  const auto again = store_read(ch, e, 0, back);
  ASSERT_TRUE(again.ok()) << again.message;
  EXPECT_TRUE(same_bytes(back, second));
}

TYPED_TEST(swap_store_fault_test, AFailedReadReportsTheErrorAndTheDataStaysReadable) {
  swap_channel& ch = *this->channel_;
  const swap_extent e = this->store_->allocate(4 * store_chunk);
  auto data = random_bytes(e.bytes, 3);
  store_write(ch, e, 0, data);
  this->plan_->add({.op = io_op::read, .begin = store_chunk, .end = store_chunk + 1, .inject_errno = EIO});
  std::vector<std::byte> back(e.bytes);
  const auto c = store_read(ch, e, 0, back);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.os_errno, EIO) << c.message;
  EXPECT_NE(c.message.find("Input/output error"), std::string::npos) << c.message;
  const auto again = store_read(ch, e, 0, back);
  ASSERT_TRUE(again.ok()) << again.message;
  EXPECT_TRUE(same_bytes(back, data));
}

}  // namespace
}  // namespace zoe::testing
