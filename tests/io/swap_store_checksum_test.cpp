// Checksums on every backend: damage on the drive (a flipped byte, a torn chunk) is caught on
// every read that touches it, by file and offset, whole or partial.
#include <gtest/gtest.h>

#include "backend_types.hpp"
#include "swap_store_support.hpp"
#include "zoe/core/error.hpp"

namespace zoe::testing {
namespace {

using io::swap_channel;
using io::swap_extent;
using io::swap_store;

constexpr std::size_t chunk = store_chunk;

// Allocates `bytes` in the store and writes random bytes from `seed` there; returns both.
std::pair<swap_extent, std::vector<std::byte>> write_random(swap_store& store, swap_channel& ch, std::size_t bytes,
                                                            std::uint64_t seed) {
  const swap_extent e = store.allocate(bytes);
  auto data = random_bytes(bytes, seed);
  store_write(ch, e, 0, data);
  return {e, std::move(data)};
}

template <typename Backend>
class swap_store_checksum_test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const auto refusal = backend_refusal(Backend::name)) GTEST_SKIP() << *refusal;
  }
  scratch_dir dir_;
};

TYPED_TEST_SUITE(swap_store_checksum_test, raw_backend_types, backend_type_names);

TYPED_TEST(swap_store_checksum_test, PartialReadsVerifyTheWholeChunksBetweenAndTheLastChunk) {
  swap_store store(store_options({this->dir_.path()}, 8 * chunk, TypeParam::name));
  swap_channel ch(store);
  const auto [e, data] = write_random(store, ch, 4 * chunk, 12);
  const auto swap_file = only_swap_file(store);
  // Chunk 1 is damaged: a read from inside chunk 0 to inside chunk 2 reads chunk 1 straight into
  // the caller's buffer and must still catch it there.
  flip_byte(swap_file, chunk + 17);
  std::vector<std::byte> part(2 * chunk);
  auto c = store_read(ch, e, chunk / 2, part);
  EXPECT_TRUE(c.corrupt) << c.message;
  EXPECT_NE(c.message.find("at offset " + std::to_string(chunk)), std::string::npos) << c.message;
  flip_byte(swap_file, chunk + 17);
  c = store_read(ch, e, chunk / 2, part);
  ASSERT_TRUE(c.ok()) << c.message;
  EXPECT_TRUE(same_bytes(part, std::span(data).subspan(chunk / 2, 2 * chunk)));
  // Chunk 3 is damaged, away from the part asked for: the partial last chunk is verified whole.
  flip_byte(swap_file, 4 * chunk - 1);
  c = store_read(ch, e, 2 * chunk + 9, std::span(part).first(chunk + 10));
  EXPECT_TRUE(c.corrupt) << c.message;
  EXPECT_NE(c.message.find("at offset " + std::to_string(3 * chunk)), std::string::npos) << c.message;
}

TYPED_TEST(swap_store_checksum_test, FlippedByteOnTheDriveIsCaughtWithFileAndOffset) {
  swap_store store(store_options({this->dir_.path()}, 4 * chunk, TypeParam::name));
  swap_channel ch(store);
  const auto [e, data] = write_random(store, ch, 2 * chunk, 1);
  flip_byte(only_swap_file(store), chunk + 100);

  std::vector<std::byte> back(2 * chunk);
  const auto c = store_read(ch, e, 0, back);
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(c.corrupt);
  EXPECT_NE(c.message.find("checksum mismatch"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find(store.folders()[0].string()), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("at offset " + std::to_string(chunk)), std::string::npos) << c.message;
  EXPECT_THROW(c.throw_if_failed(), corruption_error);

  // A partial read inside the damaged chunk, away from the damaged byte, still verifies.
  std::vector<std::byte> part(10);
  EXPECT_TRUE(store_read(ch, e, chunk + 5000, part).corrupt);
  EXPECT_TRUE(store_read(ch, e, 0, std::span(back).first(chunk)).ok()) << "the undamaged chunk still reads";
}

TYPED_TEST(swap_store_checksum_test, TornChunkIsCaught) {
  swap_store store(store_options({this->dir_.path()}, 4 * chunk, TypeParam::name));
  swap_channel ch(store);
  const swap_extent e = store.allocate(chunk);
  auto first = random_bytes(chunk, 2);
  store_write(ch, e, 0, first);
  const auto old_half = peek_file(only_swap_file(store), chunk / 2, chunk / 2);
  auto second = random_bytes(chunk, 3);
  store_write(ch, e, 0, second);
  poke_file(only_swap_file(store), chunk / 2, old_half);  // only the first half of the rewrite landed
  std::vector<std::byte> back(chunk);
  const auto c = store_read(ch, e, 0, back);
  EXPECT_TRUE(c.corrupt) << c.message;
  EXPECT_NE(c.message.find("at offset 0"), std::string::npos) << c.message;
}

}  // namespace
}  // namespace zoe::testing
