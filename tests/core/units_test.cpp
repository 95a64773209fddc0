#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "zoe/core/checked.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"

namespace zoe {
namespace {

TEST(units, ParsesBinaryAndDecimalSuffixes) {
  EXPECT_EQ(parse_bytes("4096", "--size"), 4096u);
  EXPECT_EQ(parse_bytes("1MiB", "--size"), MiB);
  EXPECT_EQ(parse_bytes("1M", "--size"), MiB);
  EXPECT_EQ(parse_bytes("2g", "--size"), 2 * GiB);
  EXPECT_EQ(parse_bytes("3 GiB", "--size"), 3 * GiB);
  EXPECT_EQ(parse_bytes("1KB", "--size"), 1000u);
  EXPECT_EQ(parse_bytes("1TiB", "--size"), TiB);
  EXPECT_EQ(parse_bytes("7B", "--size"), 7u);
}

TEST(units, RejectsMalformedTextNamingTheFlag) {
  for (const char* bad : {"", "abc", "-1", "1.5G", "1 parsec", "99999999999999999999"}) {
    try {
      (void)parse_bytes(bad, "--block-size");
      FAIL() << "accepted '" << bad << "'";
    } catch (const usage_error& e) {
      EXPECT_NE(std::string(e.what()).find("--block-size"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW((void)parse_bytes("20000000TiB", "x"), usage_error);
}

TEST(units, FormatsForPeople) {
  EXPECT_EQ(format_bytes(4097), "4.00 KiB");
  EXPECT_EQ(format_bytes(GiB), "1 GiB");
  EXPECT_EQ(format_bytes(3 * MiB / 2), "1.50 MiB");
  EXPECT_EQ(format_bytes(12), "12 B");
}

TEST(units, AlignHelpers) {
  EXPECT_EQ(align_up(4097, 4096), 8192u);
  EXPECT_EQ(align_up(4096, 4096), 4096u);
  EXPECT_EQ(align_down(4097, 4096), 4096u);
  EXPECT_TRUE(is_pow2(4096));
  EXPECT_FALSE(is_pow2(0));
  EXPECT_FALSE(is_pow2(12));
}

// A stripe over 3 files is not a power of two: a mask would not round to a multiple of it.
TEST(units, RoundHelpersTakeAnyMultiple) {
  constexpr std::uint64_t stripe = 3 * 64 * KiB;
  EXPECT_EQ(round_up(8 * MiB, stripe), 43 * stripe);
  EXPECT_EQ(round_up(43 * stripe, stripe), 43 * stripe);
  EXPECT_EQ(round_down(8 * MiB, stripe), 42 * stripe);
  EXPECT_EQ(round_up(0, stripe), 0u);
  EXPECT_EQ(round_up(4097, 4096), align_up(4097, 4096));
}

// A caller's size near 2^64 rounds past it: the checked helpers say so instead of wrapping to a
// small number that would under-allocate.
TEST(units, CheckedHelpersRefuseWhatDoesNotFit64Bits) {
  constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(align_up_checked(4097, 4096), 8192u);
  EXPECT_EQ(align_up_checked(max - 4095, 4096), max - 4095);  // already aligned
  EXPECT_FALSE(align_up_checked(max, 256));
  EXPECT_FALSE(align_up_checked(max - 100, 256));
  EXPECT_EQ(round_up_checked(8 * MiB, 3 * 64 * KiB), 43 * 3 * 64 * KiB);
  EXPECT_FALSE(round_up_checked(max - 100, 3 * 64 * KiB));
  EXPECT_EQ(checked_add(max - 1, 1), max);
  EXPECT_FALSE(checked_add(max, 1));
  EXPECT_EQ(checked_mul(1ULL << 32, (1ULL << 32) - 1), (1ULL << 32) * ((1ULL << 32) - 1));
  EXPECT_FALSE(checked_mul(1ULL << 32, 1ULL << 32));
  EXPECT_EQ(checked_mul(0, max), 0u);
}

TEST(units, AlignHelpersRefuseOtherThanPowersOfTwoInDebugBuilds) {
  EXPECT_DEBUG_DEATH((void)align_up(8 * MiB, 3 * 64 * KiB), "power of two");
  EXPECT_DEBUG_DEATH((void)align_down(8 * MiB, 3 * 64 * KiB), "power of two");
}

}  // namespace
}  // namespace zoe
