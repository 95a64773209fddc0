// The host device: budget, stream order, cross-stream events, copies and host tasks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include <sys/mman.h>

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

TEST(host_device, WorkOnOneStreamRunsInOrder) {
  const auto dev = make_host_device(1 * MiB);
  const auto s = dev->create_stream();
  std::vector<int> seen;
  for (int i = 0; i < 1000; ++i) dev->launch_host(s.view(), [&seen, i] { seen.push_back(i); });
  dev->synchronize(s.view());
  std::vector<int> want(1000);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(seen, want);
}

TEST(host_device, WorkAfterAnEventWaitNeverOvertakesIt) {
  const auto dev = make_host_device(1 * MiB);
  const auto a = dev->create_stream();
  const auto b = dev->create_stream();
  const auto e = dev->create_event();
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> produced{0};
    int observed = -1;
    // The producer is slow on purpose: without a real wait the consumer would run first.
    dev->launch_host(a.view(), [&] {
      std::this_thread::sleep_for(2ms);
      produced = round + 1;
    });
    dev->record(e, a.view());
    dev->wait(b.view(), e);
    dev->launch_host(b.view(), [&] { observed = produced.load(); });
    dev->synchronize(b.view());
    ASSERT_EQ(observed, round + 1) << "round " << round;
    dev->synchronize(a.view());
  }
}

TEST(host_device, EventQueryAndElapsedTime) {
  const auto dev = make_host_device(1 * MiB);
  const auto s = dev->create_stream();
  const auto start = dev->create_event();
  const auto end = dev->create_event();
  EXPECT_TRUE(dev->query(start)) << "a never-recorded event counts as complete";
  EXPECT_THROW((void)dev->elapsed_ms(start, end), usage_error);
  std::atomic<bool> release{false};
  dev->record(start, s.view());
  dev->launch_host(s.view(), [&] {
    while (!release.load()) std::this_thread::sleep_for(1ms);
  });
  dev->record(end, s.view());
  EXPECT_FALSE(dev->query(end));
  EXPECT_THROW((void)dev->elapsed_ms(start, end), usage_error);
  std::this_thread::sleep_for(20ms);
  release = true;
  dev->synchronize(end);
  EXPECT_TRUE(dev->query(end));
  EXPECT_GE(dev->elapsed_ms(start, end), 10.0F);
}

TEST(host_device, CopiesAndMemsetMoveRealBytes) {
  const auto dev = make_host_device(1 * MiB);
  const auto s = dev->create_stream();
  constexpr std::size_t n = 100'000;
  std::vector<unsigned char> src(n);
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  void* d1 = dev->allocate(n, s.view());
  void* d2 = dev->allocate(n, s.view());
  std::vector<unsigned char> back(n, 0);
  dev->copy_async(d1, src.data(), n, copy_kind::host_to_device, s.view());
  dev->copy_async(d2, d1, n, copy_kind::device_to_device, s.view());
  dev->memset_async(d1, 0x11, n / 2, s.view());
  dev->copy_async(back.data(), d2, n, copy_kind::device_to_host, s.view());
  dev->synchronize(s.view());
  EXPECT_EQ(back, src);
  dev->copy_async(back.data(), d1, n, copy_kind::device_to_host, s.view());
  dev->synchronize(s.view());
  EXPECT_EQ(back[0], 0x11);
  EXPECT_EQ(back[n / 2 - 1], 0x11);
  EXPECT_EQ(back[n / 2], src[n / 2]);
  EXPECT_THROW(dev->copy_async(d1, static_cast<char*>(d1) + 10, 100, copy_kind::device_to_device, s.view()),
               usage_error);
  dev->deallocate(d1, n);
  dev->deallocate(d2, n);
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

TEST(host_device, AFailingTaskIsReportedBySynchronize) {
  const auto dev = make_host_device(1 * MiB);
  const auto s = dev->create_stream();
  int after = 0;
  dev->launch_host(s.view(), [] { throw std::runtime_error("kernel exploded"); });
  dev->launch_host(s.view(), [&] { after = 1; });
  try {
    dev->synchronize(s.view());
    FAIL() << "the failure must surface";
  } catch (const device_error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel exploded"), std::string::npos);
  }
  EXPECT_NO_THROW(dev->synchronize(s.view())) << "a failure is reported once";
  EXPECT_EQ(after, 1);
}

TEST(host_device, DefaultStreamAndDeviceSynchronize) {
  const auto dev = make_host_device(1 * MiB);
  const auto s = dev->create_stream();
  std::atomic<int> done{0};
  dev->launch_host({}, [&] { ++done; });
  dev->launch_host(s.view(), [&] { ++done; });
  dev->synchronize();
  EXPECT_EQ(done.load(), 2);
}

// The whole device is synchronized while the streams it is walking are destroyed by another
// thread: a stream destroyed during the walk must not be touched once it is gone (ASan and TSan
// report the use after free when it is). The walk is held on a blocked stream so the others are
// destroyed while it waits.
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

}  // namespace
}  // namespace zoe
