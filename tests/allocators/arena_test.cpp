// The defragmenting arena: best fit, coalescing, compaction that keeps contents and honours pins
// and recorded uses, and stream-ordered reuse of freed space.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <latch>
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

// Fills `n` bytes at `p` with `value`, then queues a "kernel" on `stream` that reads them while
// held: it starts, waits for release(), then checks every byte. The host device runs it on the
// stream's worker thread, so the block it reads is in use until release() is called.
class held_reader {
 public:
  held_reader(device& dev, stream_view stream, void* p, std::size_t n, unsigned char value) {
    std::memset(p, value, n);
    dev.launch_host(stream, [this, p, n, value] {
      started_.count_down();
      release_.wait();
      const auto* bytes = static_cast<const unsigned char*>(p);
      intact_ = std::all_of(bytes, bytes + n, [value](unsigned char b) { return b == value; });
      done_.store(true);
    });
    started_.wait();
  }
  void release() { release_.count_down(); }
  [[nodiscard]] bool done() const { return done_.load(); }
  /// Whether every byte still held its value when read; valid once the stream is synchronized.
  [[nodiscard]] bool intact() const { return intact_; }

 private:
  std::latch started_{1};
  std::latch release_{1};
  std::atomic<bool> done_{false};
  bool intact_ = false;
};

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

// A size within the alignment of 2^64 does not round up: it is too large for any arena, and is
// refused as such, naming it, with nothing taken.
TEST(arena, ASizeWhoseRoundingWrapsIsRefusedNamingIt) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB, {.name = "param arena"});
  auto held = a.allocate(256 * KiB);
  const arena_stats before = a.stats();
  const std::size_t huge = SIZE_MAX - 10;
  try {
    (void)a.allocate(huge);
    FAIL() << "a size that wraps when rounded must be refused";
  } catch (const memory_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("param arena"), std::string::npos) << what;
    EXPECT_NE(what.find(format_bytes(huge)), std::string::npos) << what;
  }
  EXPECT_FALSE(a.try_allocate(huge).has_value());
  const arena_stats after = a.stats();
  EXPECT_EQ(after.used, before.used);
  EXPECT_EQ(after.free, before.free);
  EXPECT_EQ(after.largest_hole, before.largest_hole);
  EXPECT_EQ(after.live_blocks, before.live_blocks);
  EXPECT_EQ(after.failed_allocations, before.failed_allocations + 2);
  auto rest = a.allocate(768 * KiB);
  EXPECT_EQ(a.stats().free, 0U) << "the arena still holds all it held";
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

// Only pins bound what compaction can make of the free space: live unpinned blocks do not.
TEST(arena, TheLargestUnpinnedSpanIsTheRoomBetweenPins) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB);
  EXPECT_EQ(a.largest_unpinned_span(), 1 * MiB);
  auto first = a.allocate(256 * KiB);
  auto middle = a.allocate(128 * KiB);
  auto last = a.allocate(256 * KiB);
  EXPECT_EQ(a.largest_unpinned_span(), 1 * MiB) << "no pin: every block could move";
  middle.pin();
  EXPECT_EQ(a.largest_unpinned_span(), 1 * MiB - 384 * KiB) << "above the pinned block";
  last.pin();
  EXPECT_EQ(a.largest_unpinned_span(), 384 * KiB) << "above the top pin, below the middle one";
  middle.unpin();
  last.unpin();
  EXPECT_EQ(a.largest_unpinned_span(), 1 * MiB);
}

// A request that may come back later takes a hole or nothing: the arena does not slide for it.
TEST(arena, AnAllocationInPlaceNeverCompacts) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB);
  auto first = a.allocate(256 * KiB);
  auto middle = a.allocate(256 * KiB);
  auto last = a.allocate(256 * KiB);
  const void* at = middle.data();
  first.reset();
  EXPECT_FALSE(a.try_allocate_in_place(400 * KiB).has_value());
  EXPECT_EQ(a.stats().compactions, 0U);
  EXPECT_EQ(middle.data(), at);
  auto small = a.try_allocate_in_place(200 * KiB);
  ASSERT_TRUE(small.has_value()) << "a hole that fits is taken";
  EXPECT_EQ(small->data(), a.base()) << "best fit: the freed 256 KiB at the start";
  EXPECT_EQ(a.stats().compactions, 0U);
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

// The same for work on the stream the block was allocated on, which needs no record.
TEST(arena, CompactionWaitsForWorkOnTheBlocksOwnStream) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB);
  const auto user = dev->create_stream();
  auto first = a.allocate(256 * KiB);
  auto middle = a.allocate(256 * KiB, user.view());
  auto last = a.allocate(256 * KiB);
  void* target = middle.data();
  const std::size_t n = middle.size();
  dev->launch_host(user.view(), [target, n] {
    std::this_thread::sleep_for(30ms);
    std::memset(target, 0x6b, n);
  });
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

// ---- stream-ordered reuse ---------------------------------------------------------------------

// [x on A][y][free 512 KiB]: x is freed while a kernel on A still reads it. Best fit alone would
// hand x's hole (the smaller) to the next 256 KiB request; on another stream that request must
// take other space, or its writes land in the block A is reading.
TEST(arena, SpaceFreedWithWorkPendingIsNotHandedToAnotherStream) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB);
  const auto stream_a = dev->create_stream();
  const auto stream_b = dev->create_stream();
  auto x = a.allocate(256 * KiB, stream_a.view());
  auto y = a.allocate(256 * KiB);
  void* const x_at = x.data();
  held_reader reader(*dev, stream_a.view(), x_at, x.size(), 0x5a);
  x.reset();
  EXPECT_EQ(a.stats().pending_free, 256 * KiB);

  auto on_b = a.allocate(256 * KiB, stream_b.view());
  auto on_host = a.allocate(256 * KiB);
  EXPECT_NE(on_b.data(), x_at) << "space still read on stream A went to stream B without a wait";
  EXPECT_NE(on_host.data(), x_at) << "space still read on stream A went to a caller on no stream";
  void* const b_at = on_b.data();
  dev->launch_host(stream_b.view(), [b_at] { std::memset(b_at, 0xff, 256 * KiB); });
  std::memset(on_host.data(), 0xee, on_host.size());
  dev->synchronize(stream_b.view());

  reader.release();
  dev->synchronize(stream_a.view());
  EXPECT_TRUE(reader.intact()) << "the block was overwritten while stream A read it";
  EXPECT_EQ(a.stats().cross_stream_reuses, 0U);
  EXPECT_EQ(a.stats().host_waits, 0U);
}

// The arena is full but for x, freed while A reads it: B gets x's space, behind a wait on A's work.
TEST(arena, AnotherStreamReusesPendingSpaceOnlyAfterItsWork) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 512 * KiB);
  const auto stream_a = dev->create_stream();
  const auto stream_b = dev->create_stream();
  auto x = a.allocate(256 * KiB, stream_a.view());
  auto y = a.allocate(256 * KiB);
  void* const x_at = x.data();
  held_reader reader(*dev, stream_a.view(), x_at, x.size(), 0x5a);
  x.reset();

  auto on_b = a.allocate(256 * KiB, stream_b.view());
  ASSERT_EQ(on_b.data(), x_at) << "the only free space is x's";
  EXPECT_EQ(a.stats().cross_stream_reuses, 1U);
  bool b_ran_after_a = false;
  dev->launch_host(stream_b.view(), [&, x_at] {
    b_ran_after_a = reader.done();
    std::memset(x_at, 0xff, 256 * KiB);
  });
  const auto b_done = dev->create_event();
  dev->record(b_done, stream_b.view());
  // A is held, so B's work, queued behind A's, cannot have run.
  EXPECT_FALSE(dev->query(b_done));

  reader.release();
  dev->synchronize(stream_b.view());
  dev->synchronize(stream_a.view());
  EXPECT_TRUE(b_ran_after_a);
  EXPECT_TRUE(reader.intact());
}

// Stream order already protects the freeing stream: its next allocation reuses the space at once,
// in preference to settled space, and without waiting for anything.
TEST(arena, TheFreeingStreamReusesPendingSpaceAtOnce) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB);
  const auto stream_a = dev->create_stream();
  auto x = a.allocate(256 * KiB, stream_a.view());
  auto y = a.allocate(256 * KiB);
  void* const x_at = x.data();
  held_reader reader(*dev, stream_a.view(), x_at, x.size(), 0x5a);
  x.reset();

  auto again = a.allocate(256 * KiB, stream_a.view());
  EXPECT_EQ(again.data(), x_at);
  EXPECT_EQ(a.stats().pending_free, 0U);
  EXPECT_EQ(a.stats().cross_stream_reuses, 0U);
  EXPECT_EQ(a.stats().host_waits, 0U);
  dev->launch_host(stream_a.view(), [x_at] { std::memset(x_at, 0xff, 256 * KiB); });
  EXPECT_FALSE(reader.done()) << "the allocation must not have waited for A's work";
  reader.release();
  dev->synchronize(stream_a.view());
  EXPECT_TRUE(reader.intact());
}

// A block used on two streams: its space waits for both, and the stream it was allocated on is not
// made to wait for the other stream's work (the arena's own stream joins them).
TEST(arena, SpaceUsedOnTwoStreamsWaitsForBoth) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 512 * KiB);
  const auto stream_a = dev->create_stream();
  const auto stream_b = dev->create_stream();
  auto x = a.allocate(256 * KiB, stream_a.view());
  auto y = a.allocate(256 * KiB);
  void* const x_at = x.data();
  held_reader on_b(*dev, stream_b.view(), x_at, x.size(), 0x5a);
  x.record_use(stream_b.view());
  x.reset();
  const auto a_idle = dev->create_event();
  dev->record(a_idle, stream_a.view());
  dev->synchronize(a_idle);  // returns although B's reader is held

  auto again = a.allocate(256 * KiB, stream_a.view());
  ASSERT_EQ(again.data(), x_at);
  EXPECT_EQ(a.stats().cross_stream_reuses, 1U);
  bool a_ran_after_b = false;
  dev->launch_host(stream_a.view(), [&, x_at] {
    a_ran_after_b = on_b.done();
    std::memset(x_at, 0xff, 256 * KiB);
  });
  on_b.release();
  dev->synchronize(stream_a.view());
  dev->synchronize(stream_b.view());
  EXPECT_TRUE(a_ran_after_b);
  EXPECT_TRUE(on_b.intact());
}

// Back-pressure: a caller on no stream that only pending space can serve blocks until that work
// completes; a request that waiting could not serve fails at once (it would hang here otherwise).
TEST(arena, AFullArenaWaitsForPendingSpaceOrFailsAtOnce) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 512 * KiB, {.name = "activation arena"});
  const auto stream_a = dev->create_stream();
  auto x = a.allocate(256 * KiB, stream_a.view());
  auto y = a.allocate(256 * KiB);
  held_reader reader(*dev, stream_a.view(), x.data(), x.size(), 0x5a);
  x.reset();

  EXPECT_FALSE(a.try_allocate(257 * KiB).has_value());
  try {
    (void)a.allocate(300 * KiB, stream_a.view());
    FAIL() << "more than the free space must fail";
  } catch (const memory_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("activation arena"), std::string::npos) << what;
    EXPECT_NE(what.find("256 KiB free"), std::string::npos) << what;
  }
  EXPECT_EQ(a.stats().failed_allocations, 2U);
  EXPECT_FALSE(reader.done());

  bool reader_done_first = false;
  std::latch asking{1};
  std::thread caller([&] {
    asking.count_down();
    auto b = a.allocate(256 * KiB);
    reader_done_first = reader.done();
  });
  asking.wait();
  reader.release();
  caller.join();
  dev->synchronize(stream_a.view());
  EXPECT_TRUE(reader_done_first) << "the allocation returned while the freed block was still read";
  EXPECT_TRUE(reader.intact());
}

// Compaction that needs space still read on a stream waits for that work before copying into it,
// and keeps the contents of the blocks it moves.
TEST(arena, CompactionWaitsForPendingFreesAndKeepsContents) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB);
  const auto stream_a = dev->create_stream();
  auto p = a.allocate(256 * KiB, stream_a.view());
  auto q = a.allocate(256 * KiB);
  auto r = a.allocate(256 * KiB);
  fill(q.data(), q.size(), 3);
  fill(r.data(), r.size(), 4);
  const auto sq = checksum(q.data(), q.size());
  const auto sr = checksum(r.data(), r.size());
  held_reader reader(*dev, stream_a.view(), p.data(), p.size(), 0x5a);
  p.reset();

  // 512 KiB free, in p's pending 256 KiB and the 256 KiB tail: only compaction makes room.
  std::uint64_t moved = 0;
  std::thread compactor([&] { moved = a.compact(); });
  reader.release();
  compactor.join();
  dev->synchronize(stream_a.view());
  EXPECT_TRUE(reader.intact()) << "compaction copied into p's space while stream A read it";
  EXPECT_EQ(moved, 512 * KiB);
  EXPECT_EQ(q.data(), a.base());
  EXPECT_EQ(checksum(q.data(), q.size()), sq);
  EXPECT_EQ(checksum(r.data(), r.size()), sr);
  EXPECT_EQ(a.stats().pending_free, 0U);
  EXPECT_EQ(a.stats().largest_hole, 512 * KiB);
  auto big = a.allocate(512 * KiB, stream_a.view());
  EXPECT_EQ(static_cast<std::byte*>(big.data()), a.base() + 512 * KiB);
}

// Pending space settles, and coalesces with its neighbours, once its work has completed.
TEST(arena, PendingSpaceCoalescesOnceItsWorkCompletes) {
  const auto dev = make_host_device(2 * MiB);
  arena a(*dev, 1 * MiB, {.compaction = false});
  const auto stream_a = dev->create_stream();
  auto x = a.allocate(256 * KiB, stream_a.view());
  auto y = a.allocate(256 * KiB, stream_a.view());
  auto z = a.allocate(256 * KiB);
  x.reset();
  y.reset();
  dev->synchronize(stream_a.view());
  z.reset();
  auto whole = a.allocate(1 * MiB);
  EXPECT_EQ(static_cast<std::byte*>(whole.data()), a.base());
  EXPECT_EQ(a.stats().host_waits, 0U) << "completed work needs no wait";
}

// Random schedules over two streams and the host: every block is written and checked by tasks on
// its stream (or on a recorded one) while the test thread frees and allocates ahead of them, so
// space is reused and blocks are moved with work pending. A task that finds a byte other than its
// block's value saw a block written or moved under it.
TEST(arena, RandomStreamSchedulesNeverShowABlockAnotherBlocksBytes) {
  const auto dev = make_host_device(4 * MiB);
  const auto stream_a = dev->create_stream();
  const auto stream_b = dev->create_stream();
  const stream_view streams[] = {stream_a.view(), stream_b.view(), stream_view{}};
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    std::atomic<int> mismatches{0};
    arena a(*dev, 2 * MiB);
    std::mt19937_64 rng(seed);
    struct live {
      arena_block block;
      stream_view stream;  // where its tasks run
      bool recorded;       // allocated on no stream, so its tasks' stream is recorded
      unsigned char value;
    };
    std::vector<live> blocks;
    // Queues a task on the block's stream, recorded when the block lives on no stream.
    const auto on_stream = [&](live& b, bool write) {
      void* const p = b.block.data();
      const std::size_t n = b.block.size();
      const unsigned char v = b.value;
      dev->launch_host(b.stream, [p, n, v, write, &mismatches] {
        auto* bytes = static_cast<unsigned char*>(p);
        if (write) {
          std::memset(bytes, v, n);
        } else if (!std::all_of(bytes, bytes + n, [v](unsigned char c) { return c == v; })) {
          ++mismatches;
        }
      });
      if (b.recorded) b.block.record_use(b.stream);
    };
    for (int op = 0; op < 400; ++op) {
      const auto dice = rng() % 10;
      if (dice < 5 || blocks.empty()) {
        const stream_view s = streams[rng() % 3];
        const std::size_t n = 1 + rng() % (160 * KiB);
        if (auto b = a.try_allocate(n, s)) {
          live& l = blocks.emplace_back(live{std::move(*b), s.is_default() ? stream_a.view() : s, s.is_default(),
                                             static_cast<unsigned char>(1 + op % 251)});
          on_stream(l, true);
        }
      } else if (dice < 8) {
        on_stream(blocks[rng() % blocks.size()], false);
      } else {
        blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(rng() % blocks.size()));
      }
    }
    for (auto& b : blocks) on_stream(b, false);
    dev->synchronize();
    EXPECT_EQ(mismatches.load(), 0) << "seed " << seed;
    blocks.clear();
  }
}

}  // namespace
}  // namespace zoe::allocators
