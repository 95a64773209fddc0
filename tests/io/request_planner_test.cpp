#include "request_planner.hpp"

#include <gtest/gtest.h>

namespace zoe::io::detail {
namespace {

// Every plan must cover the request exactly once, in order, with direct pieces fully aligned.
void expect_valid(std::uintptr_t address, std::uint64_t offset, std::size_t length, const alignment_rule& rule) {
  const auto plan = plan_request(address, offset, length, rule);
  std::uint64_t at = offset;
  for (const piece_plan& p : plan) {
    EXPECT_EQ(p.file_offset, at);
    EXPECT_EQ(p.buffer_offset, at - offset);
    EXPECT_GT(p.length, 0u);
    EXPECT_LE(p.length, rule.chunk);
    if (p.direct) {
      EXPECT_EQ(p.file_offset % rule.offset, 0u);
      EXPECT_EQ(p.length % rule.offset, 0u);
      EXPECT_EQ((address + p.buffer_offset) % rule.memory, 0u);
    }
    at += p.length;
  }
  EXPECT_EQ(at, offset + length);
}

TEST(request_planner, AlignedRequestIsAllDirectChunks) {
  const alignment_rule rule{4096, 4096, 65536};
  const auto plan = plan_request(0x10000, 8192, 200000 - 200000 % 4096, rule);
  for (const auto& p : plan) EXPECT_TRUE(p.direct);
  expect_valid(0x10000, 8192, 200000 - 200000 % 4096, rule);
}

TEST(request_planner, UnalignedEdgesGoThroughBounce) {
  const alignment_rule rule{4096, 4096, 65536};
  const auto plan = plan_request(0x10000 + 100, 100, 10000, rule);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_FALSE(plan[0].direct);
  EXPECT_EQ(plan[0].length, 3996u);
  EXPECT_TRUE(plan[1].direct);
  EXPECT_FALSE(plan[2].direct);
}

TEST(request_planner, RequestInsideOneBlockIsOnePiece) {
  const auto plan = plan_request(0x10000, 10, 20, {4096, 4096, 65536});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_FALSE(plan[0].direct);
}

TEST(request_planner, MisalignedBufferSendsTheMiddleThroughBounce) {
  const auto plan = plan_request(0x10001, 0, 3 * 65536, {4096, 4096, 65536});
  ASSERT_EQ(plan.size(), 3u);
  for (const auto& p : plan) EXPECT_FALSE(p.direct);
}

TEST(request_planner, BufferedFileIsChunkedOnly) {
  const auto plan = plan_request(0x10001, 7, 100000, {1, 1, 4096});
  for (const auto& p : plan) EXPECT_TRUE(p.direct);
  expect_valid(0x10001, 7, 100000, {1, 1, 4096});
}

TEST(request_planner, RandomRequestsAreCoveredExactly) {
  std::uint64_t s = 12345;
  const auto next = [&] { return s = s * 6364136223846793005ULL + 1442695040888963407ULL, s >> 33; };
  for (int i = 0; i < 2000; ++i) {
    const alignment_rule rule{i % 2 ? 4096u : 512u, i % 3 ? 4096u : 512u, 4096u << (i % 5)};
    expect_valid(0x100000 + next() % 9000, next() % 100000, 1 + next() % 300000, rule);
  }
}

}  // namespace
}  // namespace zoe::io::detail
