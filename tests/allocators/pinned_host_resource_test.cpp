// Pinned host memory: placement, locking, huge pages and the limit.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "fake_device.hpp"
#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"

namespace zoe::allocators {
namespace {

TEST(pinned_host_resource, PlacesAndReportsTheNodeAndTheBytesInUse) {
  const auto dev = make_host_device(1 * MiB);
  pinned_host_resource resource(*dev, {.placement = numa_placement::calling_thread});
  EXPECT_GE(resource.numa_nodes(), 1);
  auto buf = resource.allocate(4 * MiB + 123);
  ASSERT_TRUE(buf);
  EXPECT_EQ(buf.size(), 4 * MiB + 123);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buf.data()) % 4096, 0U);
  EXPECT_GE(buf.numa_node(), 0) << "the node is reported";
  EXPECT_LT(buf.numa_node(), resource.numa_nodes());
  EXPECT_EQ(resource.bytes_in_use(), 4 * MiB + 123);
  std::memset(buf.data(), 0x42, buf.size());
  pinned_buffer moved = std::move(buf);
  EXPECT_EQ(resource.bytes_in_use(), 4 * MiB + 123);
  moved = pinned_buffer();
  EXPECT_EQ(resource.bytes_in_use(), 0U);
}

TEST(pinned_host_resource, ThePeakKeepsTheMostEverInUse) {
  const auto dev = make_host_device(1 * MiB);
  pinned_host_resource resource(*dev);
  EXPECT_EQ(resource.peak_bytes_in_use(), 0U);
  {
    auto a = resource.allocate(300 * KiB);
    auto b = resource.allocate(200 * KiB + 1);
    EXPECT_EQ(resource.peak_bytes_in_use(), 500 * KiB + 1);
  }
  EXPECT_EQ(resource.bytes_in_use(), 0U);
  EXPECT_EQ(resource.peak_bytes_in_use(), 500 * KiB + 1) << "freeing leaves the peak";
  auto c = resource.allocate(100 * KiB);
  EXPECT_EQ(resource.peak_bytes_in_use(), 500 * KiB + 1) << "a smaller use does not lower it";
  auto d = resource.allocate(450 * KiB);
  EXPECT_EQ(resource.peak_bytes_in_use(), 550 * KiB) << "a larger one raises it";
}

TEST(pinned_host_resource, ARefusedAllocationDoesNotRaiseThePeak) {
  const auto dev = make_host_device(1 * MiB);
  pinned_host_resource resource(*dev, {.limit_bytes = 1 * MiB});
  auto a = resource.allocate(768 * KiB);
  EXPECT_THROW((void)resource.allocate(512 * KiB), memory_error);
  EXPECT_EQ(resource.peak_bytes_in_use(), 768 * KiB);
}

TEST(pinned_host_resource, AsksForHugePagesOnLargeMappingsOnly) {
  const auto dev = make_host_device(1 * MiB);
  pinned_host_resource resource(*dev);
  const auto small = resource.allocate(64 * KiB);
  EXPECT_FALSE(small.huge_pages());
  const auto large = resource.allocate(8 * MiB);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(large.data()) % (2 * MiB), 0U) << "huge pages need 2 MiB alignment";
  std::ifstream thp_setting("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string thp;
  std::getline(thp_setting, thp);
  if (!thp.empty() && thp.find("[never]") == std::string::npos) {
    EXPECT_TRUE(large.huge_pages()) << "transparent huge pages are '" << thp << "'";
  }
  pinned_host_resource no_huge(*dev, {.huge_pages = false});
  EXPECT_FALSE(no_huge.allocate(8 * MiB).huge_pages());
}

TEST(pinned_host_resource, TheLimitMakesExhaustionAMemoryError) {
  const auto dev = make_host_device(1 * MiB);
  pinned_host_resource resource(*dev, {.limit_bytes = 1 * MiB});
  auto a = resource.allocate(768 * KiB);
  try {
    (void)resource.allocate(512 * KiB);
    FAIL() << "over the limit must throw";
  } catch (const memory_error& e) {
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
  a = pinned_buffer();
  EXPECT_NO_THROW((void)resource.allocate(1 * MiB));
}

// With a limit that does not bind, a size within a page of 2^64 reaches the page rounding, where
// it must be refused as too large, naming it, and not counted even briefly: it was never held.
TEST(pinned_host_resource, ASizeWhosePageRoundingWrapsIsRefusedNamingIt) {
  const auto dev = make_host_device(1 * MiB);
  pinned_host_resource resource(*dev, {.limit_bytes = std::numeric_limits<std::uint64_t>::max()});
  auto held = resource.allocate(1);  // small enough that the limit admits `huge` beside it
  const std::size_t huge = SIZE_MAX - 10;
  try {
    (void)resource.allocate(huge);
    FAIL() << "a size that wraps when rounded to pages must be refused";
  } catch (const memory_error& e) {
    EXPECT_NE(std::string(e.what()).find(format_bytes(huge)), std::string::npos) << e.what();
  }
  EXPECT_EQ(resource.bytes_in_use(), 1U);
  EXPECT_EQ(resource.peak_bytes_in_use(), 1U);
}

TEST(pinned_host_resource, ExplicitNodeMustExist) {
  const auto dev = make_host_device(1 * MiB);
  EXPECT_THROW(pinned_host_resource(*dev, {.placement = numa_placement::explicit_node, .numa_node = 4096}),
               usage_error);
  pinned_host_resource node0(*dev, {.placement = numa_placement::explicit_node, .numa_node = 0});
  EXPECT_EQ(node0.target_node(), 0);
  EXPECT_EQ(node0.allocate(64 * KiB).numa_node(), 0);
}

// A driver that refuses to register the memory (cudaHostRegister failing) fails the allocation with
// its device_error and leaves nothing behind; memory it did register is unregistered exactly once.
TEST(pinned_host_resource, ARefusedRegistrationFailsTheAllocationAndLeavesNothing) {
  testing::fake_device dev(make_host_device(1 * MiB));
  pinned_host_resource resource(dev);
  dev.refuse_registration(true);
  EXPECT_THROW((void)resource.allocate(64 * KiB), device_error);
  EXPECT_EQ(resource.bytes_in_use(), 0U);
  EXPECT_EQ(dev.calls().unregister_host, 0) << "nothing was registered, so nothing is unregistered";

  dev.refuse_registration(false);
  auto buf = resource.allocate(64 * KiB);
  EXPECT_EQ(dev.calls().register_host, 2);
  const bool locked = buf.locked();
  buf = pinned_buffer();
  EXPECT_EQ(dev.calls().unregister_host, locked ? 1 : 0);
  EXPECT_EQ(resource.bytes_in_use(), 0U);
}

}  // namespace
}  // namespace zoe::allocators
