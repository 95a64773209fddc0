// The buffer pool: back-pressure instead of asserts, timeouts, leases and one-time registration.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"

namespace zoe::allocators {
namespace {

using namespace std::chrono_literals;

class buffer_pool_test : public ::testing::Test {
 protected:
  std::unique_ptr<device> dev_ = make_host_device(1 * MiB);
  pinned_host_resource resource_{*dev_};
  buffer_pool pool_{resource_, {.buffer_count = 2, .buffer_size = 10000, .name = "swap buffers"}};
};

TEST_F(buffer_pool_test, LeasesAreDistinctAlignedAndReturnOnDestruction) {
  {
    auto a = pool_.acquire();
    auto b = pool_.acquire(1s);
    EXPECT_NE(a.data(), b.data());
    EXPECT_NE(a.index(), b.index());
    EXPECT_EQ(a.size(), 10000U);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 4096, 0U);
    EXPECT_EQ(pool_.available(), 0U);
    EXPECT_FALSE(pool_.try_acquire().has_value());
    buffer_lease moved = std::move(a);
    EXPECT_FALSE(static_cast<bool>(a));  // NOLINT(bugprone-use-after-move): testing the moved-from state
    EXPECT_EQ(pool_.available(), 0U);
  }
  EXPECT_EQ(pool_.available(), 2U);
  EXPECT_EQ(resource_.bytes_in_use(), 2 * 12 * KiB) << "returned leases keep the pool's one mapping: two "
                                                       "10000-byte buffers at a 4 KiB-aligned stride";
}

TEST_F(buffer_pool_test, ExhaustionTimesOutNamingThePool) {
  auto a = pool_.acquire();
  auto b = pool_.acquire();
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)pool_.acquire(30ms);
    FAIL() << "an exhausted pool must time out";
  } catch (const timeout_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("swap buffers"), std::string::npos) << what;
    EXPECT_NE(what.find("2 buffers"), std::string::npos) << what;
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms);
  EXPECT_EQ(pool_.stats().timeouts, 1U);
  EXPECT_EQ(pool_.stats().min_available, 0U);
}

TEST_F(buffer_pool_test, ExhaustionBlocksUntilALeaseComesBack) {
  auto a = pool_.acquire();
  auto b = pool_.acquire();
  std::atomic<bool> returned{false};
  std::jthread giver([&] {
    std::this_thread::sleep_for(20ms);
    returned = true;
    b.release();
  });
  auto c = pool_.acquire(10s);
  EXPECT_TRUE(returned.load()) << "acquire returned before any buffer came back";
  EXPECT_EQ(pool_.stats().waits, 1U);
}

TEST_F(buffer_pool_test, ManyThreadsShareFewBuffers) {
  std::atomic<int> held{0};
  std::atomic<int> max_held{0};
  std::vector<std::jthread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto lease = pool_.acquire(10s);
        const int now = ++held;
        int seen = max_held.load();
        while (now > seen && !max_held.compare_exchange_weak(seen, now)) {
        }
        --held;
      }
    });
  }
  threads.clear();
  EXPECT_LE(max_held.load(), 2);
  EXPECT_EQ(pool_.available(), 2U);
  EXPECT_EQ(pool_.stats().acquires, 800U);
}

struct recording_registrar final : buffer_registrar {
  std::vector<std::span<std::byte>> seen;
  int calls = 0;
  bool fail = false;
  void register_buffers(std::span<const std::span<std::byte>> buffers) override {
    ++calls;
    if (fail) throw io_error("io_uring_register_buffers refused", 12);
    seen.assign(buffers.begin(), buffers.end());
  }
};

TEST_F(buffer_pool_test, HandsItsBuffersToARegistrarOnce) {
  recording_registrar failing;
  failing.fail = true;
  EXPECT_THROW(pool_.register_with(failing), io_error);
  EXPECT_FALSE(pool_.registered());

  recording_registrar r;
  pool_.register_with(r);
  EXPECT_TRUE(pool_.registered());
  ASSERT_EQ(r.seen.size(), 2U);
  auto lease = pool_.acquire();
  EXPECT_EQ(r.seen[lease.index()].data(), lease.data()) << "lease index addresses the registered buffer";
  EXPECT_EQ(r.seen[lease.index()].size(), lease.size());
  EXPECT_THROW(pool_.register_with(r), usage_error);
  EXPECT_EQ(r.calls, 1);
}

TEST(buffer_pool, RejectsNonsenseSizes) {
  const auto dev = make_host_device(1 * MiB);
  pinned_host_resource resource(*dev);
  EXPECT_THROW(buffer_pool(resource, {.buffer_count = 0, .buffer_size = 4096}), usage_error);
  EXPECT_THROW(buffer_pool(resource, {.buffer_count = 2, .buffer_size = 0}), usage_error);
  EXPECT_THROW(buffer_pool(resource, {.buffer_count = 2, .buffer_size = 4096, .alignment = 3000}), usage_error);
}

// A buffer size within the alignment of 2^64 does not round up to a stride: it is refused like a
// count and size whose product overflows, naming the size, before any memory is taken.
TEST(buffer_pool, RefusesABufferSizeWhoseRoundingWraps) {
  const auto dev = make_host_device(1 * MiB);
  pinned_host_resource resource(*dev);
  const std::size_t huge = SIZE_MAX - 10;
  try {
    buffer_pool pool(resource, {.buffer_count = 1, .buffer_size = huge, .name = "swap buffers"});
    FAIL() << "a buffer size that wraps when rounded must be refused";
  } catch (const usage_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("swap buffers"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(huge)), std::string::npos) << what;
  }
  EXPECT_EQ(resource.peak_bytes_in_use(), 0U);
}

}  // namespace
}  // namespace zoe::allocators
