// acquire_many: several buffers all at once or none, served first come first served, so a stage
// that needs several (read-ahead) cannot take part of the pool and starve another (write-behind),
// and a caller waiting for several is not starved by a stream of single acquires.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"

namespace zoe::allocators {
namespace {

using namespace std::chrono_literals;

class buffer_pool_many : public ::testing::Test {
 protected:
  std::unique_ptr<device> dev_ = make_host_device(1 * MiB);
  pinned_host_resource resource_{*dev_};
  buffer_pool pool_{resource_, {.buffer_count = 4, .buffer_size = 4096, .name = "optimizer buffers"}};

  // Waits (in the test, not the pool) until `n` callers have queued.
  void await_waiters(std::uint64_t n) const {
    while (pool_.stats().waits < n) std::this_thread::sleep_for(1ms);
  }
};

TEST_F(buffer_pool_many, TakesAllOrNothing) {
  auto held = pool_.acquire_many(2);
  ASSERT_EQ(held.size(), 2U);
  EXPECT_FALSE(pool_.try_acquire_many(3).has_value());
  EXPECT_EQ(pool_.available(), 2U) << "a refused multi-acquire must take no buffer";
  auto rest = pool_.try_acquire_many(2);
  ASSERT_TRUE(rest.has_value());
  std::set<std::size_t> indices;
  for (const auto* group : {&held, &*rest}) {
    for (const buffer_lease& l : *group) {
      EXPECT_EQ(l.size(), 4096U);
      indices.insert(l.index());
    }
  }
  EXPECT_EQ(indices.size(), 4U) << "the leases must be distinct buffers";
  EXPECT_EQ(pool_.available(), 0U);
  EXPECT_TRUE(pool_.acquire_many(0).empty());
  const auto none = pool_.try_acquire_many(0);
  ASSERT_TRUE(none.has_value()) << "nothing can always be had";
  EXPECT_TRUE(none->empty());
  held.clear();
  rest.reset();
  EXPECT_EQ(pool_.available(), 4U);
  EXPECT_EQ(pool_.stats().acquires, 4U);
}

TEST_F(buffer_pool_many, AskingForMoreThanThePoolHasIsAUsageErrorNamingIt) {
  for (const auto& ask :
       {+[](buffer_pool& p) { (void)p.acquire_many(5); }, +[](buffer_pool& p) { (void)p.acquire_many(5, 1s); },
        +[](buffer_pool& p) { (void)p.try_acquire_many(5); }}) {
    try {
      ask(pool_);
      ADD_FAILURE() << "5 buffers of a pool of 4 can never be had";
    } catch (const usage_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("optimizer buffers"), std::string::npos) << what;
      EXPECT_NE(what.find('5'), std::string::npos) << what;
      EXPECT_NE(what.find("buffer_count"), std::string::npos) << what;
    }
  }
  EXPECT_EQ(pool_.available(), 4U);
}

TEST_F(buffer_pool_many, ATimeoutHoldsNoBufferAndNamesThePool) {
  auto held = pool_.acquire_many(3);
  try {
    (void)pool_.acquire_many(2, 20ms);
    FAIL() << "two buffers of a pool with one free must time out";
  } catch (const timeout_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("optimizer buffers"), std::string::npos) << what;
    EXPECT_NE(what.find("2 buffers"), std::string::npos) << what;
  }
  EXPECT_EQ(pool_.available(), 1U);
  EXPECT_EQ(pool_.stats().timeouts, 1U);
  EXPECT_TRUE(pool_.try_acquire().has_value()) << "the timed-out caller must have left the queue";
}

// A single acquire arriving after a waiting multi-acquire does not pass it, even with a buffer
// free: the multi-acquire is served first.
TEST_F(buffer_pool_many, AWaitingMultiAcquireIsServedBeforeLaterSingleOnes) {
  auto held = pool_.acquire_many(4);
  std::atomic<bool> many_done{false};
  std::jthread many([&] {
    auto all = pool_.acquire_many(4, 10s);
    many_done = true;
  });
  await_waiters(1);
  std::jthread single([&] {
    auto one = pool_.acquire(10s);
    EXPECT_TRUE(many_done.load()) << "a later single acquire was served before the waiting multi-acquire";
  });
  await_waiters(2);
  held.pop_back();
  EXPECT_FALSE(pool_.try_acquire().has_value()) << "try_acquire passed callers waiting in the queue";
  EXPECT_FALSE(pool_.try_acquire_many(1).has_value()) << "try_acquire_many passed callers waiting in the queue";
  held.clear();
  many.join();
  single.join();
  EXPECT_EQ(pool_.available(), 4U);
}

// The first waiter timing out lets the next one in when the free buffers suffice for it.
TEST_F(buffer_pool_many, AHeadWaiterThatTimesOutWakesTheNext) {
  auto held = pool_.acquire_many(4);
  std::atomic<bool> head_gave_up{false};
  std::jthread head([&] {
    EXPECT_THROW((void)pool_.acquire_many(4, 30ms), timeout_error);
    head_gave_up = true;
  });
  await_waiters(1);
  std::jthread next([&] {
    auto one = pool_.acquire(10s);
    EXPECT_TRUE(head_gave_up.load()) << "the second waiter passed the first";
  });
  await_waiters(2);
  held.pop_back();  // one free: not enough for the head, enough for the next once the head leaves
  head.join();
  next.join();
  EXPECT_EQ(pool_.stats().timeouts, 1U);
}

// Single acquires churning on every thread cannot keep a multi-acquire from its turn.
TEST_F(buffer_pool_many, SingleAcquiresDoNotStarveAMultiAcquire) {
  std::atomic<bool> stop{false};
  std::atomic<int> held{0};
  std::atomic<int> max_held{0};
  const auto count_held = [&](int n) {
    const int now = held += n;
    int seen = max_held.load();
    while (now > seen && !max_held.compare_exchange_weak(seen, now)) {
    }
  };
  std::vector<std::jthread> churners;
  for (int t = 0; t < 2; ++t) {
    churners.emplace_back([&] {
      while (!stop.load()) {
        auto lease = pool_.acquire(10s);
        count_held(1);
        std::this_thread::yield();
        held -= 1;
      }
    });
  }
  for (int round = 0; round < 50; ++round) {
    auto all = pool_.acquire_many(3, 10s);  // throws timeout_error if starved
    count_held(3);
    ASSERT_EQ(all.size(), 3U);
    held -= 3;
  }
  stop = true;
  churners.clear();
  EXPECT_LE(max_held.load(), 4) << "more buffers out than the pool has";
  EXPECT_EQ(pool_.available(), 4U);
  EXPECT_EQ(pool_.stats().timeouts, 0U);
}

}  // namespace
}  // namespace zoe::allocators
