// How the CPU kernels split work under a thread budget (src/parallel.hpp): every index exactly
// once, on the calling thread alone for a budget of 1, on at most n threads for a budget of n.
#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kernel_test_support.hpp"
#include "parallel.hpp"

namespace zoe::kernels::detail {
namespace {

constexpr std::size_t count = (std::size_t{1} << 20) + 3;
constexpr std::size_t grain = std::size_t{1} << 12;

// What one parallel_ranges call did: the pieces it made and the threads that ran them.
struct recorded {
  std::vector<unsigned char> hits = std::vector<unsigned char>(count, 0);
  std::set<std::thread::id> threads;
  std::size_t pieces = 0;
  std::mutex mutex;

  void run(std::size_t max_threads) {
    parallel_ranges(count, grain, max_threads, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) ++hits[i];  // pieces are disjoint: no two threads share an index
      const std::lock_guard lock(mutex);
      threads.insert(std::this_thread::get_id());
      ++pieces;
    });
  }
  [[nodiscard]] bool every_index_once() const {
    for (const unsigned char h : hits) {
      if (h != 1) return false;
    }
    return true;
  }
};

TEST(parallel_ranges, ABudgetOfOneIsOnePieceOnTheCallingThread) {
  recorded r;
  test::on_threads(4, [&] { r.run(1); });
  EXPECT_TRUE(r.every_index_once());
  EXPECT_EQ(r.pieces, 1U);
  ASSERT_EQ(r.threads.size(), 1U);
  EXPECT_EQ(*r.threads.begin(), std::this_thread::get_id()) << "a budget of one calls fn on the caller, without TBB";
}

TEST(parallel_ranges, ABudgetOfTwoUsesAtMostTwoThreads) {
  recorded r;
  test::on_threads(4, [&] { r.run(2); });
  EXPECT_TRUE(r.every_index_once());
  EXPECT_GE(r.pieces, 2U) << "a budget of 2 still splits the work";
  EXPECT_LE(r.threads.size(), 2U);
}

TEST(parallel_ranges, TheDefaultBudgetAndOneAboveTheArenaCoverEveryIndexOnce) {
  for (const std::size_t budget : {std::size_t{0}, std::size_t{64}}) {
    recorded r;
    test::on_threads(2, [&] { r.run(budget); });
    EXPECT_TRUE(r.every_index_once()) << "budget " << budget;
    EXPECT_LE(r.threads.size(), 2U) << "budget " << budget << " went beyond the arena";
  }
}

TEST(parallel_ranges, NothingToDoCallsNothing) {
  for (const std::size_t budget : {std::size_t{0}, std::size_t{1}, std::size_t{2}}) {
    int calls = 0;
    parallel_ranges(0, grain, budget, [&](std::size_t, std::size_t) { ++calls; });
    EXPECT_EQ(calls, 0) << "budget " << budget;
  }
}

}  // namespace
}  // namespace zoe::kernels::detail
