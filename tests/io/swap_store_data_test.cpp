// The swap store's data path on every backend (posix, uring, aio; a backend the kernel refuses
// is skipped), each with registered buffers, with checksums off and on three paths: what is
// written reads back, in part or whole, striped as documented, inside the preallocated files.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "backend_types.hpp"
#include "swap_store_support.hpp"
#include "zoe/core/error.hpp"

namespace zoe::testing {
namespace {

using io::io_op;
using io::swap_channel;
using io::swap_extent;
using io::swap_request;
using io::swap_store;

enum class variant { plain, registered, no_checksums, three_paths };

template <typename Backend, variant V>
struct store_variant {
  using backend = Backend;
  static constexpr variant kind = V;
};

using store_variants = ::testing::Types<
    store_variant<posix_backend_type, variant::plain>, store_variant<posix_backend_type, variant::registered>,
    store_variant<posix_backend_type, variant::no_checksums>, store_variant<posix_backend_type, variant::three_paths>,
    store_variant<uring_backend_type, variant::plain>, store_variant<uring_backend_type, variant::registered>,
    store_variant<uring_backend_type, variant::no_checksums>, store_variant<uring_backend_type, variant::three_paths>,
    store_variant<aio_backend_type, variant::plain>, store_variant<aio_backend_type, variant::registered>,
    store_variant<aio_backend_type, variant::no_checksums>, store_variant<aio_backend_type, variant::three_paths>>;

class store_variant_names {
 public:
  template <typename T>
  static std::string GetName(int) {
    constexpr const char* kinds[] = {"plain", "registered", "no_checksums", "three_paths"};
    return std::string(T::backend::name) + "_" + kinds[static_cast<int>(T::kind)];
  }
};

template <typename T>
class swap_store_data_test : public ::testing::Test {
 protected:
  static constexpr std::size_t arena_bytes = 32 * MiB;

  void SetUp() override {
    if (const auto refusal = backend_refusal(T::backend::name)) GTEST_SKIP() << *refusal;
    const std::size_t paths = T::kind == variant::three_paths ? 3 : 1;
    for (std::size_t i = 0; i < paths; ++i) dirs_.push_back(std::make_unique<scratch_dir>());
  }

  [[nodiscard]] std::unique_ptr<swap_store> make_store(std::uint64_t capacity) {
    std::vector<std::filesystem::path> paths;
    for (const auto& d : dirs_) paths.push_back(d->path());
    auto o = store_options(paths, capacity, T::backend::name);
    o.checksums = T::kind != variant::no_checksums;
    return std::make_unique<swap_store>(std::move(o));
  }

  [[nodiscard]] std::unique_ptr<swap_channel> make_channel(swap_store& store) {
    auto ch = std::make_unique<swap_channel>(store);
    if (T::kind == variant::registered) {
      const std::span<std::byte> region = arena_.span();
      const bool used = ch->register_buffers(std::span(&region, 1));
      // Only io_uring has fixed buffers; the others take the call and keep working. uring may
      // decline them only where the memlock limit cannot hold the region.
      if (std::string(T::backend::name) != "uring") {
        EXPECT_FALSE(used);
      } else if (rlimit lim{}; ::getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur >= region.size()) {
        EXPECT_TRUE(used) << "io_uring took no fixed buffers though RLIMIT_MEMLOCK allows " << lim.rlim_cur << " bytes";
      }
    }
    return ch;
  }

  /// `n` bytes of the (registered, in that variant) arena, `skew` bytes past a 4 KiB boundary.
  [[nodiscard]] std::span<std::byte> memory(std::size_t n, std::size_t skew = 0) {
    used_ = align_up(used_, 4096) + skew;
    if (used_ + n > arena_.size()) throw std::runtime_error("test arena exhausted");
    const auto s = arena_.span().subspan(used_, n);
    used_ += n;
    return s;
  }
  /// Random bytes from `seed`, placed in the arena.
  [[nodiscard]] std::span<std::byte> random_memory(std::size_t n, std::uint64_t seed, std::size_t skew = 0) {
    const auto bytes = random_bytes(n, seed);
    const auto s = memory(n, skew);
    std::memcpy(s.data(), bytes.data(), n);
    return s;
  }

  [[nodiscard]] std::size_t path_count() const { return dirs_.size(); }

  std::vector<std::unique_ptr<scratch_dir>> dirs_;
  aligned_buffer arena_{arena_bytes};
  std::size_t used_ = 0;
};

TYPED_TEST_SUITE(swap_store_data_test, store_variants, store_variant_names);

TYPED_TEST(swap_store_data_test, RoundTripsExtentsOfAnySizeWithPartialReads) {
  auto store = this->make_store(8 * MiB);
  EXPECT_TRUE(store->direct());
  auto ch = this->make_channel(*store);
  for (const std::size_t size : {std::size_t{1}, std::size_t{4097}, store_chunk, 3 * store_chunk + 5}) {
    const swap_extent e = store->allocate(size);
    const auto data = this->random_memory(size, size);
    store_write(*ch, e, 0, data);
    const auto back = this->memory(size, 1);
    const auto c = store_read(*ch, e, 0, back);
    ASSERT_TRUE(c.ok()) << c.message;
    EXPECT_TRUE(same_bytes(back, data)) << size;
    if (size > 10) {
      const auto part = this->memory(size / 3, 7);
      const auto p = store_read(*ch, e, 7, part);
      ASSERT_TRUE(p.ok()) << p.message;
      EXPECT_TRUE(same_bytes(part, data.subspan(7, size / 3))) << size;
    }
  }
}

TYPED_TEST(swap_store_data_test, PartialReadsAtUnalignedOffsetsSpanningOneToManyChunks) {
  constexpr std::size_t chunk = store_chunk;
  auto store = this->make_store(16 * chunk);
  auto ch = this->make_channel(*store);
  const std::size_t size = 5 * chunk + 123;  // the last chunk is short
  const swap_extent e = store->allocate(size);
  const auto data = this->random_memory(size, 11);
  store_write(*ch, e, 0, data);
  struct range {
    std::uint64_t offset;
    std::size_t length;
  };
  const std::vector<range> ranges = {
      {7, 100},                               // inside one chunk
      {chunk - 3, 10},                        // two partial chunks
      {chunk - 3, chunk + 3},                 // a partial chunk, then a whole one
      {chunk, chunk + 1},                     // a whole chunk, then a partial one
      {100, 3 * chunk},                       // partial, two whole, partial
      {chunk + 1, 3 * chunk + 100},           // partial, whole, whole, the short last chunk in part
      {2 * chunk + 5, size - 2 * chunk - 5},  // partial, whole, then the short last chunk whole
      {1, size - 2},                          // everything but the first and last byte
  };
  for (const range& r : ranges) {
    const auto part = this->memory(r.length, 3);
    const auto c = store_read(*ch, e, r.offset, part);
    ASSERT_TRUE(c.ok()) << c.message;
    EXPECT_EQ(c.bytes, r.length);
    EXPECT_TRUE(same_bytes(part, data.subspan(r.offset, r.length))) << r.offset << " +" << r.length;
  }
  // All in flight together: each partial read needs scratch of its own while the others run.
  std::vector<std::span<std::byte>> parts;
  for (const range& r : ranges) parts.push_back(this->memory(r.length));
  for (std::size_t i = 0; i < ranges.size(); ++i) ch->submit({io_op::read, e, ranges[i].offset, parts[i], i});
  std::vector<io::io_completion> done;
  ch->wait(done, ranges.size());
  ASSERT_EQ(done.size(), ranges.size());
  for (const auto& c : done) {
    ASSERT_TRUE(c.ok()) << c.message;
    const range& r = ranges.at(c.user_data);
    EXPECT_TRUE(same_bytes(parts[c.user_data], data.subspan(r.offset, r.length))) << c.user_data;
  }
}

TYPED_TEST(swap_store_data_test, FreedSpaceIsReused) {
  auto store = this->make_store(4 * store_chunk);
  auto ch = this->make_channel(*store);
  std::vector<swap_extent> extents;
  for (std::uint64_t at = 0; at < store->capacity(); at += store_chunk) extents.push_back(store->allocate(store_chunk));
  EXPECT_THROW((void)store->allocate(1), memory_error);
  store->free(extents[2]);
  const swap_extent again = store->allocate(store_chunk);
  const auto data = this->random_memory(store_chunk, 9);
  store_write(*ch, again, 0, data);
  const auto back = this->memory(store_chunk);
  ASSERT_TRUE(store_read(*ch, again, 0, back).ok());
  EXPECT_TRUE(same_bytes(back, data));
  EXPECT_THROW(store->free(extents[2]), usage_error) << "freed twice";
}

// Chunk i of an extent at the start of the store lies in the file of path i % paths, at offset
// (i / paths) chunks.
TYPED_TEST(swap_store_data_test, StripesChunksAcrossThePaths) {
  const std::size_t n = this->path_count();
  auto store = this->make_store(4 * n * store_chunk);
  auto ch = this->make_channel(*store);
  const swap_extent e = store->allocate(2 * n * store_chunk);
  const auto data = this->random_memory(e.bytes, 4);
  store_write(*ch, e, 0, data);
  for (std::size_t i = 0; i < 2 * n; ++i) {
    const auto on_file = peek_file(only_swap_file(*store, i % n), (i / n) * store_chunk, store_chunk);
    EXPECT_TRUE(same_bytes(on_file, data.subspan(i * store_chunk, store_chunk))) << "chunk " << i;
  }
  const auto back = this->memory(e.bytes);
  ASSERT_TRUE(store_read(*ch, e, 0, back).ok());
  EXPECT_TRUE(same_bytes(back, data));
}

// Every byte of the capacity lies inside the space preallocated at creation: a file growing
// under a write would mean its top stripes were never reserved (ENOSPC mid-training).
TYPED_TEST(swap_store_data_test, TheWholeCapacityLiesInsideThePreallocatedFiles) {
  auto store = this->make_store(MiB);
  auto ch = this->make_channel(*store);
  const std::uint64_t stripe = store_chunk * this->path_count();
  EXPECT_GE(store->capacity(), MiB);
  EXPECT_EQ(store->capacity() % stripe, 0u) << "capacity " << store->capacity() << " is not whole stripes";
  std::vector<std::uintmax_t> sizes;
  for (std::size_t i = 0; i < this->path_count(); ++i) {
    sizes.push_back(std::filesystem::file_size(only_swap_file(*store, i)));
    EXPECT_EQ(sizes.back(), store->capacity() / this->path_count()) << "path " << i;
    EXPECT_EQ(sizes.back() % 4096, 0u) << "path " << i;
  }
  const swap_extent e = store->allocate(store->capacity());
  const auto data = this->random_memory(e.bytes, 8);
  store_write(*ch, e, 0, data);
  for (std::size_t i = 0; i < this->path_count(); ++i) {
    EXPECT_EQ(std::filesystem::file_size(only_swap_file(*store, i)), sizes[i]) << "the file of path " << i << " grew";
  }
  const auto back = this->memory(e.bytes);
  ASSERT_TRUE(store_read(*ch, e, 0, back).ok());
  EXPECT_TRUE(same_bytes(back, data));
}

TYPED_TEST(swap_store_data_test, ReadingNeverWrittenDataFails) {
  auto store = this->make_store(4 * store_chunk);
  auto ch = this->make_channel(*store);
  const swap_extent e = store->allocate(store_chunk);
  const auto c = store_read(*ch, e, 0, this->memory(store_chunk));
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.message.find("swap extent " + std::to_string(e.id)), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("never written"), std::string::npos) << c.message;
}

// A request that completes as it is submitted (here an empty one) must not let run() return
// while the others are still in flight: their buffers would be reused under the drive.
TYPED_TEST(swap_store_data_test, RunWaitsForEveryRequestEvenWhenOneCompletesAtOnce) {
  auto store = this->make_store(64 * store_chunk);
  auto ch = this->make_channel(*store);
  const swap_extent e = store->allocate(32 * store_chunk);
  const auto data = this->random_memory(e.bytes, 5);
  const swap_request both[] = {{io_op::write, e, 0, std::span<std::byte>(), 1}, {io_op::write, e, 0, data, 2}};
  ch->run(both);
  EXPECT_EQ(ch->outstanding(), 0U) << "run() returned with requests still in flight";
  const auto back = this->memory(e.bytes);
  ASSERT_TRUE(store_read(*ch, e, 0, back).ok());
  EXPECT_TRUE(same_bytes(back, data));
}

TYPED_TEST(swap_store_data_test, WritesMustCoverWholeChunks) {
  auto store = this->make_store(4 * store_chunk);
  auto ch = this->make_channel(*store);
  const swap_extent e = store->allocate(2 * store_chunk);
  const auto data = this->random_memory(100, 5);
  EXPECT_THROW(ch->submit({io_op::write, e, 10, data, 0}), usage_error);
  EXPECT_THROW(ch->submit({io_op::write, e, 0, data, 0}), usage_error);
  const auto tail = this->random_memory(store_chunk, 6);
  EXPECT_NO_THROW(store_write(*ch, e, store_chunk, tail)) << "the last chunk, whole";
  EXPECT_THROW(ch->submit({io_op::read, e, 2 * store_chunk - 5, tail.first(10), 0}), usage_error)
      << "reads past the extent's end";
  EXPECT_EQ(ch->outstanding(), 0u);
}

TYPED_TEST(swap_store_data_test, ThousandsOfSmallConcurrentRequestsComplete) {
  auto store = this->make_store(16 * MiB);
  auto ch = this->make_channel(*store);
  constexpr std::size_t n = 3000;
  constexpr std::size_t size = 1000;
  const auto data = this->random_memory(n * size, 7);
  std::vector<swap_extent> extents;
  for (std::size_t i = 0; i < n; ++i) {
    extents.push_back(store->allocate(size));
    ch->submit({io_op::write, extents.back(), 0, data.subspan(i * size, size), i});
  }
  std::vector<io::io_completion> done;
  ch->wait(done, n);
  ASSERT_EQ(done.size(), n);
  for (const auto& c : done) ASSERT_TRUE(c.ok()) << c.message;
  const auto back = this->memory(n * size);
  for (std::size_t i = 0; i < n; ++i) ch->submit({io_op::read, extents[i], 0, back.subspan(i * size, size), i});
  done.clear();
  ch->wait(done, n);
  for (const auto& c : done) ASSERT_TRUE(c.ok()) << c.message;
  EXPECT_TRUE(same_bytes(back, data));
  for (const auto& e : extents) store->free(e);
  EXPECT_EQ(store->free_bytes(), store->capacity());
}

}  // namespace
}  // namespace zoe::testing
