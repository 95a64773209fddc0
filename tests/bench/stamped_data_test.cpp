// The data zoe-bench io writes: different per run and per block (nothing a compressing or
// deduplicating drive could shortcut), and still checked sector by sector by --verify.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "support/stamped_data.hpp"

namespace zoe::bench {
namespace {

constexpr std::size_t block = 64 * 1024;

std::vector<std::byte> filled(std::uint64_t seed, std::size_t bytes, std::uint64_t offset) {
  std::vector<std::byte> b(bytes);
  stamped_data(seed).fill(b, offset);
  return b;
}

// The sector's bytes after its 32-byte stamp.
std::string body_of(const std::vector<std::byte>& b, std::size_t sector) {
  return {reinterpret_cast<const char*>(b.data()) + sector * sector_size + 32, sector_size - 32};
}

TEST(stamped_data, EverySectorOfARunHasItsOwnBody) {
  const auto b = filled(7, 4 * block, 0);
  std::set<std::string> bodies;
  for (std::size_t s = 0; s < b.size() / sector_size; ++s) bodies.insert(body_of(b, s));
  EXPECT_EQ(bodies.size(), b.size() / sector_size);
}

TEST(stamped_data, TwoRunsWriteDifferentBytesAtTheSameOffset) {
  const auto first = filled(1, block, block);
  const auto second = filled(2, block, block);
  for (std::size_t s = 0; s < block / sector_size; ++s)
    EXPECT_NE(body_of(first, s), body_of(second, s)) << "sector " << s;
}

TEST(stamped_data, BodiesAreNotMostlyZeroOrRepeatedWords) {
  const auto b = filled(3, sector_size, 0);
  std::set<std::uint64_t> words;
  for (std::size_t at = 32; at < sector_size; at += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, b.data() + at, 8);
    words.insert(w);
  }
  EXPECT_EQ(words.size(), (sector_size - 32) / 8);
}

TEST(stamped_data, TheSameSeedAndOffsetGiveTheSameBytes) {
  EXPECT_EQ(filled(5, block, 3 * block), filled(5, block, 3 * block));
}

TEST(stamped_data, CheckPassesOnFilledDataAndNamesAChangedBodyByte) {
  auto b = filled(9, block, 2 * block);
  EXPECT_EQ(stamped_data(9).check(b, 2 * block), std::nullopt);
  b[5 * sector_size + 100] ^= std::byte{1};
  const auto bad = stamped_data(9).check(b, 2 * block);
  ASSERT_TRUE(bad.has_value());
  EXPECT_NE(bad->find("at offset " + std::to_string(2 * block + 5 * sector_size)), std::string::npos) << *bad;
  EXPECT_NE(bad->find("contents changed"), std::string::npos) << *bad;
}

// The timed path lays a slot's bodies once and stamps it for block after block: each stamp must
// leave exactly the bytes a fresh fill for that offset gives, so --verify still checks every byte.
TEST(stamped_data, AStampedSlotReusedForAnotherOffsetEqualsAFreshFill) {
  const stamped_data data(11);
  std::vector<std::byte> slot(block);
  data.lay_bodies(slot);
  data.stamp(slot, 5 * block);
  data.stamp(slot, 2 * block);
  EXPECT_EQ(slot, filled(11, block, 2 * block));
  EXPECT_EQ(data.check(slot, 2 * block), std::nullopt);
}

TEST(stamped_data, CheckFindsASectorFromAnotherRunAsTorn) {
  auto b = filled(9, block, 0);
  const auto other = filled(10, block, 0);
  std::memcpy(b.data() + sector_size, other.data() + sector_size, sector_size);
  const auto bad = stamped_data(9).check(b, 0);
  ASSERT_TRUE(bad.has_value());
  EXPECT_NE(bad->find("torn"), std::string::npos) << *bad;
  EXPECT_EQ(stamped_data::seed_of(std::span(b).subspan(sector_size, sector_size)), 10u);
}

}  // namespace
}  // namespace zoe::bench
