// The swap channel's counters: the bytes callers asked for (a partial read fetches whole chunks
// to verify them, which is not counted), run()'s requests included, and a checksum mismatch or a
// refused read counted as an error.
#include <gtest/gtest.h>

#include "swap_store_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/io/io_stats.hpp"

namespace zoe::testing {
namespace {

using io::io_op;
using io::swap_channel;
using io::swap_extent;
using io::swap_store;

TEST(swap_channel_stats_test, CountsWhatCallersAskedForAndEveryFailure) {
  scratch_dir a;
  scratch_dir b;
  swap_store store(store_options({a.path(), b.path()}, 32 * store_chunk));
  swap_channel ch(store);
  EXPECT_EQ(ch.stats().read.requests + ch.stats().write.requests, 0u);

  const swap_extent e = store.allocate(4 * store_chunk + 100);
  auto data = random_bytes(e.bytes, 1);
  store_write(ch, e, 0, data);  // through run()
  std::vector<std::byte> part(store_chunk);
  ASSERT_TRUE(store_read(ch, e, 1000, part).ok());

  const swap_extent never = store.allocate(store_chunk);
  std::vector<std::byte> nothing(store_chunk);
  EXPECT_FALSE(store_read(ch, never, 0, nothing).ok()) << "never written";
  flip_byte(only_swap_file(store, 0), 10);  // chunk 0 of `e` lies at the start of the first path
  std::vector<std::byte> whole(e.bytes);
  const auto corrupt = store_read(ch, e, 0, whole);
  EXPECT_TRUE(corrupt.corrupt) << corrupt.message;

  const io::io_stats s = ch.stats();
  EXPECT_EQ(s.write.requests, 1u);
  EXPECT_EQ(s.write.bytes, e.bytes);
  EXPECT_EQ(s.write.errors, 0u);
  EXPECT_EQ(s.read.requests, 3u);
  EXPECT_EQ(s.read.bytes, part.size()) << "only what the successful read asked for";
  EXPECT_EQ(s.read.errors, 2u);
  EXPECT_GT(s.write.busy_ns, 0u);
  EXPECT_GE(s.write.latency_ns, s.write.busy_ns);
  EXPECT_GE(s.read.latency_ns, s.read.busy_ns);
}

TEST(swap_channel_stats_test, ARefusedSubmitCountsNothing) {
  scratch_dir dir;
  swap_store store(store_options({dir.path()}, 16 * store_chunk));
  swap_channel ch(store);
  const swap_extent e = store.allocate(2 * store_chunk);
  auto odd = random_bytes(10, 2);
  EXPECT_THROW(ch.submit({io_op::write, e, 5, odd, 1}), usage_error);  // not whole chunks
  const io::io_stats s = ch.stats();
  EXPECT_EQ(s.write.requests, 0u);
  EXPECT_EQ(s.write.busy_ns, 0u) << "a request that never started leaves no busy time";
}

}  // namespace
}  // namespace zoe::testing
