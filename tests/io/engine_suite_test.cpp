// The typed suite: every I/O backend must pass these unchanged.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <thread>

#include "backend_types.hpp"
#include "io_test_support.hpp"
#include "fault_injecting_backend.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/file.hpp"
#include "zoe/io/io_engine.hpp"

namespace zoe::testing {
namespace {

using io::file;
using io::io_completion;
using io::io_engine;
using io::io_op;
using io::io_request;

template <typename Backend>
class engine_suite : public ::testing::Test {
 protected:
  std::unique_ptr<io_engine> make_engine(io::engine_options o = {}) {
    try {
      return std::make_unique<io_engine>(Backend::make(o), o);
    } catch (const std::exception& e) {
      skip_reason_ = e.what();
      return nullptr;
    }
  }

  std::unique_ptr<file> open_file(const std::string& name) {
    return std::make_unique<file>(dir_ / name, io::open_mode::read_write, io::file_options{.create = true});
  }

  // Writes `data` at `offset` through the engine from a buffer placed `shift` bytes past a 4 KiB
  // boundary, reads it back the same way, and checks the bytes and the file on disk.
  void round_trip(std::size_t size, std::uint64_t offset, std::size_t shift) {
    auto engine = make_engine();
    if (!engine) GTEST_SKIP() << skip_reason_;
    const auto f = open_file("rt.dat");
    const auto data = random_bytes(size, size * 31 + offset + shift);
    aligned_buffer out(size + shift);
    std::memcpy(out.data() + shift, data.data(), size);
    const io_request w{io_op::write, f.get(), out.span().subspan(shift, size), offset, 1};
    engine->run(std::span(&w, 1));
    EXPECT_EQ(std::memcmp(out.data() + shift, data.data(), size), 0) << "write changed the caller's buffer";

    aligned_buffer in(size + shift);
    std::memset(in.data(), 0xAB, size + shift);
    const io_request r{io_op::read, f.get(), in.span().subspan(shift, size), offset, 2};
    engine->run(std::span(&r, 1));
    ASSERT_EQ(std::memcmp(in.data() + shift, data.data(), size), 0) << "size " << size << " offset " << offset;

    const auto on_disk = read_whole_file(dir_ / "rt.dat");
    ASSERT_EQ(on_disk.size(), offset + size) << "file length must be exactly what was written";
    EXPECT_EQ(std::memcmp(on_disk.data() + offset, data.data(), size), 0);
    for (std::uint64_t i = 0; i < offset; ++i) ASSERT_EQ(on_disk[i], std::byte{0}) << "hole at " << i;
  }

  scratch_dir dir_;
  std::string skip_reason_;
};

TYPED_TEST_SUITE(engine_suite, backend_types, backend_type_names);

constexpr std::size_t sizes[] = {1, 4095, 4096, 4097, MiB - 1, MiB, MiB + 1};

TYPED_TEST(engine_suite, RoundTripAtAlignedOffsets) {
  for (const std::size_t size : sizes) {
    for (const std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{8192}}) {
      this->round_trip(size, offset, 0);
      std::filesystem::remove(this->dir_ / "rt.dat");
    }
  }
}

TYPED_TEST(engine_suite, RoundTripAtUnalignedOffsets) {
  for (const std::size_t size : sizes) {
    for (const std::uint64_t offset :
         {std::uint64_t{1}, std::uint64_t{4095}, std::uint64_t{4097}, std::uint64_t{MiB + 333}}) {
      this->round_trip(size, offset, 0);
      std::filesystem::remove(this->dir_ / "rt.dat");
    }
  }
}

TYPED_TEST(engine_suite, RoundTripFromUnalignedBuffers) {
  for (const std::size_t size : sizes) {
    for (const std::size_t shift : {std::size_t{1}, std::size_t{512}, std::size_t{4095}}) {
      this->round_trip(size, 4096, shift);
      std::filesystem::remove(this->dir_ / "rt.dat");
    }
  }
}

TYPED_TEST(engine_suite, RoundTrip64MiBAlignedAndUnaligned) {
  this->round_trip(64 * MiB, 0, 0);
  std::filesystem::remove(this->dir_ / "rt.dat");
  this->round_trip(64 * MiB + 7, 4093, 3);
}

TYPED_TEST(engine_suite, UsesODirectOnARealDisk) {
  const auto f = this->open_file("direct.dat");
  if (!f->direct()) {
    // Ask the kernel directly: only a folder that refuses O_DIRECT itself excuses the fallback.
    const int fd = ::open((this->dir_ / "direct.dat").c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    const int open_errno = errno;
    if (fd >= 0) ::close(fd);
    ASSERT_LT(fd, 0) << this->dir_.path() << " takes O_DIRECT, yet the file fell back to buffered I/O";
    GTEST_SKIP() << this->dir_.path() << " refuses O_DIRECT (" << std::strerror(open_errno)
                 << "): set ZOE_TEST_DIR to a folder on a real disk to test direct I/O";
  }
  EXPECT_GE(f->offset_alignment(), 512u);
}

TYPED_TEST(engine_suite, TwoConcurrentUnalignedWritesIntoOneBlockBothLand) {
  auto engine = this->make_engine();
  if (!engine) GTEST_SKIP() << this->skip_reason_;
  auto base = random_bytes(3 * 4096, 7);
  write_whole_file(this->dir_ / "shared.dat", base);
  const auto f = this->open_file("shared.dat");
  auto a = random_bytes(100, 8);
  auto b = random_bytes(300, 9);
  // Both land in block 1 and are in flight together.
  const io_request reqs[] = {{io_op::write, f.get(), a, 4096 + 10, 1}, {io_op::write, f.get(), b, 4096 + 500, 2}};
  engine->run(reqs);
  std::memcpy(base.data() + 4096 + 10, a.data(), a.size());
  std::memcpy(base.data() + 4096 + 500, b.data(), b.size());
  EXPECT_TRUE(same_bytes(read_whole_file(this->dir_ / "shared.dat"), base));
}

TYPED_TEST(engine_suite, UnalignedWritesFromTwoThreadsIntoOneBlockBothLand) {
  auto base = random_bytes(2 * 4096, 17);
  write_whole_file(this->dir_ / "threads.dat", base);
  const auto f = this->open_file("threads.dat");
  constexpr int writers = 2;
  constexpr int writes_each = 200;
  std::vector<std::vector<std::byte>> data;
  for (int t = 0; t < writers; ++t) data.push_back(random_bytes(16 * writes_each, static_cast<std::uint64_t>(t) + 100));
  std::vector<std::thread> threads;
  std::string failure;
  for (int t = 0; t < writers; ++t) {
    threads.emplace_back([&, t] {
      auto engine = this->make_engine();
      if (!engine) return;
      for (int i = 0; i < writes_each; ++i) {
        // Thread t owns the 16-byte slots t, t+2, t+4, ... of block 0: disjoint bytes, one block.
        const std::size_t slot = static_cast<std::size_t>(2 * (i % 120) + t);
        const io_request w{io_op::write, f.get(),
                           std::span(data[static_cast<std::size_t>(t)]).subspan(16 * static_cast<std::size_t>(i), 16),
                           slot * 16, 0};
        engine->run(std::span(&w, 1));
      }
    });
  }
  for (auto& th : threads) th.join();
  if (!this->skip_reason_.empty()) GTEST_SKIP() << this->skip_reason_;
  for (int t = 0; t < writers; ++t) {
    for (int i = writes_each - 120; i < writes_each; ++i) {
      const std::size_t slot = static_cast<std::size_t>(2 * (i % 120) + t);
      std::memcpy(base.data() + slot * 16, data[static_cast<std::size_t>(t)].data() + 16 * static_cast<std::size_t>(i),
                  16);
    }
  }
  EXPECT_TRUE(same_bytes(read_whole_file(this->dir_ / "threads.dat"), base));
}

TYPED_TEST(engine_suite, WriteEndingInsideTheLastBlockKeepsTheAskedLength) {
  auto engine = this->make_engine();
  if (!engine) GTEST_SKIP() << this->skip_reason_;
  const auto f = this->open_file("len.dat");
  auto data = random_bytes(10000, 3);
  const io_request w{io_op::write, f.get(), data, 0, 0};
  engine->run(std::span(&w, 1));
  EXPECT_EQ(std::filesystem::file_size(this->dir_ / "len.dat"), 10000u);
  auto tail = random_bytes(5, 4);
  const io_request w2{io_op::write, f.get(), tail, 10000, 0};  // append 5 bytes
  engine->run(std::span(&w2, 1));
  EXPECT_EQ(std::filesystem::file_size(this->dir_ / "len.dat"), 10005u);
  data.insert(data.end(), tail.begin(), tail.end());
  EXPECT_TRUE(same_bytes(read_whole_file(this->dir_ / "len.dat"), data));
}

TYPED_TEST(engine_suite, ReadPastEndOfFileIsAnErrorNamingTheOffset) {
  auto engine = this->make_engine();
  if (!engine) GTEST_SKIP() << this->skip_reason_;
  write_whole_file(this->dir_ / "short.dat", random_bytes(10000, 5));
  const auto f = this->open_file("short.dat");
  for (const std::uint64_t offset :
       {std::uint64_t{2000}, std::uint64_t{4096}, std::uint64_t{9000}, std::uint64_t{12288}}) {
    aligned_buffer in(8192);
    engine->submit({io_op::read, f.get(), in.span(), offset, offset});
    std::vector<io_completion> done;
    engine->wait(done, 1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_FALSE(done[0].ok()) << "read at " << offset << " past the end must fail";
    const std::uint64_t eof_at = std::max<std::uint64_t>(offset, 10000);
    EXPECT_NE(done[0].message.find("unexpected end of file at offset " + std::to_string(eof_at)), std::string::npos)
        << done[0].message;
    EXPECT_NE(done[0].message.find("short.dat"), std::string::npos) << done[0].message;
  }
}

TYPED_TEST(engine_suite, ManySmallRequestsInFlightAllComplete) {
  auto engine = this->make_engine({.block_size = 64 * KiB, .queue_depth = 8});
  if (!engine) GTEST_SKIP() << this->skip_reason_;
  const auto f = this->open_file("many.dat");
  constexpr std::size_t n = 2000;
  constexpr std::size_t stride = 1000;  // odd-sized, unaligned neighbours sharing blocks
  const auto data = random_bytes(n * stride, 11);
  std::vector<io_request> reqs;
  for (std::size_t i = 0; i < n; ++i) {
    reqs.push_back(
        {io_op::write, f.get(), std::span(const_cast<std::byte*>(data.data()) + i * stride, stride), i * stride, i});
  }
  engine->submit(reqs);
  std::vector<io_completion> done;
  while (done.size() < n) engine->wait(done, 1);
  for (const auto& c : done) ASSERT_TRUE(c.ok()) << c.message;
  EXPECT_EQ(engine->outstanding(), 0u);
  EXPECT_TRUE(same_bytes(read_whole_file(this->dir_ / "many.dat"), data));
}

// The target: 10,000 small requests in flight at once complete, each byte where it
// belongs, and nothing leaks (the ASan build checks that). Aligned 4 KiB writes go straight to
// the backend; the unaligned reads after them go through bounce buffers.
TYPED_TEST(engine_suite, TenThousandSmallConcurrentRequestsComplete) {
  auto engine = this->make_engine({.block_size = 64 * KiB, .queue_depth = 32});
  if (!engine) GTEST_SKIP() << this->skip_reason_;
  const auto f = this->open_file("small.dat");
  constexpr std::size_t n = 10000;
  constexpr std::size_t block = 4096;
  aligned_buffer out(n * block);
  const auto data = random_bytes(n * block, 21);
  std::memcpy(out.data(), data.data(), data.size());
  std::vector<io_request> writes;
  for (std::size_t i = 0; i < n; ++i) {
    // Every other block first, then the rest, so neighbours are not written in order.
    const std::size_t b = i < n / 2 ? 2 * i : 2 * (i - n / 2) + 1;
    writes.push_back({io_op::write, f.get(), out.span().subspan(b * block, block), b * block, b});
  }
  engine->submit(writes);
  std::vector<io_completion> done;
  while (engine->outstanding() > 0) engine->wait(done, 1);
  ASSERT_EQ(done.size(), n);
  std::vector<bool> seen(n);
  for (const auto& c : done) {
    ASSERT_TRUE(c.ok()) << c.message;
    ASSERT_LT(c.user_data, n);
    EXPECT_FALSE(seen[c.user_data]) << "completion " << c.user_data << " delivered twice";
    seen[c.user_data] = true;
    EXPECT_EQ(c.bytes, block);
  }
  ASSERT_TRUE(same_bytes(read_whole_file(this->dir_ / "small.dat"), data));

  // 10,000 reads of 1..4096 bytes at unaligned offsets, all in flight together.
  std::vector<std::size_t> lengths(n);
  std::vector<std::uint64_t> offsets(n);
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    lengths[i] = 1 + (i * 7919) % block;
    offsets[i] = (i * 104729 + 13) % (n * block - lengths[i]);
    total += lengths[i];
  }
  std::vector<std::byte> in(total, std::byte{0});
  std::vector<io_request> reads;
  for (std::size_t i = 0, at = 0; i < n; at += lengths[i], ++i) {
    reads.push_back({io_op::read, f.get(), std::span(in).subspan(at, lengths[i]), offsets[i], i});
  }
  engine->submit(reads);
  done.clear();
  while (engine->outstanding() > 0) engine->wait(done, 1);
  ASSERT_EQ(done.size(), n);
  for (const auto& c : done) ASSERT_TRUE(c.ok()) << c.message;
  for (std::size_t i = 0, at = 0; i < n; at += lengths[i], ++i) {
    ASSERT_EQ(std::memcmp(in.data() + at, data.data() + offsets[i], lengths[i]), 0)
        << "read " << i << " of " << lengths[i] << " bytes at offset " << offsets[i];
  }
}

// The operation is held back under the engine (in flight, never finishing) until the test lets
// it go: a poll that blocked would ask the backend to wait for it, which the fault backend
// refuses loudly instead of hanging.
TYPED_TEST(engine_suite, PollNeverBlocksAndEventuallyDelivers) {
  const io::engine_options o{};
  auto plan = std::make_shared<fault_plan>();
  plan->add({.hold = true});
  std::unique_ptr<io_engine> engine;
  try {
    engine = std::make_unique<io_engine>(std::make_unique<fault_injecting_backend>(TypeParam::make(o), plan), o);
  } catch (const io_error& e) {
    GTEST_SKIP() << e.what();
  }
  const auto f = this->open_file("poll.dat");
  auto data = random_bytes(MiB, 12);
  engine->submit({io_op::write, f.get(), data, 0, 42});
  std::vector<io_completion> done;
  for (int i = 0; i < 3; ++i) {
    ASSERT_NO_THROW(EXPECT_EQ(engine->poll(done), 0u));
    EXPECT_TRUE(done.empty());
    EXPECT_EQ(engine->outstanding(), 1u);
  }
  ASSERT_EQ(plan->fired(), 1) << "the write never reached the backend";
  plan->release_held();
  while (done.empty()) {
    engine->poll(done);
    std::this_thread::yield();
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].user_data, 42u);
  EXPECT_EQ(done[0].bytes, MiB);
  EXPECT_TRUE(same_bytes(read_whole_file(this->dir_ / "poll.dat"), data));
}

// Offsets past the largest file offset (2^63 - 1) cannot be started: refused at submit, with
// nothing queued, however large the offset is.
TYPED_TEST(engine_suite, RequestReachingPastTheLargestFileOffsetIsRefused) {
  auto engine = this->make_engine();
  if (!engine) GTEST_SKIP() << this->skip_reason_;
  const auto f = this->open_file("far.dat");
  std::vector<std::byte> buffer(100);
  constexpr std::uint64_t largest = std::numeric_limits<std::int64_t>::max();
  for (const std::uint64_t offset :
       {largest - 10, largest + 1, largest + 5, std::numeric_limits<std::uint64_t>::max() - 10}) {
    EXPECT_THROW(engine->submit({io_op::read, f.get(), buffer, offset, 0}), usage_error) << "offset " << offset;
    EXPECT_EQ(engine->outstanding(), 0u) << "offset " << offset;
  }
  EXPECT_NO_THROW(engine->submit({io_op::read, f.get(), std::span(buffer).first(10), largest - 10, 0}));
  std::vector<io_completion> done;
  engine->wait(done, 1);
  EXPECT_EQ(done.size(), 1u);
}

}  // namespace
}  // namespace zoe::testing
