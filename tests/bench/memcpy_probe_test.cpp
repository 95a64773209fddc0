// The memcpy limit: the benchmark memory (locked, huge pages where the kernel has them), one piece
// per thread, each at least the size asked for.
#include <gtest/gtest.h>

#include <tbb/global_control.h>

#include "support/cache_limits.hpp"
#include "support/measure.hpp"

namespace zoe::bench {
namespace {

TEST(memcpy_probe, SplitsIntoOnePiecePerThreadNoSmallerThanTheMinimum) {
  const memcpy_probe probe(1 << 20, 2, 4 << 20);
  EXPECT_EQ(probe.pieces(), 2u);
  EXPECT_EQ(probe.piece_bytes(), 4u << 20);
  EXPECT_EQ(probe.bytes(), 8u << 20);
}

TEST(memcpy_probe, CopiesAtLeastTheBytesAskedFor) {
  const memcpy_probe probe(3 << 20, 2, 0);
  EXPECT_GE(probe.bytes(), 3u << 20);
  EXPECT_EQ(probe.piece_bytes() % 64, 0u);
}

TEST(memcpy_probe, ReportsItsShapeAndMemoryInJson) {
  const tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 2);
  memcpy_probe probe(2 << 20, 2, 0);
  EXPECT_GT(probe.run_once(), 0.0);
  const auto j = to_json(probe);
  EXPECT_EQ(j.at("bytes"), probe.bytes());
  EXPECT_EQ(j.at("pieces"), 2);
  EXPECT_EQ(j.at("non_temporal_threshold_bytes"), glibc_non_temporal_threshold().bytes);
  EXPECT_EQ(j.at("huge_pages").get<bool>(), probe.huge_pages());
  EXPECT_EQ(j.at("locked").get<bool>(), probe.locked());
  // The probe's own working set is checked against the cache like a kernel's.
  EXPECT_EQ(j.at("working_set_bytes"), 2 * probe.bytes());
}

}  // namespace
}  // namespace zoe::bench
