// The host device: what only it promises (its budget's messages, alignment, the environment, the
// streaming copy, mlock) and its concurrency. The contract every device keeps is device_contract,
// run here on the host device and on the fake device over it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include <sys/mman.h>

#include "device_contract.hpp"
#include "fake_device.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/gpu_probe.hpp"
#include "zoe/core/units.hpp"

namespace zoe {
namespace {

using namespace std::chrono_literals;

TEST(host_device, OverBudgetFailsCleanlyAndUsageReturnsToZero) {
  const auto dev = make_host_device(4 * MiB);
  void* a = dev->allocate(3 * MiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(dev->usage().current_bytes, 3 * MiB);
  try {
    (void)dev->allocate(2 * MiB);
    FAIL() << "an allocation over the budget must throw";
  } catch (const memory_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("budget"), std::string::npos) << what;
    EXPECT_NE(what.find("2 MiB"), std::string::npos) << what;
  }
  EXPECT_EQ(dev->usage().current_bytes, 3 * MiB) << "a failed allocation must not change usage";
  void* b = dev->allocate(1 * MiB);  // exactly fills the budget
  EXPECT_EQ(dev->usage().current_bytes, 4 * MiB);
  dev->deallocate(a, 3 * MiB);
  dev->deallocate(b, 1 * MiB);
  EXPECT_EQ(dev->usage().current_bytes, 0U);
  EXPECT_EQ(dev->usage().peak_bytes, 4 * MiB);
  EXPECT_EQ(dev->usage().budget_bytes, 4 * MiB);
}

TEST(host_device, ZeroBytesIsNullAndAlignmentIs256) {
  const auto dev = make_host_device(1 * MiB);
  EXPECT_EQ(dev->allocate(0), nullptr);
  dev->deallocate(nullptr, 0);
  void* p = dev->allocate(3);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0U);
  dev->deallocate(p, 3);
  EXPECT_EQ(dev->usage().current_bytes, 0U);
}

TEST(host_device, StreamOrderedFreeReleasesAfterQueuedWork) {
  const auto dev = make_host_device(1 * MiB);
  const auto s = dev->create_stream();
  void* p = dev->allocate(4096, s.view());
  std::atomic<bool> release{false};
  dev->launch_host(s.view(), [&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
  });
  dev->deallocate(p, 4096, s.view());
  EXPECT_EQ(dev->usage().current_bytes, 4096U) << "the free must wait for the work queued before it";
  release = true;
  dev->synchronize(s.view());
  EXPECT_EQ(dev->usage().current_bytes, 0U);
}

TEST(host_device, BudgetComesFromTheEnvironmentWhenNotConfigured) {
  ::setenv("ZOE_DEVICE_BUDGET", "3MiB", 1);
  EXPECT_EQ(resolve_host_budget(std::nullopt), 3 * MiB);
  EXPECT_EQ(resolve_host_budget(5 * MiB), 5 * MiB) << "the configured value wins";
  ::setenv("ZOE_DEVICE_BUDGET", "lots", 1);
  EXPECT_THROW((void)resolve_host_budget(std::nullopt), config_error);
  ::unsetenv("ZOE_DEVICE_BUDGET");
  EXPECT_GT(resolve_host_budget(std::nullopt), 0U);
  EXPECT_THROW((void)resolve_host_budget(0), config_error);
}

TEST(host_device, CopiesBetweenOverlappingRangesAreRefused) {
  const auto dev = make_host_device(1 * MiB);
  const auto s = dev->create_stream();
  void* d = dev->allocate(4096, s.view());
  EXPECT_THROW(dev->copy_async(d, static_cast<char*>(d) + 10, 100, copy_kind::device_to_device, s.view()), usage_error);
  EXPECT_THROW(dev->copy_async(nullptr, d, 100, copy_kind::device_to_host, s.view()), usage_error);
  dev->deallocate(d, 4096);
}

// Large device-to-device copies take the streaming path (non-temporal stores over 4-page chunks,
// plain copies for the unaligned head and the tail): every byte arrives, none around it changes.
TEST(host_device, LargeDeviceToDeviceCopiesAtAnyAlignmentAndSize) {
  const auto dev = make_host_device(16 * MiB);
  const auto s = dev->create_stream();
  constexpr std::size_t region = 4 * MiB;
  auto* a = static_cast<unsigned char*>(dev->allocate(region, s.view()));
  auto* b = static_cast<unsigned char*>(dev->allocate(region, s.view()));
  for (std::size_t i = 0; i < region; ++i) a[i] = static_cast<unsigned char>((i * 131 + i / 4099) & 0xFF);
  struct shape {
    std::size_t src_offset;
    std::size_t dst_offset;
    std::size_t bytes;
  };
  for (const auto& [so, dof, n] : {shape{0, 0, 1 * MiB}, shape{3, 17, 1 * MiB + 5}, shape{64, 4096 + 1, 3 * MiB + 777},
                                   shape{4095, 63, 2 * MiB - 1}, shape{1, 0, 1 * MiB + 16 * KiB}}) {
    std::memset(b, 0xEE, region);
    dev->copy_async(b + dof, a + so, n, copy_kind::device_to_device, s.view());
    dev->synchronize(s.view());
    ASSERT_EQ(std::memcmp(b + dof, a + so, n), 0) << "offsets " << so << " -> " << dof << ", " << n << " bytes";
    for (std::size_t i = 0; i < dof; ++i) ASSERT_EQ(b[i], 0xEE) << "byte " << i << " before the copy changed";
    for (std::size_t i = dof + n; i < region; ++i) ASSERT_EQ(b[i], 0xEE) << "byte " << i << " after the copy changed";
  }
  dev->deallocate(a, region);
  dev->deallocate(b, region);
}

TEST(host_device, DeviceSynchronizeWhileStreamsAreDestroyed) {
  const auto dev = make_host_device(1 * MiB);
  for (int round = 0; round < 5; ++round) {
    // Made first, so it is likely to come early in the walk, before the streams destroyed meanwhile.
    const auto held = dev->create_stream();
    std::atomic<bool> release{false};
    dev->launch_host(held.view(), [&] {
      while (!release.load()) std::this_thread::sleep_for(1ms);
    });
    std::vector<device_stream> others;
    for (int i = 0; i < 16; ++i) {
      others.push_back(dev->create_stream());
      dev->launch_host(others.back().view(), [] {});
    }
    std::thread syncer([&] { dev->synchronize(); });
    std::this_thread::sleep_for(20ms);  // lets the walk start; the test passes however long it takes
    others.clear();
    release = true;
    syncer.join();
  }
  // Streams come and go while the device is synchronized over and over.
  std::atomic<bool> stop{false};
  std::thread syncer([&] {
    while (!stop.load()) dev->synchronize();
  });
  for (int i = 0; i < 200; ++i) {
    const auto s = dev->create_stream();
    dev->launch_host(s.view(), [] {});
  }
  stop = true;
  syncer.join();
  EXPECT_NO_THROW(dev->synchronize());
}

// Work held back on several streams (the fake device delays each task) is all done when the
// device's synchronize() returns, and the frees queued behind it have happened.
TEST(host_device, DeviceSynchronizeWaitsForDelayedWorkOnEveryStream) {
  testing::fake_device dev(make_host_device(1 * MiB));
  dev.delay_tasks(5ms);
  std::vector<device_stream> streams;
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i) {
    streams.push_back(dev.create_stream());
    void* p = dev.allocate(4096, streams.back().view());
    dev.launch_host(streams.back().view(), [&] { ++done; });
    dev.deallocate(p, 4096, streams.back().view());
  }
  dev.launch_host({}, [&] { ++done; });
  dev.synchronize();
  EXPECT_EQ(done.load(), 4);
  EXPECT_EQ(dev.usage().current_bytes, 0U);
  EXPECT_EQ(dev.calls().launch_host, 4);
}

TEST(host_device, RegisteredHostMemoryStaysUsableAndIsNotDeviceMemory) {
  const auto dev = make_host_device(1 * MiB);
  void* p = ::mmap(nullptr, 64 * KiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  (void)dev->register_host(p, 64 * KiB);  // locked, or unlocked after a warning (see memlock_test)
  std::memset(p, 0x5a, 64 * KiB);
  EXPECT_EQ(static_cast<unsigned char*>(p)[64 * KiB - 1], 0x5a);
  dev->unregister_host(p, 64 * KiB);
  ::munmap(p, 64 * KiB);
  EXPECT_EQ(dev->usage().current_bytes, 0U) << "registered host memory is not device memory";
  EXPECT_THROW((void)dev->register_host(nullptr, 4096), usage_error);
}

TEST(select_device, HonoursTheKindAndSaysWhichItTook) {
  auto host = select_device({.kind = "host", .budget_bytes = 2 * MiB});
  EXPECT_EQ(host.dev->kind(), device_kind::host);
  EXPECT_NE(host.reason.find("host"), std::string::npos);
  EXPECT_EQ(host.dev->usage().budget_bytes, 2 * MiB);
  EXPECT_THROW((void)select_device({.kind = "tpu"}), config_error);

  auto chosen = select_device({.kind = "auto", .budget_bytes = 2 * MiB});
  EXPECT_FALSE(chosen.reason.empty());
  EXPECT_EQ(chosen.dev->kind(), probe_gpu().usable ? device_kind::cuda : device_kind::host) << chosen.reason;
  if (!probe_gpu().usable) {
    EXPECT_THROW((void)make_cuda_device(0), device_error);
  }
}

using testing::device_contract;
INSTANTIATE_TEST_SUITE_P(devices, device_contract,
                         ::testing::Values(testing::device_maker{"host", [] { return make_host_device(64 * MiB); }},
                                           testing::device_maker{"fake",
                                                                 []() -> std::unique_ptr<device> {
                                                                   return std::make_unique<testing::fake_device>(
                                                                       make_host_device(64 * MiB));
                                                                 }}),
                         testing::device_maker_name);

}  // namespace
}  // namespace zoe
