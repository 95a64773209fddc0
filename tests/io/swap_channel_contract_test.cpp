// The swap channel's contract: run() waits for and reports only its own requests, a throwing
// submit or run leaves nothing of its own in flight, two writers of one chunk are refused, and the
// store's options are checked with errors that name the value.
#include <gtest/gtest.h>

#include "swap_store_support.hpp"
#include "zoe/core/error.hpp"

namespace zoe::testing {
namespace {

using io::io_op;
using io::swap_channel;
using io::swap_extent;
using io::swap_request;
using io::swap_store;

class swap_channel_contract_test : public ::testing::Test {
 protected:
  scratch_dir dir_;
};

// Before: run() collected the earlier request's completion, threw its failure as its own and
// dropped the earlier write's success, so neither reached the caller's wait().
TEST_F(swap_channel_contract_test, RunReportsOnlyItsOwnRequests) {
  swap_store store(store_options({dir_.path()}, 16 * store_chunk));
  swap_channel ch(store);
  const swap_extent never_written = store.allocate(store_chunk);
  const swap_extent earlier = store.allocate(4 * store_chunk);
  const swap_extent own = store.allocate(4 * store_chunk);
  std::vector<std::byte> missing(store_chunk);
  auto earlier_data = random_bytes(earlier.bytes, 1);
  auto own_data = random_bytes(own.bytes, 2);
  ch.submit({io_op::read, never_written, 0, missing, 99});  // fails, completing at once
  ch.submit({io_op::write, earlier, 0, earlier_data, 7});
  EXPECT_NO_THROW(store_write(ch, own, 0, own_data)) << "run() threw a failure of a request that is not its own";
  std::vector<io::io_completion> done;
  while (ch.outstanding() > 0) ch.wait(done, 1);
  ASSERT_EQ(done.size(), 2u) << "the earlier requests' completions must stay for wait()";
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.user_data < b.user_data; });
  EXPECT_EQ(done[0].user_data, 7u);
  EXPECT_TRUE(done[0].ok()) << done[0].message;
  EXPECT_EQ(done[1].user_data, 99u);
  EXPECT_FALSE(done[1].ok());
  std::vector<std::byte> back(own.bytes);
  ASSERT_TRUE(store_read(ch, own, 0, back).ok());
  EXPECT_TRUE(same_bytes(back, own_data));
}

// Before: the first write stayed in flight while run() threw for the second, so the caller
// unwound and freed a buffer the drive was still reading.
TEST_F(swap_channel_contract_test, RunThatThrowsHasWaitedForItsEarlierRequests) {
  swap_store store(store_options({dir_.path()}, 64 * store_chunk));
  swap_channel ch(store);
  const swap_extent e = store.allocate(32 * store_chunk);
  auto data = random_bytes(e.bytes, 3);
  auto odd = random_bytes(100, 4);
  const swap_request requests[] = {{io_op::write, e, 0, data, 1},
                                   {io_op::write, e, 10, odd, 2}};  // 2: not whole chunks
  EXPECT_THROW(ch.run(requests), usage_error);
  EXPECT_NO_THROW(store.free(e)) << "the first write was still in flight after run() threw";
}

TEST_F(swap_channel_contract_test, ASecondWriterOfAChunkIsRefusedNamingTheExtent) {
  swap_store store(store_options({dir_.path()}, 16 * store_chunk));
  swap_channel a(store);
  swap_channel b(store);
  const swap_extent e = store.allocate(4 * store_chunk);
  auto first = random_bytes(e.bytes, 5);
  store_write(a, e, 0, first);
  auto second = random_bytes(2 * store_chunk, 6);
  a.submit({io_op::write, e, 0, std::span(second), 1});  // chunks 0 and 1, in flight
  auto overlap = random_bytes(2 * store_chunk, 7);
  for (swap_channel* ch : {&b, &a}) {
    try {
      ch->submit({io_op::write, e, store_chunk, overlap, 2});  // chunks 1 and 2
      FAIL() << "a second writer of chunk 1 was accepted";
    } catch (const usage_error& err) {
      EXPECT_NE(std::string(err.what()).find("swap extent " + std::to_string(e.id)), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("chunk 1"), std::string::npos) << err.what();
      // The caller's error: where zoe raised it goes to the debug log, not into the message.
      EXPECT_EQ(std::string(err.what()).find("swap_channel.cpp"), std::string::npos) << err.what();
    }
  }
  EXPECT_EQ(b.outstanding(), 0u);
  auto other = random_bytes(store_chunk, 8);
  EXPECT_NO_THROW(store_write(b, e, 3 * store_chunk, other)) << "a distinct chunk of the same extent";
  std::vector<io::io_completion> done;
  a.wait(done, 1);
  ASSERT_TRUE(done.at(0).ok()) << done[0].message;
  // The refused write changed nothing: chunk 2 still holds (and verifies as) the first write.
  std::vector<std::byte> back(e.bytes);
  const auto c = store_read(b, e, 0, back);
  ASSERT_TRUE(c.ok()) << c.message;
  EXPECT_TRUE(same_bytes(std::span(back).first(2 * store_chunk), second));
  EXPECT_TRUE(same_bytes(std::span(back).subspan(2 * store_chunk, store_chunk),
                         std::span(first).subspan(2 * store_chunk, store_chunk)));
  EXPECT_TRUE(same_bytes(std::span(back).subspan(3 * store_chunk), other));
  EXPECT_NO_THROW(store_write(b, e, store_chunk, overlap)) << "once the first write is done";
}

TEST_F(swap_channel_contract_test, ReadingAChunkBeingWrittenFailsNamingIt) {
  swap_store store(store_options({dir_.path()}, 16 * store_chunk));
  swap_channel ch(store);
  const swap_extent e = store.allocate(store_chunk);
  auto data = random_bytes(e.bytes, 9);
  std::vector<std::byte> back(e.bytes);
  ch.submit({io_op::write, e, 0, data, 1});
  ch.submit({io_op::read, e, 0, back, 2});
  std::vector<io::io_completion> done;
  while (ch.outstanding() > 0) ch.wait(done, 1);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& c : done) {
    if (c.user_data == 1) {
      EXPECT_TRUE(c.ok()) << c.message;
    } else {
      EXPECT_NE(c.message.find("still in flight"), std::string::npos) << c.message;
    }
  }
}

TEST_F(swap_channel_contract_test, FreeIsRefusedWhileARequestIsInFlight) {
  swap_store store(store_options({dir_.path()}, 16 * store_chunk));
  swap_channel ch(store);
  const swap_extent e = store.allocate(8 * store_chunk);
  auto data = random_bytes(e.bytes, 10);
  ch.submit({io_op::write, e, 0, data, 1});
  try {
    store.free(e);
    FAIL() << "freed space with a write in flight";
  } catch (const usage_error& err) {
    EXPECT_NE(std::string(err.what()).find("swap extent " + std::to_string(e.id)), std::string::npos) << err.what();
  }
  std::vector<io::io_completion> done;
  ch.wait(done, 1);
  EXPECT_NO_THROW(store.free(e));
}

// Before: 192 KiB passed validate() and the store took it; every chunk-sized allocation then
// failed on the allocator's power-of-two alignment.
TEST_F(swap_channel_contract_test, ABlockSizeThatIsNotAPowerOfTwoIsRefusedNamingIt) {
  auto options = store_options({dir_.path()}, MiB);
  options.io.block_size = 3 * store_chunk;
  try {
    swap_store store(options);
    FAIL() << "block_size " << options.io.block_size << " was accepted";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("block_size"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(3 * store_chunk)), std::string::npos) << e.what();
  }
}

// Before: align_up's mask does not round to a multiple of 3, 5, 6 or 7 chunks, so each file's
// share was not whole 4 KiB blocks and the top stripes lay past the preallocated end.
TEST_F(swap_channel_contract_test, CapacityIsWholeStripesOnAnyNumberOfPaths) {
  for (const std::size_t n : {2U, 3U, 5U, 6U, 7U}) {
    std::vector<std::unique_ptr<scratch_dir>> dirs;
    std::vector<std::filesystem::path> paths;
    for (std::size_t i = 0; i < n; ++i) paths.push_back(dirs.emplace_back(std::make_unique<scratch_dir>())->path());
    auto options = store_options(paths, MiB + 1);
    options.prewrite = false;
    swap_store store(options);
    EXPECT_GE(store.capacity(), MiB + 1) << n << " paths";
    EXPECT_EQ(store.capacity() % (n * store_chunk), 0u) << n << " paths: capacity " << store.capacity();
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(std::filesystem::file_size(only_swap_file(store, i)), store.capacity() / n) << n << " paths";
    }
  }
}

}  // namespace
}  // namespace zoe::testing
