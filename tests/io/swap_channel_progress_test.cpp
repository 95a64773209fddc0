// The swap channel's progress outside poll and wait, on every backend: one fd for all its
// engines (one per store path) wakes an event loop until every request is verified and handed
// out, wait() with a timeout hands out what completed and loses nothing, and a poll that lists the
// requests back from the kernel lists each before it verifies it.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>

#include "backend_types.hpp"
#include "fault_injecting_backend.hpp"
#include "swap_store_support.hpp"

namespace zoe::testing {
namespace {

using namespace std::chrono_literals;
using io::io_completion;
using io::io_op;
using io::swap_channel;
using io::swap_extent;
using io::swap_store;

template <typename Backend>
class swap_channel_progress_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto refusal = backend_refusal(Backend::name)) GTEST_SKIP() << *refusal;
  }

  /// A store over two paths whose engines sit on the fault wrapper, so a test can hold requests.
  std::unique_ptr<swap_store> make_store() {
    auto o = store_options({a_.path(), b_.path()}, 64 * store_chunk, Backend::name);
    o.prewrite = false;  // it would meet the test's hold rules
    o.wrap_backend = [plan = plan_](std::unique_ptr<io::io_backend> inner) -> std::unique_ptr<io::io_backend> {
      return std::make_unique<fault_injecting_backend>(std::move(inner), plan);
    };
    return std::make_unique<swap_store>(std::move(o));
  }

  static std::vector<io_completion> event_loop(swap_channel& ch) {
    std::vector<io_completion> done;
    const int fd = ch.notify_fd();
    while (ch.outstanding() > 0) {
      if (!readable(fd, stuck_ms)) {
        ADD_FAILURE() << "notify_fd stayed quiet with " << ch.outstanding() << " requests outstanding";
        break;
      }
      ch.poll(done);
    }
    return done;
  }

  scratch_dir a_;
  scratch_dir b_;
  std::shared_ptr<fault_plan> plan_ = std::make_shared<fault_plan>();
};

TYPED_TEST_SUITE(swap_channel_progress_test, raw_backend_types, backend_type_names);

TYPED_TEST(swap_channel_progress_test, AnIdleChannelLeavesItsFdQuietAfterAPoll) {
  auto store = this->make_store();
  swap_channel ch(*store);
  const int fd = ch.notify_fd();
  EXPECT_TRUE(readable(fd, 0)) << "the first notify_fd() must wake a waiter once, to poll";
  std::vector<io_completion> done;
  EXPECT_EQ(ch.poll(done), 0u);
  EXPECT_FALSE(readable(fd, 0)) << "a channel with nothing to do must not wake its event loop";
}

TYPED_TEST(swap_channel_progress_test, AnEventLoopOnOneFdServesEveryPathByteExact) {
  auto store = this->make_store();
  swap_channel ch(*store);
  // Striped over both paths, so both engines must wake the loop; reads in part go through the
  // channel's scratch and are verified before they are handed out.
  std::vector<swap_extent> extents;
  std::vector<std::vector<std::byte>> data;
  for (std::uint64_t i = 0; i < 6; ++i) {
    extents.push_back(store->allocate(5 * store_chunk + 77));
    data.push_back(random_bytes(extents.back().bytes, i + 1));
    ch.submit({io_op::write, extents.back(), 0, data.back(), i});
  }
  auto done = this->event_loop(ch);
  ASSERT_EQ(done.size(), extents.size());
  for (const auto& c : done) EXPECT_TRUE(c.ok()) << c.message;

  std::vector<std::vector<std::byte>> back;
  for (std::size_t i = 0; i < extents.size(); ++i) {
    back.emplace_back(extents[i].bytes - 1000);
    ch.submit({io_op::read, extents[i], 500, back.back(), i});
  }
  done = this->event_loop(ch);
  ASSERT_EQ(done.size(), extents.size());
  for (const auto& c : done) EXPECT_TRUE(c.ok()) << c.message;
  for (std::size_t i = 0; i < extents.size(); ++i) {
    EXPECT_TRUE(same_bytes(back[i], std::span(data[i]).subspan(500, back[i].size()))) << "extent " << i;
  }
}

TYPED_TEST(swap_channel_progress_test, ATimedWaitHandsOutWhatCompletedAndLosesNothing) {
  auto store = this->make_store();
  swap_channel ch(*store);
  const swap_extent first = store->allocate(store_chunk);   // chunk 0: the first path, offset 0
  const swap_extent second = store->allocate(store_chunk);  // chunk 1: the second path, offset 0
  auto one = random_bytes(store_chunk, 1);
  auto two = random_bytes(store_chunk, 2);
  store_write(ch, first, 0, one);
  store_write(ch, second, 0, two);
  this->plan_->add({.op = io_op::read, .hold = true});  // the next read, whichever path it takes
  std::vector<std::byte> back_one(store_chunk);
  std::vector<std::byte> back_two(store_chunk);
  ch.submit({io_op::read, first, 0, back_one, 1});
  ch.submit({io_op::read, second, 0, back_two, 2});
  std::vector<io_completion> done;
  const std::size_t got = ch.wait(done, 2, 20ms);
  EXPECT_EQ(got, done.size());
  ASSERT_LE(got, 1u) << "one of the reads is held";
  EXPECT_EQ(ch.outstanding(), 2 - got) << "what did not complete stays outstanding";

  this->plan_->release_held();
  while (ch.outstanding() > 0) ch.wait(done, ch.outstanding(), std::chrono::milliseconds(stuck_ms));
  ASSERT_EQ(done.size(), 2u);
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.user_data < b.user_data; });
  EXPECT_EQ(done[0].user_data, 1u);
  EXPECT_EQ(done[1].user_data, 2u);
  for (const auto& c : done) EXPECT_TRUE(c.ok()) << c.message;
  EXPECT_TRUE(same_bytes(back_one, one));
  EXPECT_TRUE(same_bytes(back_two, two));
}

// A caller that keeps its own queue-depth budget polls with a list of the requests back from the
// kernel: each request is listed once, in a call before the one that verifies it and hands out
// its completion (so the caller can start the next request before the hashing), and a damaged
// chunk is still caught: its data never comes out as good.
TYPED_TEST(swap_channel_progress_test, ARequestIsListedAsBackBeforeItIsVerifiedAndDamageIsStillCaught) {
  auto store = this->make_store();
  swap_channel ch(*store);
  const swap_extent good = store->allocate(store_chunk);     // chunk 0: the first path, offset 0
  const swap_extent damaged = store->allocate(store_chunk);  // chunk 1: the second path, offset 0
  auto good_data = random_bytes(store_chunk, 1);
  auto damaged_data = random_bytes(store_chunk, 2);
  store_write(ch, good, 0, good_data);
  store_write(ch, damaged, 0, damaged_data);
  flip_byte(only_swap_file(*store, 1), 10);

  std::vector<std::byte> good_back(store_chunk);
  std::vector<std::byte> damaged_back(store_chunk);
  ch.submit({io_op::read, good, 0, good_back, 1});
  ch.submit({io_op::read, damaged, 0, damaged_back, 2});
  std::map<std::uint64_t, int> listed_in;  // user_data: the call that listed it
  std::map<std::uint64_t, io_completion> completed;
  std::map<std::uint64_t, int> completed_in;
  const int fd = ch.notify_fd();
  for (int call = 0; ch.outstanding() > 0; ++call) {
    ASSERT_TRUE(readable(fd, stuck_ms)) << "notify_fd stayed quiet with " << ch.outstanding() << " outstanding";
    std::vector<io_completion> done;
    std::vector<std::uint64_t> landed;
    ch.poll(done, landed);
    for (const std::uint64_t u : landed) EXPECT_TRUE(listed_in.emplace(u, call).second) << u << " listed twice";
    for (auto& c : done) {
      completed_in[c.user_data] = call;
      completed.emplace(c.user_data, std::move(c));
    }
  }
  ASSERT_EQ(completed.size(), 2u);
  for (const auto& [u, call] : completed_in) {
    ASSERT_TRUE(listed_in.contains(u)) << u << " was handed out without being listed";
    EXPECT_LT(listed_in[u], call) << u << " was verified in the call that listed it";
  }
  EXPECT_TRUE(completed[1].ok()) << completed[1].message;
  EXPECT_TRUE(same_bytes(good_back, good_data));
  EXPECT_TRUE(completed[2].corrupt) << completed[2].message;
  EXPECT_EQ(completed[2].bytes, 0u);
}

}  // namespace
}  // namespace zoe::testing
