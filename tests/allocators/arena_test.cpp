// The defragmenting arena: best fit, coalescing, compaction that keeps contents and honours pins
// and recorded uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "zoe/allocators/arena.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"

namespace zoe::allocators {
namespace {

using namespace std::chrono_literals;

// Word-at-a-time so the random schedules stay quick under sanitizers.
void fill(void* p, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto* bytes = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t word = rng();
    std::memcpy(bytes + i, &word, std::min<std::size_t>(8, n - i));
  }
}

std::uint64_t checksum(const void* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  const auto* bytes = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, bytes + i, std::min<std::size_t>(8, n - i));
    h = (h ^ word) * 1099511628211ULL;
    h ^= h >> 29;
  }
  return h;
}

TEST(arena, BestFitAndCoalescing) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB, {.compaction = false});
  auto x = a.allocate(100 * KiB);
  auto y = a.allocate(10 * KiB);
  auto z = a.allocate(50 * KiB);
  auto w = a.allocate(10 * KiB);
  const void* y_at = y.data();
  y.reset();
  z.reset();  // coalesces with y's hole: 60 KiB
  EXPECT_EQ(a.stats().largest_hole, 1 * MiB - 170 * KiB);
  auto fits = a.allocate(55 * KiB);
  EXPECT_EQ(fits.data(), y_at) << "best fit takes the coalesced 60 KiB hole, not the large tail";
  const auto s = a.stats();
  EXPECT_EQ(s.used, 100 * KiB + 55 * KiB + 10 * KiB);
  EXPECT_EQ(s.free, 1 * MiB - s.used);
  EXPECT_EQ(s.live_blocks, 3U);
  x.reset();
  fits.reset();
  w.reset();
  EXPECT_EQ(a.stats().largest_hole, 1 * MiB) << "everything coalesces back into one hole";
  EXPECT_DOUBLE_EQ(a.stats().fragmentation, 0.0);
}

TEST(arena, TheRegionComesFromTheDeviceBudget) {
  const auto dev = make_host_device(1 * MiB);
  EXPECT_THROW(arena(*dev, 2 * MiB), memory_error);
  {
    arena a(*dev, 1 * MiB);
    EXPECT_EQ(dev->usage().current_bytes, 1 * MiB);
  }
  EXPECT_EQ(dev->usage().current_bytes, 0U);
}

// Three blocks, the first freed: a request larger than its hole and larger than the free tail,
// but smaller than both together.
TEST(arena, CompactsWhenNoHoleFitsAndKeepsContents) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB);
  auto first = a.allocate(256 * KiB);
  auto middle = a.allocate(256 * KiB);
  auto last = a.allocate(256 * KiB);
  fill(middle.data(), middle.size(), 7);
  const auto sum = checksum(middle.data(), middle.size());
  first.reset();
  auto big = a.allocate(400 * KiB);
  EXPECT_EQ(a.stats().compactions, 1U);
  EXPECT_EQ(a.stats().bytes_moved, 512 * KiB);
  EXPECT_EQ(middle.data(), a.base()) << "the live block slid down to the start";
  EXPECT_EQ(checksum(middle.data(), middle.size()), sum);
  EXPECT_EQ(a.stats().failed_allocations, 0U);
}

// Adjacent blocks sliding down by the same distance move as one run; a hole in between starts a
// new run, and a small distance splits the run into non-overlapping pieces. Contents survive.
TEST(arena, AdjacentBlocksMoveAsOneRunInNonOverlappingPieces) {
  const auto dev = make_host_device(8 * MiB);
  arena a(*dev, 4 * MiB);
  std::vector<arena_block> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(a.allocate(256 * KiB));
  std::vector<std::uint64_t> sums(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    fill(blocks[i].data(), blocks[i].size(), 40 + i);
    sums[i] = checksum(blocks[i].data(), blocks[i].size());
  }
  // [hole 768K][3 4][hole 256K][6 7]: two runs, each moved in one copy (distance >= run).
  for (const std::size_t i : {0U, 1U, 2U, 5U}) blocks[i].reset();
  EXPECT_EQ(a.compact(), 4 * 256 * KiB);
  EXPECT_EQ(a.stats().copies, 2U);
  for (const std::size_t i : {3U, 4U, 6U, 7U}) {
    EXPECT_EQ(checksum(blocks[i].data(), blocks[i].size()), sums[i]) << "block " << i;
  }
  EXPECT_EQ(blocks[3].data(), a.base());
  // A 256-byte hole before a run of 256 KiB + 64 KiB: one run in 1280 pieces of 256 bytes.
  auto small = a.allocate(256);
  auto x = a.allocate(256 * KiB);
  auto y = a.allocate(64 * KiB);
  fill(x.data(), x.size(), 90);
  fill(y.data(), y.size(), 91);
  const auto sx = checksum(x.data(), x.size());
  const auto sy = checksum(y.data(), y.size());
  const auto copies_before = a.stats().copies;
  small.reset();
  EXPECT_EQ(a.compact(), 320 * KiB);
  EXPECT_EQ(a.stats().copies - copies_before, 320 * KiB / 256);
  EXPECT_EQ(checksum(x.data(), x.size()), sx);
  EXPECT_EQ(checksum(y.data(), y.size()), sy);
}

TEST(arena, WithoutCompactionTheSameRequestFails) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB, {.compaction = false, .name = "param arena"});
  auto first = a.allocate(256 * KiB);
  auto middle = a.allocate(256 * KiB);
  auto last = a.allocate(256 * KiB);
  first.reset();
  try {
    (void)a.allocate(400 * KiB);
    FAIL() << "fragmented without compaction must fail";
  } catch (const memory_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("param arena"), std::string::npos) << what;
    EXPECT_NE(what.find("largest hole 256 KiB"), std::string::npos) << what;
  }
  EXPECT_FALSE(a.try_allocate(400 * KiB).has_value());
  EXPECT_EQ(a.stats().failed_allocations, 2U);
}

TEST(arena, PinnedBlocksNeverMoveAndCanBlockTheRequest) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB);
  auto first = a.allocate(256 * KiB);
  auto middle = a.allocate(256 * KiB);
  auto last = a.allocate(256 * KiB);
  middle.pin();
  const void* at = middle.data();
  first.reset();
  last.reset();
  // 768 KiB free, but the pinned block splits it into 256 KiB and 512 KiB.
  EXPECT_FALSE(a.try_allocate(600 * KiB).has_value());
  EXPECT_THROW((void)a.allocate(600 * KiB), memory_error);
  EXPECT_EQ(middle.data(), at);
  middle.unpin();
  auto big = a.allocate(600 * KiB);
  EXPECT_EQ(middle.data(), a.base());
}

TEST(arena, CompactionWaitsForTheLastRecordedUse) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB);
  const auto user = dev->create_stream();
  auto first = a.allocate(256 * KiB);
  auto middle = a.allocate(256 * KiB);
  auto last = a.allocate(256 * KiB);
  // A slow "kernel" writes the block; compaction must copy what it wrote, not what was there.
  void* target = middle.data();
  const std::size_t n = middle.size();
  dev->launch_host(user.view(), [target, n] {
    std::this_thread::sleep_for(30ms);
    std::memset(target, 0x6b, n);
  });
  middle.record_use(user.view());
  first.reset();
  auto big = a.allocate(400 * KiB);
  ASSERT_NE(middle.data(), target) << "the block should have moved";
  const auto* bytes = static_cast<const unsigned char*>(middle.data());
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bytes[i], 0x6b) << "byte " << i;
}

TEST(arena, ZeroSizeBlocksTakeNoSpace) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB);
  auto z = a.allocate(0);
  EXPECT_TRUE(static_cast<bool>(z));
  EXPECT_EQ(z.data(), nullptr);
  EXPECT_EQ(a.stats().used, 0U);
}

// Random alloc/free/pin schedules: every live block keeps its checksum across every compaction,
// and a pinned block's address never changes.
TEST(arena, RandomSchedulesKeepEveryBlockIntact) {
  const auto dev = make_host_device(8 * MiB);
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    arena a(*dev, 4 * MiB);
    std::mt19937_64 rng(seed);
    struct live {
      arena_block block;
      std::uint64_t sum;
      void* pinned_at;
    };
    std::map<int, live> blocks;
    int next = 0;
    std::uint64_t compactions_seen = 0;
    const auto verify = [&] {
      for (auto& [id, b] : blocks) {
        ASSERT_EQ(checksum(b.block.data(), b.block.size()), b.sum) << "seed " << seed << " block " << id;
        if (b.pinned_at != nullptr) {
          ASSERT_EQ(b.block.data(), b.pinned_at) << "a pinned block moved";
        }
      }
    };
    for (int op = 0; op < 1200; ++op) {
      const auto dice = rng() % 10;
      if (dice < 5 || blocks.empty()) {
        const std::size_t n = 1 + rng() % (192 * KiB);
        if (auto b = a.try_allocate(n)) {
          fill(b->data(), n, seed * 100000 + static_cast<std::uint64_t>(op));
          const auto sum = checksum(b->data(), n);
          blocks.emplace(next++, live{std::move(*b), sum, nullptr});
        }
      } else {
        auto it = blocks.begin();
        std::advance(it, static_cast<long>(rng() % blocks.size()));
        if (dice < 8) {
          if (it->second.pinned_at != nullptr) {
            it->second.block.unpin();
          }
          blocks.erase(it);
        } else if (it->second.pinned_at == nullptr) {
          it->second.block.pin();
          it->second.pinned_at = it->second.block.data();
        } else {
          it->second.block.unpin();
          it->second.pinned_at = nullptr;
        }
      }
      if (a.stats().compactions != compactions_seen) {
        compactions_seen = a.stats().compactions;
        verify();
      }
    }
    a.compact();
    verify();
    EXPECT_GT(a.stats().compactions, 1U) << "seed " << seed << ": the schedule should force compactions";
    EXPECT_GT(a.stats().bytes_moved, 0U);
    for (auto& [id, b] : blocks) {
      if (b.pinned_at != nullptr) b.block.unpin();
    }
  }
}

}  // namespace
}  // namespace zoe::allocators
