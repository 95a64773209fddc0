#include "zoe/core/free_list.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "zoe/core/error.hpp"

namespace zoe::detail {
namespace {

TEST(coalescing_free_list, InsertedNeighboursMergeIntoOneHole) {
  coalescing_free_list holes;
  ASSERT_TRUE(holes.insert(0, 10));
  ASSERT_TRUE(holes.insert(20, 10));
  EXPECT_EQ(holes.hole_count(), 2u);
  EXPECT_EQ(holes.free_bytes(), 20u);
  ASSERT_TRUE(holes.insert(10, 10)) << "fills the gap: merges with both sides";
  EXPECT_EQ(holes.hole_count(), 1u);
  EXPECT_EQ(holes.largest(), 30u);
  ASSERT_TRUE(holes.insert(30, 5)) << "touches only the hole before it";
  ASSERT_TRUE(holes.insert(40, 5)) << "touches nothing";
  EXPECT_EQ(holes.hole_count(), 2u);
  EXPECT_EQ(holes.largest(), 35u);
  EXPECT_EQ(holes.free_bytes(), 40u);
}

TEST(coalescing_free_list, OverlappingInsertIsRefusedAndChangesNothing) {
  coalescing_free_list holes;
  ASSERT_TRUE(holes.insert(100, 50));
  EXPECT_FALSE(holes.insert(100, 50)) << "the same range twice";
  EXPECT_FALSE(holes.insert(90, 11)) << "reaches into the hole's start";
  EXPECT_FALSE(holes.insert(149, 10)) << "starts inside the hole";
  EXPECT_FALSE(holes.insert(120, 5)) << "lies inside the hole";
  EXPECT_FALSE(holes.insert(0, 1000)) << "covers the hole";
  EXPECT_EQ(holes.hole_count(), 1u);
  EXPECT_EQ(holes.free_bytes(), 50u);
  EXPECT_THROW((void)holes.insert(0, 0), usage_error);
}

TEST(coalescing_free_list, BestFitTakesTheSmallestHoleThatFitsAndKeepsTheRest) {
  coalescing_free_list holes;
  ASSERT_TRUE(holes.insert(0, 100));
  ASSERT_TRUE(holes.insert(200, 30));
  ASSERT_TRUE(holes.insert(300, 30));
  ASSERT_TRUE(holes.insert(400, 20));
  EXPECT_EQ(holes.take_best_fit(25), 200u) << "the smaller of two equal holes' offsets";
  EXPECT_EQ(holes.free_bytes(), 155u);
  EXPECT_EQ(holes.take_best_fit(5), 225u) << "the 5 bytes left of the first 30-byte hole";
  EXPECT_EQ(holes.take_best_fit(50), 0u);
  EXPECT_EQ(holes.take_best_fit(60), std::nullopt);
  EXPECT_EQ(holes.largest(), 50u);
  EXPECT_EQ(holes.free_bytes(), 100u);
}

TEST(coalescing_free_list, PlacementRuleSkipsHolesItRefusesAndSplitsTheOneItTakes) {
  coalescing_free_list holes;
  ASSERT_TRUE(holes.insert(10, 20));   // [10, 30): smallest, but no 16-aligned 16 bytes
  ASSERT_TRUE(holes.insert(100, 40));  // [100, 140): 112 is 16-aligned
  const auto aligned16 = [](std::uint64_t offset, std::uint64_t size) -> std::optional<std::uint64_t> {
    const std::uint64_t start = (offset + 15) / 16 * 16;
    if (start + 16 > offset + size) return std::nullopt;
    return start;
  };
  EXPECT_EQ(holes.take_best_fit(16, aligned16), 112u);
  EXPECT_EQ(holes.hole_count(), 3u) << "[10, 30), [100, 112), [128, 140)";
  EXPECT_EQ(holes.free_bytes(), 44u);
  EXPECT_EQ(holes.take_best_fit(16, aligned16), std::nullopt);
  const auto outside = [](std::uint64_t offset, std::uint64_t) { return std::optional(offset + 1000); };
  EXPECT_THROW((void)holes.take_best_fit(1, outside), usage_error);
}

TEST(coalescing_free_list, ClearForgetsEverything) {
  coalescing_free_list holes;
  ASSERT_TRUE(holes.insert(0, 10));
  holes.clear();
  EXPECT_EQ(holes.hole_count(), 0u);
  EXPECT_EQ(holes.free_bytes(), 0u);
  EXPECT_EQ(holes.largest(), 0u);
  EXPECT_EQ(holes.take_best_fit(1), std::nullopt);
  EXPECT_TRUE(holes.insert(5, 5));
}

// Random take/insert schedules against a byte map: the holes are exactly the free bytes, and
// returning everything leaves one hole.
TEST(coalescing_free_list, RandomSchedulesMatchAByteMap) {
  constexpr std::uint64_t capacity = 512;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    coalescing_free_list holes;
    ASSERT_TRUE(holes.insert(0, capacity));
    std::map<std::uint64_t, std::uint64_t> taken;  // offset -> size
    for (int step = 0; step < 2000; ++step) {
      if (taken.empty() || rng() % 3 != 0) {
        const std::uint64_t size = 1 + rng() % 40;
        const auto at = holes.take_best_fit(size);
        if (!at) {
          ASSERT_LT(holes.largest(), size);
          continue;
        }
        ASSERT_LE(*at + size, capacity);
        ASSERT_TRUE(taken.emplace(*at, size).second);
      } else {
        auto it = taken.begin();
        std::advance(it, static_cast<long>(rng() % taken.size()));
        ASSERT_TRUE(holes.insert(it->first, it->second));
        ASSERT_FALSE(holes.insert(it->first, it->second)) << "freed twice";
        taken.erase(it);
      }
      std::uint64_t used = 0;
      std::uint64_t end = 0;
      std::size_t gaps = 0;
      for (const auto& [o, s] : taken) {
        ASSERT_GE(o, end) << "two taken ranges overlap";
        gaps += o > end ? 1 : 0;
        end = o + s;
        used += s;
      }
      gaps += end < capacity ? 1 : 0;
      ASSERT_EQ(holes.free_bytes(), capacity - used);
      ASSERT_EQ(holes.hole_count(), gaps) << "free neighbours must have merged";
    }
    for (const auto& [o, s] : taken) ASSERT_TRUE(holes.insert(o, s));
    EXPECT_EQ(holes.hole_count(), 1u);
    EXPECT_EQ(holes.largest(), capacity);
  }
}

}  // namespace
}  // namespace zoe::detail
