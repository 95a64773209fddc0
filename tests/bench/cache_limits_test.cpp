// The machine limits the kernel benchmarks measure against: the last-level cache a working set
// must exceed, and glibc's streaming threshold a memcpy piece must exceed.
#include <gtest/gtest.h>
#include <unistd.h>

#include "support/cache_limits.hpp"

namespace zoe::bench {
namespace {

TEST(cache_limits, TheLastLevelCacheIsTheLargerSource) {
  const auto& c = llc();
  EXPECT_EQ(c.bytes(), std::max(c.sysfs_bytes, c.sysconf_bytes));
  const long sysconf_bytes = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (sysconf_bytes > 0) {
    EXPECT_EQ(c.sysconf_bytes, static_cast<std::uint64_t>(sysconf_bytes));
  }
}

TEST(cache_limits, AWorkingSetInsideTheCacheIsFlaggedAndOneBeyondItIsNot) {
  if (llc().bytes() == 0) GTEST_SKIP() << "neither sysfs nor sysconf reports a last-level cache";
  const cache_fit small = check_working_set(llc().bytes() / 2, "test");
  EXPECT_TRUE(small.fits());
  EXPECT_TRUE(to_json(small).at("fits_llc").get<bool>());
  EXPECT_EQ(to_json(small).at("llc_bytes"), llc().bytes());
  const cache_fit large = check_working_set(2 * llc().bytes(), "test");
  EXPECT_FALSE(large.fits());
  EXPECT_FALSE(to_json(large).at("fits_llc").get<bool>());
  EXPECT_EQ(to_json(large).at("working_set_bytes"), 2 * llc().bytes());
}

TEST(cache_limits, AStreamingPieceIsAboveTheThresholdInWholeHugePages) {
  const auto& t = glibc_non_temporal_threshold();
  EXPECT_GT(t.bytes, 0u);
  EXPECT_FALSE(t.source.empty());
  EXPECT_GT(streaming_piece_bytes(), t.bytes);
  EXPECT_EQ(streaming_piece_bytes() % (2 << 20), 0u);
}

}  // namespace
}  // namespace zoe::bench
