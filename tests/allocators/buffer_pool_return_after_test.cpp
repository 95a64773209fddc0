// buffer_lease::release_after: a lease read by stream work returns to its pool only once the
// stream has run that work, without anyone waiting or polling for it. Typed over the devices a
// pool's memory comes from: the host device, and the fake device whose host tasks run late.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

#include "fake_device.hpp"
#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/allocators/poison.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"

namespace zoe::allocators {
namespace {

using namespace std::chrono_literals;

struct host_rig {
  std::unique_ptr<device> owner = make_host_device(1 * MiB);
  device& dev = *owner;
};

// Every host task sleeps before it runs, so a return stays in flight for a while.
struct late_fake_rig {
  testing::fake_device fake{make_host_device(1 * MiB)};
  device& dev = fake;
  late_fake_rig() { fake.delay_tasks(2ms); }
};

// Holds a stream at a host task until open(), so work queued behind it is certainly in flight.
class stream_gate {
 public:
  stream_gate(device& dev, stream_view stream) {
    dev.launch_host(stream, [l = latch_] { l->wait(); });
  }
  ~stream_gate() { open(); }
  stream_gate(const stream_gate&) = delete;
  stream_gate& operator=(const stream_gate&) = delete;
  void open() {
    if (!opened_.exchange(true)) latch_->count_down();
  }

 private:
  std::shared_ptr<std::latch> latch_ = std::make_shared<std::latch>(1);
  std::atomic<bool> opened_{false};
};

// Waits (in the test, not the pool) until `n` callers have queued on `pool`.
void await_waiters(const buffer_pool& pool, std::uint64_t n) {
  while (pool.stats().waits < n) std::this_thread::sleep_for(1ms);
}

template <class Rig>
class buffer_pool_return_after : public ::testing::Test {
 protected:
  Rig rig_;
  device& dev_ = rig_.dev;
  pinned_host_resource resource_{dev_};
  buffer_pool pool_{resource_, {.buffer_count = 2, .buffer_size = 8192, .name = "fetch buffers"}};
  device_stream stream_ = dev_.create_stream();  // destroyed first: its work has run before the pool goes
};

class rig_names {
 public:
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, host_rig> ? "host" : "late_fake";
  }
};

using rigs = ::testing::Types<host_rig, late_fake_rig>;
TYPED_TEST_SUITE(buffer_pool_return_after, rigs, rig_names);

TYPED_TEST(buffer_pool_return_after, ReturnsOnlyOnceTheStreamHasRunTheWorkQueuedBeforeIt) {
  auto& pool = this->pool_;
  auto a = pool.acquire();
  auto b = pool.acquire();
  const std::size_t index = a.index();
  stream_gate gate(this->dev_, this->stream_.view());
  a.release_after(this->dev_, this->stream_.view());
  EXPECT_FALSE(static_cast<bool>(a)) << "the lease is handed over";
  EXPECT_FALSE(pool.try_acquire().has_value()) << "the buffer came back before the work queued ahead of it ran";
  EXPECT_EQ(pool.stats().in_flight, 1U);
  gate.open();
  this->dev_.synchronize(this->stream_.view());
  auto again = pool.try_acquire();
  ASSERT_TRUE(again.has_value()) << "synchronizing the stream must find the buffer back in the pool";
  EXPECT_EQ(again->index(), index);
  const buffer_pool_stats s = pool.stats();
  EXPECT_EQ(s.deferred_returns, 1U);
  EXPECT_EQ(s.in_flight, 0U);
}

TYPED_TEST(buffer_pool_return_after, TheCopyReadsTheBufferBeforeItIsReturnedAndPoisoned) {
  device& dev = this->dev_;
  const stream_view stream = this->stream_.view();
  auto lease = this->pool_.acquire();
  const std::size_t index = lease.index();
  for (std::size_t i = 0; i < lease.size(); ++i) lease.data()[i] = static_cast<std::byte>(i * 7 + 1);
  const std::vector<std::byte> sent(lease.data(), lease.data() + lease.size());
  void* on_device = dev.allocate(lease.size(), stream);
  {
    stream_gate gate(dev, stream);
    dev.copy_async(on_device, lease.data(), lease.size(), copy_kind::host_to_device, stream);
    lease.release_after(dev, stream);
  }
  std::vector<std::byte> arrived(sent.size());
  dev.copy_async(arrived.data(), on_device, arrived.size(), copy_kind::device_to_host, stream);
  dev.synchronize(stream);
  dev.deallocate(on_device, sent.size(), stream);
  EXPECT_EQ(arrived, sent) << "the copy queued before release_after must read the leased bytes";
  if (poisons_freed_memory()) {
    const std::span<std::byte> returned = this->pool_.buffers()[index];
    EXPECT_TRUE(std::all_of(returned.begin(), returned.end(), [](std::byte x) {
      return x == static_cast<std::byte>(poison_byte);
    })) << "a returned buffer is poisoned, after the copy read it";
  }
}

TYPED_TEST(buffer_pool_return_after, AWaitingAcquireWakesWhenTheStreamReachesTheReturn) {
  auto& pool = this->pool_;
  auto a = pool.acquire();
  auto b = pool.acquire();
  stream_gate gate(this->dev_, this->stream_.view());
  a.release_after(this->dev_, this->stream_.view());
  std::atomic<bool> opened{false};
  std::jthread taker([&] {
    const auto both = pool.acquire_many(2, 10s);
    EXPECT_TRUE(opened.load()) << "acquire_many returned before the deferred buffer could come back";
    EXPECT_EQ(both.size(), 2U);
  });
  await_waiters(pool, 1);
  b.release();
  opened = true;
  gate.open();
  taker.join();
  EXPECT_EQ(pool.available(), 2U);
}

TYPED_TEST(buffer_pool_return_after, DestroyingThePoolWaitsForReturnsInFlight) {
  auto pool =
      std::make_unique<buffer_pool>(this->resource_, buffer_pool_options{.buffer_count = 1, .buffer_size = 4096});
  std::atomic<bool> opened{false};
  {
    stream_gate gate(this->dev_, this->stream_.view());
    pool->acquire().release_after(this->dev_, this->stream_.view());
    std::jthread opener([&] {
      std::this_thread::sleep_for(20ms);
      opened = true;
      gate.open();
    });
    pool.reset();  // its memory must outlive the host task that returns the buffer
    EXPECT_TRUE(opened.load()) << "the pool was destroyed while a return was still queued on the stream";
  }
}

TEST(buffer_pool_return_after, ARefusedLaunchLeavesTheLeaseHoldingItsBuffer) {
  testing::fake_device fake(make_host_device(1 * MiB));
  pinned_host_resource resource(fake);
  buffer_pool pool(resource, {.buffer_count = 2, .buffer_size = 4096});
  const device_stream stream = fake.create_stream();
  auto lease = pool.acquire();
  fake.refuse_launches(true);
  EXPECT_THROW(lease.release_after(fake, stream.view()), device_error);
  fake.refuse_launches(false);
  EXPECT_TRUE(static_cast<bool>(lease)) << "a failed release_after must not lose the buffer";
  EXPECT_EQ(pool.available(), 1U);
  EXPECT_EQ(pool.stats().deferred_returns, 0U);
  EXPECT_EQ(pool.stats().in_flight, 0U);
  lease.release();
  EXPECT_EQ(pool.available(), 2U);
}

TEST(buffer_pool_return_after, AnEmptyLeaseIsAUsageError) {
  const auto dev = make_host_device(1 * MiB);
  const device_stream stream = dev->create_stream();
  buffer_lease empty;
  EXPECT_THROW(empty.release_after(*dev, stream.view()), usage_error);
}

}  // namespace
}  // namespace zoe::allocators
