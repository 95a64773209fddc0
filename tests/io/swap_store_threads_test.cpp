// The swap store driven from several threads, each with its own channel: extents of their own,
// distinct chunks of one shared extent, and free() racing submit() on one extent.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "swap_store_support.hpp"
#include "zoe/core/error.hpp"

namespace zoe::testing {
namespace {

using io::io_op;
using io::swap_channel;
using io::swap_extent;
using io::swap_store;

constexpr std::size_t thread_count = 3;

class swap_store_threads_test : public ::testing::Test {
 protected:
  /// Runs body(channel, t) on thread_count threads, each with a channel of its own, and fails
  /// the test with the message of every thread that threw.
  template <typename Body>
  static void on_threads(swap_store& store, const Body& body) {
    std::vector<std::string> failures(thread_count);
    {
      std::vector<std::jthread> threads;
      for (std::size_t t = 0; t < thread_count; ++t) {
        threads.emplace_back([&, t] {
          try {
            swap_channel ch(store);
            body(ch, t);
          } catch (const std::exception& e) {
            failures[t] = e.what();
          }
        });
      }
    }
    for (const auto& f : failures) EXPECT_EQ(f, "");
  }

  scratch_dir dir_;
  scratch_dir other_;
};

TEST_F(swap_store_threads_test, ChannelsOnSeveralThreadsRoundTripTheirOwnExtents) {
  swap_store store(store_options({dir_.path(), other_.path()}, 8 * MiB));
  on_threads(store, [&](swap_channel& ch, std::size_t t) {
    for (std::size_t i = 0; i < 20; ++i) {
      const std::size_t size = (i % 5 + 1) * store_chunk + t * 100;
      const swap_extent e = store.allocate(size);
      auto data = random_bytes(size, t * 1000 + i);
      store_write(ch, e, 0, data);
      std::vector<std::byte> back(size);
      const auto c = store_read(ch, e, 0, back);
      if (!c.ok()) throw std::runtime_error(c.message);
      if (back != data) throw std::runtime_error("extent " + std::to_string(e.id) + " read back different");
      store.free(e);
    }
  });
  EXPECT_EQ(store.free_bytes(), store.capacity());
}

TEST_F(swap_store_threads_test, ThreadsWriteDistinctChunksOfOneExtent) {
  swap_store store(store_options({dir_.path(), other_.path()}, 8 * MiB));
  constexpr std::size_t chunks = 8 * thread_count;
  const swap_extent e = store.allocate(chunks * store_chunk);
  auto data = random_bytes(e.bytes, 1);
  on_threads(store, [&](swap_channel& ch, std::size_t t) {
    for (std::size_t k = t; k < chunks; k += thread_count) {
      store_write(ch, e, k * store_chunk, std::span(data).subspan(k * store_chunk, store_chunk));
    }
  });
  swap_channel ch(store);
  std::vector<std::byte> back(e.bytes);
  const auto c = store_read(ch, e, 0, back);
  ASSERT_TRUE(c.ok()) << c.message;
  EXPECT_TRUE(same_bytes(back, data));
}

// One thread writes to whatever extent is current while another frees and reallocates it, then
// writes and checks its own data there. A write that slipped past free() (the record looked up,
// then freed, then written) would land in the new owner's space and fail its check, or touch a
// destroyed record (ASan).
TEST_F(swap_store_threads_test, FreeRacingSubmitNeverFreesSpaceInUse) {
  swap_store store(store_options({dir_.path()}, 4 * store_chunk));
  std::atomic<std::uint64_t> current{store.allocate(store_chunk).id};
  std::string writer_failure;
  // The stop token (not a flag) so that a failed assertion's early return stops the writer too.
  std::jthread writer([&](const std::stop_token& stop) {
    try {
      swap_channel ch(store);
      auto data = random_bytes(store_chunk, 1);
      while (!stop.stop_requested()) {
        const swap_extent e{current.load(), store_chunk};
        try {
          store_write(ch, e, 0, data);
        } catch (const usage_error&) {
          // freed meanwhile, or the owner is writing it: both are refused, as they must be
        }
      }
    } catch (const std::exception& ex) {
      writer_failure = ex.what();
    }
  });
  swap_channel ch(store);
  // Count reuses, not attempts: a writer that keeps its request in flight can refuse many frees
  // in a row on a loaded machine, and a run with no reuse would test nothing.
  std::size_t reused = 0;
  for (std::size_t i = 0; reused < 100; ++i) {
    const swap_extent old{current.load(), store_chunk};
    try {
      store.free(old);
    } catch (const usage_error&) {
      std::this_thread::yield();
      continue;  // in flight: refused
    }
    const swap_extent mine = store.allocate(store_chunk);
    auto data = random_bytes(store_chunk, i + 2);
    std::vector<std::byte> back(store_chunk);
    store_write(ch, mine, 0, data);
    const auto c = store_read(ch, mine, 0, back);
    ASSERT_TRUE(c.ok()) << c.message;
    ASSERT_TRUE(same_bytes(back, data)) << "a write to a freed extent landed in reused space";
    current.store(mine.id);
    ++reused;
  }
  writer.request_stop();
  writer.join();
  EXPECT_EQ(writer_failure, "");
}

}  // namespace
}  // namespace zoe::testing
