#include "zoe/io/extent_allocator.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <random>

#include "zoe/core/error.hpp"

namespace zoe::io {
namespace {

TEST(extent_allocator, BestFitTakesTheSmallestHoleThatFits) {
  extent_allocator a(100 * 4096, 4096);
  const auto x = a.allocate(10 * 4096, 4096);
  const auto y = a.allocate(2 * 4096, 4096);
  const auto z = a.allocate(30 * 4096, 4096);
  ASSERT_TRUE(x && y && z);
  a.free(*x, 10 * 4096);  // holes: 10 blocks at 0, 58 blocks at the end
  const auto w = a.allocate(5 * 4096, 4096);
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, 0u) << "the 10-block hole fits best";
}

TEST(extent_allocator, HonoursAlignmentAndGranularity) {
  extent_allocator a(64 << 20, 4096);
  ASSERT_TRUE(a.allocate(100, 4096));
  const auto big = a.allocate(3 << 20, 1 << 20);
  ASSERT_TRUE(big);
  EXPECT_EQ(*big % (1 << 20), 0u);
  EXPECT_EQ(a.rounded(100), 4096u);
  EXPECT_THROW((void)a.allocate(10, 1000), usage_error);
}

TEST(extent_allocator, RefusesDoubleFreeAndForeignExtents) {
  extent_allocator a(16 * 4096, 4096);
  const auto x = a.allocate(4096, 4096);
  ASSERT_TRUE(x);
  a.free(*x, 4096);
  EXPECT_THROW(a.free(*x, 4096), usage_error);
  EXPECT_THROW(a.free(100, 4096), usage_error);
  EXPECT_THROW(a.free(64 * 4096, 4096), usage_error);
}

// A size within the granularity of 2^64 rounded up by a mask wraps to 0 and took an empty
// extent; it fits nothing, and freeing it is refused.
TEST(extent_allocator, SizesNearTwoToTheSixtyFourFitNothing) {
  extent_allocator a(16 * 4096, 4096);
  for (const std::uint64_t bytes : {std::numeric_limits<std::uint64_t>::max(),
                                    std::numeric_limits<std::uint64_t>::max() - 100, std::uint64_t{1} << 63}) {
    EXPECT_FALSE(a.allocate(bytes, 4096)) << bytes;
    EXPECT_THROW(a.free(0, bytes), usage_error) << bytes;
  }
  EXPECT_FALSE(a.rounded(std::numeric_limits<std::uint64_t>::max()));
  EXPECT_EQ(a.free_bytes(), 16 * 4096u);
  EXPECT_EQ(a.hole_count(), 1u);
}

TEST(extent_allocator, ReportsExhaustion) {
  extent_allocator a(8 * 4096, 4096);
  EXPECT_TRUE(a.allocate(8 * 4096, 4096));
  EXPECT_FALSE(a.allocate(1, 4096));
  EXPECT_EQ(a.free_bytes(), 0u);
}

TEST(extent_allocator, RandomSchedulesNeverOverlapAndCoalesceBack) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    const std::uint64_t capacity = 256 * 4096;
    extent_allocator a(capacity, 4096);
    std::map<std::uint64_t, std::uint64_t> live;  // offset -> rounded size
    for (int step = 0; step < 3000; ++step) {
      if (live.empty() || rng() % 3 != 0) {
        const std::uint64_t bytes = 1 + rng() % (16 * 4096);
        const std::uint64_t alignment = 4096ULL << (rng() % 4);
        const auto at = a.allocate(bytes, alignment);
        if (!at) continue;
        ASSERT_EQ(*at % alignment, 0u);
        const std::uint64_t size = a.rounded(bytes).value();
        ASSERT_LE(*at + size, capacity);
        auto next = live.lower_bound(*at);
        if (next != live.end()) {
          ASSERT_LE(*at + size, next->first) << "overlaps the next extent";
        }
        if (next != live.begin()) {
          ASSERT_LE(std::prev(next)->first + std::prev(next)->second, *at) << "overlaps the previous";
        }
        live.emplace(*at, size);
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        a.free(it->first, it->second);
        live.erase(it);
      }
      std::uint64_t used = 0;
      for (const auto& [o, s] : live) used += s;
      ASSERT_EQ(a.free_bytes(), capacity - used);
    }
    for (const auto& [o, s] : live) a.free(o, s);
    EXPECT_EQ(a.hole_count(), 1u) << "freeing everything must coalesce into one hole";
    EXPECT_EQ(a.largest_hole(), capacity);
  }
}

}  // namespace
}  // namespace zoe::io
