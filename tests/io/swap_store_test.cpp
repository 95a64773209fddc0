// The swap store on real files: checksums catch damage on the drive by file and offset, data is
// striped across folders, folders of dead processes are reaped, and every refusal names its path.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "io_test_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/swap_channel.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::testing {
namespace {

using io::io_op;
using io::swap_channel;
using io::swap_extent;
using io::swap_request;
using io::swap_store;

constexpr std::size_t chunk = 64 * KiB;

io::swap_store_options options_for(std::vector<std::filesystem::path> paths, std::uint64_t capacity) {
  io::swap_store_options o;
  o.paths = std::move(paths);
  o.capacity = capacity;
  o.engine = "posix";
  o.io.block_size = chunk;
  o.io.queue_depth = 4;
  return o;
}

void write(swap_channel& ch, const swap_extent& e, std::uint64_t offset, std::span<std::byte> data) {
  const swap_request r{io_op::write, e, offset, data, 0};
  ch.run(std::span(&r, 1));
}

io::io_completion read(swap_channel& ch, const swap_extent& e, std::uint64_t offset, std::span<std::byte> out) {
  ch.submit({io_op::read, e, offset, out, 0});
  std::vector<io::io_completion> done;
  ch.wait(done, 1);
  return done.at(0);
}

// The one swap file of a single-path store, reached through /proc/self/fd.
std::filesystem::path only_swap_file(const swap_store& store, std::size_t index = 0) {
  const auto files = open_files_under(store.folders().at(index));
  if (files.size() != 1) throw std::runtime_error("expected one swap file in " + store.folders().at(index).string());
  return files[0];
}

// Allocates `bytes` in the store and writes random bytes from `seed` there; returns both.
std::pair<swap_extent, std::vector<std::byte>> write_random(swap_store& store, swap_channel& ch, std::size_t bytes,
                                                            std::uint64_t seed) {
  const swap_extent e = store.allocate(bytes);
  auto data = random_bytes(bytes, seed);
  write(ch, e, 0, data);
  return {e, std::move(data)};
}

// Damages one byte of a swap file behind the store's back, as a failing drive would.
void flip_byte(const std::filesystem::path& file, std::uint64_t at) {
  auto byte = peek_file(file, at, 1);
  byte[0] = ~byte[0];
  poke_file(file, at, byte);
}

class swap_store_test : public ::testing::Test {
 protected:
  scratch_dir dir_;
};

TEST_F(swap_store_test, RoundTripsExtentsOfAnySizeWithPartialReads) {
  swap_store store(options_for({dir_.path()}, 8 * MiB));
  EXPECT_TRUE(store.direct());
  swap_channel ch(store);
  for (const std::size_t size : {std::size_t{1}, std::size_t{4097}, chunk, 3 * chunk + 5}) {
    const swap_extent e = store.allocate(size);
    auto data = random_bytes(size, size);
    write(ch, e, 0, data);
    std::vector<std::byte> back(size);
    ASSERT_TRUE(read(ch, e, 0, back).ok());
    EXPECT_EQ(back, data) << size;
    if (size > 10) {
      std::vector<std::byte> part(size / 3);
      const auto c = read(ch, e, 7, part);
      ASSERT_TRUE(c.ok()) << c.message;
      EXPECT_TRUE(std::equal(part.begin(), part.end(), data.begin() + 7)) << size;
    }
  }
}

TEST_F(swap_store_test, PartialReadsAtUnalignedOffsetsSpanningOneToManyChunks) {
  scratch_dir other;
  swap_store store(options_for({dir_.path(), other.path()}, 16 * chunk));
  swap_channel ch(store);
  const std::size_t size = 5 * chunk + 123;  // the last chunk is short
  const auto [e, data] = write_random(store, ch, size, 11);
  struct range {
    std::uint64_t offset;
    std::size_t length;
  };
  const std::vector<range> ranges = {
      {7, 100},                              // inside one chunk
      {chunk - 3, 10},                       // two partial chunks
      {chunk - 3, chunk + 3},                // a partial chunk, then a whole one
      {chunk, chunk + 1},                    // a whole chunk, then a partial one
      {100, 3 * chunk},                      // partial, two whole, partial
      {chunk + 1, 3 * chunk + 100},          // partial, whole, whole, the short last chunk in part
      {2 * chunk + 5, size - 2 * chunk - 5}, // partial, whole, then the short last chunk whole
      {1, size - 2},                         // everything but the first and last byte
  };
  for (const range& r : ranges) {
    std::vector<std::byte> part(r.length);
    const auto c = read(ch, e, r.offset, part);
    ASSERT_TRUE(c.ok()) << c.message;
    EXPECT_EQ(c.bytes, r.length);
    EXPECT_TRUE(same_bytes(part, std::span(data).subspan(r.offset, r.length))) << r.offset << " +" << r.length;
  }
  // All in flight together: each partial read needs scratch of its own while the others run.
  std::vector<std::vector<std::byte>> parts;
  for (const range& r : ranges) parts.emplace_back(r.length);
  for (std::size_t i = 0; i < ranges.size(); ++i) ch.submit({io_op::read, e, ranges[i].offset, parts[i], i});
  std::vector<io::io_completion> done;
  ch.wait(done, ranges.size());
  ASSERT_EQ(done.size(), ranges.size());
  for (const auto& c : done) {
    ASSERT_TRUE(c.ok()) << c.message;
    const range& r = ranges.at(c.user_data);
    EXPECT_TRUE(same_bytes(parts[c.user_data], std::span(data).subspan(r.offset, r.length))) << c.user_data;
  }
}

TEST_F(swap_store_test, PartialReadsVerifyTheWholeChunksBetweenAndTheLastChunk) {
  swap_store store(options_for({dir_.path()}, 8 * chunk));
  swap_channel ch(store);
  const auto [e, data] = write_random(store, ch, 4 * chunk, 12);
  const auto swap_file = only_swap_file(store);
  // Chunk 1 is damaged: a read from inside chunk 0 to inside chunk 2 reads chunk 1 straight into
  // the caller's buffer and must still catch it there.
  flip_byte(swap_file, chunk + 17);
  std::vector<std::byte> part(2 * chunk);
  auto c = read(ch, e, chunk / 2, part);
  EXPECT_TRUE(c.corrupt) << c.message;
  EXPECT_NE(c.message.find("at offset " + std::to_string(chunk)), std::string::npos) << c.message;
  flip_byte(swap_file, chunk + 17);
  c = read(ch, e, chunk / 2, part);
  ASSERT_TRUE(c.ok()) << c.message;
  EXPECT_TRUE(same_bytes(part, std::span(data).subspan(chunk / 2, 2 * chunk)));
  // Chunk 3 is damaged, away from the part asked for: the partial last chunk is verified whole.
  flip_byte(swap_file, 4 * chunk - 1);
  c = read(ch, e, 2 * chunk + 9, std::span(part).first(chunk + 10));
  EXPECT_TRUE(c.corrupt) << c.message;
  EXPECT_NE(c.message.find("at offset " + std::to_string(3 * chunk)), std::string::npos) << c.message;
}

TEST_F(swap_store_test, AutoChoosesTheBackendOnceForTheStore) {
  auto options = options_for({dir_.path()}, 4 * chunk);
  options.engine = "auto";
  const auto saved = log::current_level();
  log::set_level(log::level::info);
  ::testing::internal::CaptureStderr();
  std::string err;
  std::string first;
  std::string second;
  try {
    swap_store store(options);  // prewrite makes engines too
    swap_channel a(store);
    swap_channel b(store);
    first = a.backend_name();
    second = b.backend_name();
  } catch (...) {
    err = ::testing::internal::GetCapturedStderr();
    log::set_level(saved);
    throw;
  }
  err = ::testing::internal::GetCapturedStderr();
  log::set_level(saved);
  EXPECT_EQ(first, second);
  std::size_t choices = 0;
  for (auto at = err.find("I/O engine auto"); at != std::string::npos; at = err.find("I/O engine auto", at + 1)) ++choices;
  EXPECT_EQ(choices, 1u) << err;
  EXPECT_NE(err.find("took " + first), std::string::npos) << err;
}

TEST_F(swap_store_test, FreedSpaceIsReused) {
  swap_store store(options_for({dir_.path()}, 4 * chunk));
  swap_channel ch(store);
  std::vector<swap_extent> extents;
  for (int i = 0; i < 4; ++i) extents.push_back(store.allocate(chunk));
  EXPECT_THROW((void)store.allocate(1), memory_error);
  store.free(extents[2]);
  const swap_extent again = store.allocate(chunk);
  auto data = random_bytes(chunk, 9);
  write(ch, again, 0, data);
  std::vector<std::byte> back(chunk);
  ASSERT_TRUE(read(ch, again, 0, back).ok());
  EXPECT_EQ(back, data);
  EXPECT_THROW(store.free(extents[2]), usage_error) << "freed twice";
}

TEST_F(swap_store_test, FullStoreErrorNamesTheSizes) {
  swap_store store(options_for({dir_.path()}, MiB));
  try {
    (void)store.allocate(2 * MiB);
    FAIL();
  } catch (const memory_error& e) {
    EXPECT_NE(std::string(e.what()).find("2 MiB"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("capacity 1 MiB"), std::string::npos) << e.what();
  }
}

TEST_F(swap_store_test, FlippedByteOnTheDriveIsCaughtWithFileAndOffset) {
  swap_store store(options_for({dir_.path()}, 4 * chunk));
  swap_channel ch(store);
  const auto [e, data] = write_random(store, ch, 2 * chunk, 1);
  flip_byte(only_swap_file(store), chunk + 100);

  std::vector<std::byte> back(2 * chunk);
  const auto c = read(ch, e, 0, back);
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(c.corrupt);
  EXPECT_NE(c.message.find("checksum mismatch"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find(store.folders()[0].string()), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("at offset " + std::to_string(chunk)), std::string::npos) << c.message;
  EXPECT_THROW(c.throw_if_failed(), corruption_error);

  // A partial read inside the damaged chunk, away from the damaged byte, still verifies.
  std::vector<std::byte> part(10);
  EXPECT_TRUE(read(ch, e, chunk + 5000, part).corrupt);
  EXPECT_TRUE(read(ch, e, 0, std::span(back).first(chunk)).ok()) << "the undamaged chunk still reads";
}

TEST_F(swap_store_test, TornChunkIsCaught) {
  swap_store store(options_for({dir_.path()}, 4 * chunk));
  swap_channel ch(store);
  const swap_extent e = store.allocate(chunk);
  auto first = random_bytes(chunk, 2);
  write(ch, e, 0, first);
  const auto old_half = peek_file(only_swap_file(store), chunk / 2, chunk / 2);
  auto second = random_bytes(chunk, 3);
  write(ch, e, 0, second);
  poke_file(only_swap_file(store), chunk / 2, old_half);  // only the first half of the rewrite landed
  std::vector<std::byte> back(chunk);
  const auto c = read(ch, e, 0, back);
  EXPECT_TRUE(c.corrupt) << c.message;
  EXPECT_NE(c.message.find("at offset 0"), std::string::npos) << c.message;
}

TEST_F(swap_store_test, StripesChunksAcrossTwoDirectories) {
  scratch_dir other;
  swap_store store(options_for({dir_.path(), other.path()}, 8 * chunk));
  swap_channel ch(store);
  const swap_extent e = store.allocate(4 * chunk);
  auto data = random_bytes(4 * chunk, 4);
  write(ch, e, 0, data);
  const auto f0 = only_swap_file(store, 0);
  const auto f1 = only_swap_file(store, 1);
  // Chunks 0 and 2 in the first folder's file, 1 and 3 in the second's, side by side.
  const auto a = peek_file(f0, 0, 2 * chunk);
  const auto b = peek_file(f1, 0, 2 * chunk);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + chunk, data.begin()));
  EXPECT_TRUE(std::equal(b.begin(), b.begin() + chunk, data.begin() + chunk));
  EXPECT_TRUE(std::equal(a.begin() + chunk, a.end(), data.begin() + 2 * chunk));
  EXPECT_TRUE(std::equal(b.begin() + chunk, b.end(), data.begin() + 3 * chunk));
  std::vector<std::byte> back(4 * chunk);
  ASSERT_TRUE(read(ch, e, 0, back).ok());
  EXPECT_EQ(back, data);
}

TEST_F(swap_store_test, ReadingNeverWrittenDataFails) {
  swap_store store(options_for({dir_.path()}, 4 * chunk));
  swap_channel ch(store);
  const swap_extent e = store.allocate(chunk);
  std::vector<std::byte> back(chunk);
  const auto c = read(ch, e, 0, back);
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.message.find("never written"), std::string::npos) << c.message;
}

// A request that completes as it is submitted (here an empty one) must not let run() return
// while the others are still in flight: their buffers would be reused under the drive.
TEST_F(swap_store_test, RunWaitsForEveryRequestEvenWhenOneCompletesAtOnce) {
  swap_store store(options_for({dir_.path()}, 64 * chunk));
  swap_channel ch(store);
  const swap_extent e = store.allocate(32 * chunk);
  auto data = random_bytes(32 * chunk, 5);
  const swap_request both[] = {{io_op::write, e, 0, std::span<std::byte>(), 1}, {io_op::write, e, 0, data, 2}};
  ch.run(both);
  EXPECT_EQ(ch.outstanding(), 0U) << "run() returned with requests still in flight";
  std::vector<std::byte> back(data.size());
  ASSERT_TRUE(read(ch, e, 0, back).ok());
  EXPECT_TRUE(same_bytes(back, data));
}

TEST_F(swap_store_test, WritesMustCoverWholeChunks) {
  swap_store store(options_for({dir_.path()}, 4 * chunk));
  swap_channel ch(store);
  const swap_extent e = store.allocate(2 * chunk);
  auto data = random_bytes(100, 5);
  EXPECT_THROW(ch.submit({io_op::write, e, 10, data, 0}), usage_error);
  EXPECT_THROW(ch.submit({io_op::write, e, 0, data, 0}), usage_error);
  auto tail = random_bytes(chunk, 6);
  EXPECT_NO_THROW(write(ch, e, chunk, tail)) << "the last chunk, whole";
  EXPECT_THROW(ch.submit({io_op::read, e, 2 * chunk - 5, std::span(tail).first(10), 0}), usage_error)
      << "reads past the extent's end";
  EXPECT_EQ(ch.outstanding(), 0u);
}

void expect_refused(const std::filesystem::path& p, const std::string& why) {
  try {
    swap_store store(options_for({p}, MiB));
    FAIL() << "accepted " << p;
  } catch (const io_error& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST_F(swap_store_test, RefusalsNameThePath) {
  expect_refused(dir_ / "missing", "does not exist");
  write_whole_file(dir_ / "plain", random_bytes(10, 1));
  expect_refused(dir_ / "plain", "not a directory");
}

TEST_F(swap_store_test, ReadOnlyPathIsRefusedNamingIt) {
  const auto ro = scoped_mount::ramfs();
  if (!ro) GTEST_SKIP() << "mounting ramfs is refused here, so there is no read-only folder to offer";
  if (!ro->remount_read_only()) GTEST_SKIP() << "remounting ramfs read-only is refused here";
  expect_refused(ro->path(), "not writable");
}

TEST_F(swap_store_test, MemoryFileSystemGetsAWarning) {
  const auto mount = scoped_mount::ramfs();
  if (!mount) GTEST_SKIP() << "mounting ramfs is refused here";
  ::testing::internal::CaptureStderr();
  swap_store store(options_for({mount->path()}, MiB));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(mount->path().string()), std::string::npos) << err;
  EXPECT_NE(err.find("memory, not a drive"), std::string::npos) << err;
  EXPECT_FALSE(store.direct());
}

TEST_F(swap_store_test, StaleFoldersAreReapedAndLiveOnesKept) {
  const auto stale = dir_ / "zoe-swap-999999-dead";
  std::filesystem::create_directory(stale);
  write_whole_file(stale / "swap-0", random_bytes(100, 2));  // left by a crash before unlink
  const auto live = dir_ / "zoe-swap-1-alive";
  std::filesystem::create_directory(live);
  const int held = ::open(live.c_str(), O_RDONLY | O_DIRECTORY);  // its owner's lock is on the folder
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  {
    swap_store store(options_for({dir_.path()}, MiB));
    EXPECT_FALSE(std::filesystem::exists(stale)) << "a folder whose lock is free belongs to a dead process";
    EXPECT_TRUE(std::filesystem::exists(live)) << "a locked folder belongs to a live process";
    EXPECT_EQ(store.folders()[0].parent_path(), dir_.path());
  }
  ::close(held);
  EXPECT_TRUE(std::filesystem::exists(live));
}

TEST_F(swap_store_test, AProcessKilledMidWriteLeavesNothingAfterTheNextRunStarts) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      swap_store store(options_for({dir_.path()}, 16 * MiB));
      swap_channel ch(store);
      const swap_extent e = store.allocate(16 * MiB);
      auto data = random_bytes(16 * MiB, 1);
      for (;;) write(ch, e, 0, data);
    } catch (...) {
    }
    ::_exit(3);
  }
  // Wait until the child's folder exists and it is writing, then kill it without warning.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool seen = false;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
      seen = seen || entry.path().filename().string().starts_with("zoe-swap-" + std::to_string(child) + "-");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(seen) << "the child never created its swap folder";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child should have been killed mid-write";

  swap_store next(options_for({dir_.path()}, MiB));
  std::size_t entries = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_.path())) {
    ++entries;
    EXPECT_EQ(entry.path(), next.folders()[0]) << "left behind: " << entry.path();
  }
  EXPECT_EQ(entries, 1u);
}

TEST_F(swap_store_test, TenThousandSmallConcurrentRequestsComplete) {
  swap_store store(options_for({dir_.path()}, 64 * MiB));
  swap_channel ch(store);
  constexpr std::size_t n = 10000;
  constexpr std::size_t size = 1000;
  const auto data = random_bytes(n * size, 7);
  std::vector<swap_extent> extents;
  for (std::size_t i = 0; i < n; ++i) {
    extents.push_back(store.allocate(size));
    ch.submit({io_op::write, extents.back(), 0, std::span(const_cast<std::byte*>(data.data()) + i * size, size), i});
  }
  std::vector<io::io_completion> done;
  ch.wait(done, n);
  ASSERT_EQ(done.size(), n);
  for (const auto& c : done) ASSERT_TRUE(c.ok()) << c.message;
  std::vector<std::byte> back(n * size);
  for (std::size_t i = 0; i < n; ++i) ch.submit({io_op::read, extents[i], 0, std::span(back).subspan(i * size, size), i});
  done.clear();
  ch.wait(done, n);
  for (const auto& c : done) ASSERT_TRUE(c.ok()) << c.message;
  EXPECT_EQ(back, data);
  for (const auto& e : extents) store.free(e);
  EXPECT_EQ(store.free_bytes(), store.capacity());
}

}  // namespace
}  // namespace zoe::testing
