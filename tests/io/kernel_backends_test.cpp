// What the typed suite cannot see of the kernel backends: io_uring's registered buffers and
// files really in use (and never stale), engines handed between threads, libaio's result
// mapping, and how "auto" chooses and explains itself.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <thread>

#include "io_test_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/engine_factory.hpp"
#include "zoe/io/file.hpp"
#include "zoe/io/io_engine.hpp"
#ifdef ZOE_HAVE_URING
#include "uring_backend.hpp"
#endif
#ifdef ZOE_HAVE_AIO
#include "aio_backend.hpp"
#endif

namespace zoe::testing {
namespace {

using io::io_op;
using io::io_request;

std::unique_ptr<io::file> open_rw(const std::filesystem::path& path) {
  return std::make_unique<io::file>(path, io::open_mode::read_write, io::file_options{.create = true});
}

#ifdef ZOE_HAVE_AIO
TEST(aio_backend, EventResultsBecomeBytesOrMinusErrno) {
  using io::detail::aio_event_result;
  const auto as_unsigned = [](long v) { return static_cast<unsigned long>(v); };
  EXPECT_EQ(aio_event_result(4096, 0), 4096);
  EXPECT_EQ(aio_event_result(512, 0), 512) << "a short transfer stays short: the engine resubmits the rest";
  EXPECT_EQ(aio_event_result(0, 0), 0);
  EXPECT_EQ(aio_event_result(as_unsigned(-EIO), 0), -EIO);
  EXPECT_EQ(aio_event_result(as_unsigned(-ENOSPC), 0), -ENOSPC);
  EXPECT_EQ(aio_event_result(4096, as_unsigned(-EIO)), -EIO) << "an error in res2 is an error";
  EXPECT_EQ(aio_event_result(4096, 7), -EIO) << "an unexplained res2 is not trusted";
}
#endif

#ifdef ZOE_HAVE_URING
class uring_test : public ::testing::Test {
 protected:
  void SetUp() override {
    try {
      auto backend = std::make_unique<io::detail::uring_backend>(options_);
      uring_ = backend.get();
      engine_ = std::make_unique<io::io_engine>(std::move(backend), options_);
    } catch (const io_error& e) {
      GTEST_SKIP() << "io_uring unavailable here: " << e.what();
    }
  }

  // Writes then reads `size` bytes at `offset` from/into spans of `memory`, checking the bytes.
  void round_trip(io::file& f, std::span<std::byte> out, std::span<std::byte> in, std::uint64_t offset,
                  std::uint64_t seed) {
    const auto data = random_bytes(out.size(), seed);
    std::memcpy(out.data(), data.data(), data.size());
    engine_->run(std::array{io_request{io_op::write, &f, out, offset, 1}});
    std::memset(in.data(), 0, in.size());
    engine_->run(std::array{io_request{io_op::read, &f, in, offset, 2}});
    ASSERT_EQ(std::memcmp(in.data(), data.data(), data.size()), 0);
  }

  io::engine_options options_{.block_size = 256 * KiB, .queue_depth = 8};
  scratch_dir dir_;
  io::detail::uring_backend* uring_ = nullptr;
  std::unique_ptr<io::io_engine> engine_;
};

// The running kernel's version as major * 1000 + minor (6.1 -> 6001), or 0 if uname says nothing usable.
int kernel_version() {
  utsname u{};
  if (::uname(&u) != 0) return 0;
  int major = 0;
  int minor = 0;
  if (std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return 0;
  return major * 1000 + minor;
}

TEST_F(uring_test, ChoosesSetupFlagsForOneIssuer) {
  const unsigned flags = uring_->setup_flags();
  RecordProperty("setup_flags", io::detail::setup_flag_names(flags));
  // DEFER_TASKRUN, the newest flag of the first choice, came with Linux 6.1. A kernel that has it
  // must get the whole first choice: a fallback there means the ring was set up wrongly.
  if (kernel_version() < 6001) {
    GTEST_SKIP() << "kernel " << kernel_version() / 1000 << "." << kernel_version() % 1000
                 << " predates IORING_SETUP_DEFER_TASKRUN (6.1); the ring took " << io::detail::setup_flag_names(flags);
  }
  EXPECT_EQ(flags, IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL)
      << io::detail::setup_flag_names(flags);
}

TEST_F(uring_test, RegisteredBuffersAreUsedAndByteExact) {
  aligned_buffer memory(4 * MiB);
  const std::span<std::byte> regions[] = {memory.span()};
  ASSERT_TRUE(engine_->register_buffers(regions));
  const auto f = open_rw(dir_ / "fixed.dat");
  // 2 MiB in 256 KiB blocks: 8 writes and 8 reads, every one inside the registered region.
  round_trip(*f, memory.span().first(2 * MiB), memory.span().subspan(2 * MiB, 2 * MiB), 0, 1);
  EXPECT_EQ(uring_->fixed_buffer_ops(), 16u);
  EXPECT_EQ(read_whole_file(dir_ / "fixed.dat").size(), 2 * MiB);

  // Memory outside the registered region still works, through plain reads and writes.
  aligned_buffer other(2 * 256 * KiB);
  round_trip(*f, other.span().first(256 * KiB), other.span().subspan(256 * KiB), 4 * MiB, 2);
  EXPECT_EQ(uring_->fixed_buffer_ops(), 16u);

  // An empty set unregisters.
  EXPECT_FALSE(engine_->register_buffers({}));
  round_trip(*f, memory.span().first(256 * KiB), memory.span().subspan(256 * KiB, 256 * KiB), 0, 3);
  EXPECT_EQ(uring_->fixed_buffer_ops(), 16u);
}

TEST_F(uring_test, RegisteringWhileRequestsAreOutstandingIsRefused) {
  aligned_buffer memory(256 * KiB);
  const auto f = open_rw(dir_ / "busy.dat");
  engine_->submit({io_op::write, f.get(), memory.span(), 0, 1});
  const std::span<std::byte> regions[] = {memory.span()};
  EXPECT_THROW(engine_->register_buffers(regions), usage_error);
  std::vector<io::io_completion> done;
  engine_->wait(done, 1);
  EXPECT_TRUE(done.at(0).ok()) << done[0].message;
}

TEST_F(uring_test, MemoryTheKernelCannotPinFallsBackToPlainIo) {
  // io_uring refuses to register file-backed memory on a regular file system: the engine warns
  // once and keeps working with plain reads and writes.
  const auto backing = dir_ / "mapped.bin";
  write_whole_file(backing, random_bytes(MiB, 9));
  const int fd = ::open(backing.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* mapped = ::mmap(nullptr, MiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(mapped, MAP_FAILED);
  const std::span<std::byte> region(static_cast<std::byte*>(mapped), MiB);
  const std::span<std::byte> regions[] = {region};
  EXPECT_FALSE(engine_->register_buffers(regions));
  const auto f = open_rw(dir_ / "plain.dat");
  round_trip(*f, region.first(512 * KiB), region.subspan(512 * KiB), 0, 4);
  EXPECT_EQ(uring_->fixed_buffer_ops(), 0u);
  ::munmap(mapped, MiB);
}

TEST_F(uring_test, FilesAreRegisteredAndAReusedDescriptorNeverReachesTheOldFile) {
  aligned_buffer memory(512 * KiB);
  auto a = open_rw(dir_ / "a.dat");
  const int fd_a = a->fd();
  round_trip(*a, memory.span().first(256 * KiB), memory.span().subspan(256 * KiB), 0, 5);
  EXPECT_GT(uring_->fixed_file_ops(), 0u) << "the file should have been registered with the ring";
  const auto a_contents = read_whole_file(dir_ / "a.dat");
  a.reset();

  // The kernel hands out the lowest free descriptor: b gets a's number, and the ring still has a
  // registered under it. The write must land in b, and a must not change.
  auto b = open_rw(dir_ / "b.dat");
  EXPECT_EQ(b->fd(), fd_a) << "test premise: the descriptor number is reused";
  round_trip(*b, memory.span().first(256 * KiB), memory.span().subspan(256 * KiB), 0, 6);
  EXPECT_EQ(read_whole_file(dir_ / "a.dat"), a_contents);
  const auto b_contents = read_whole_file(dir_ / "b.dat");
  ASSERT_EQ(b_contents.size(), 256 * KiB);
  EXPECT_EQ(std::memcmp(b_contents.data(), memory.data(), 256 * KiB), 0);
}

TEST_F(uring_test, AnIdleEngineMayMoveBetweenThreads) {
  aligned_buffer memory(512 * KiB);
  const std::span<std::byte> regions[] = {memory.span()};
  ASSERT_TRUE(engine_->register_buffers(regions));  // made and registered here...
  const auto f = open_rw(dir_ / "moved.dat");
  for (std::uint64_t i = 0; i < 3; ++i) {
    // ...driven by a new thread each time (a joined thread's id may be reused by the next)...
    std::jthread([&] { round_trip(*f, memory.span().first(256 * KiB), memory.span().subspan(256 * KiB), 0, 10 + i); });
  }
  // ...and back here, with the registered buffers still in use.
  round_trip(*f, memory.span().first(256 * KiB), memory.span().subspan(256 * KiB), 0, 20);
  EXPECT_EQ(uring_->fixed_buffer_ops(), 8u);
}

TEST_F(uring_test, ABusyEngineDrivenFromAnotherThreadIsAUsageError) {
  if ((uring_->setup_flags() & IORING_SETUP_SINGLE_ISSUER) == 0) GTEST_SKIP() << "ring is not single-issuer";
  aligned_buffer memory(256 * KiB);
  const auto f = open_rw(dir_ / "busy.dat");
  engine_->submit({io_op::write, f.get(), memory.span(), 0, 1});
  std::vector<io::io_completion> done;
  engine_->poll(done);  // submits it to the kernel from this thread
  if (engine_->outstanding() == 0) GTEST_SKIP() << "the write finished before the test could look";
  std::string message;
  std::jthread([&] {
    try {
      std::vector<io::io_completion> other;
      engine_->wait(other, 1);
    } catch (const usage_error& e) {
      message = e.what();
    }
  }).join();
  EXPECT_NE(message.find("hand an engine to another thread only when it is idle"), std::string::npos) << message;
  engine_->wait(done, 1);
  EXPECT_TRUE(done.at(0).ok());
}

// With SINGLE_ISSUER|DEFER_TASKRUN only the issuer thread can reap the ring. Another thread that
// destroys a busy engine can neither wait for its operations nor close the ring under them (the
// kernel would go on writing memory the caller frees next): it stops the process, naming why.
TEST_F(uring_test, DestroyingABusyEngineFromAnotherThreadStopsTheProcessRatherThanCloseTheRing) {
  if ((uring_->setup_flags() & IORING_SETUP_DEFER_TASKRUN) == 0) {
    GTEST_SKIP() << "ring is not DEFER_TASKRUN (" << io::detail::setup_flag_names(uring_->setup_flags())
                 << "): any thread can wait for it";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        aligned_buffer memory(64 * MiB);
        const auto f = open_rw(dir_ / "busy.dat");
        engine_->submit({io_op::write, f.get(), memory.span(), 0, 1});
        std::vector<io::io_completion> done;
        engine_->poll(done);  // in the kernel now, issued by this thread
        std::jthread([&] { engine_.reset(); }).join();
      },
      "destroyed by a thread that is not its issuer");
}
#endif

TEST(backend_factory, ListsBackendsInTheOrderAutoPrefersThem) {
  const auto names = io::available_backends();
  std::vector<std::string> expected;
#ifdef ZOE_HAVE_URING
  expected.emplace_back("uring");
#endif
#ifdef ZOE_HAVE_AIO
  expected.emplace_back("aio");
#endif
  expected.emplace_back("posix");
  EXPECT_EQ(names, expected);
}

TEST(backend_factory, AutoSaysWhichBackendItTook) {
  const auto choice = io::choose_backend("auto", {});
  ASSERT_NE(choice.backend, nullptr);
  EXPECT_EQ(choice.explanation.find("I/O engine auto: took " + std::string(choice.backend->name())), 0u)
      << choice.explanation;
  const std::string first = io::available_backends().front();
  if (choice.backend->name() != first) {
    // Auto may pass over its first preference only where that backend cannot start at all.
    try {
      static_cast<void>(io::make_backend(first, {}));
    } catch (const std::exception& e) {
      EXPECT_NE(choice.explanation.find(first + " skipped"), std::string::npos) << choice.explanation;
      GTEST_SKIP() << "the kernel or sandbox refuses " << first << " here (" << e.what() << "); auto took "
                   << choice.backend->name();
    }
    ADD_FAILURE() << first << " starts here, yet auto took " << choice.backend->name() << ": " << choice.explanation;
  }
  EXPECT_TRUE(io::choose_backend("posix", {}).explanation.empty());
}

TEST(backend_factory, UnknownEngineNamesWhatThisBuildHas) {
  try {
    static_cast<void>(io::choose_backend("spdk", {}));
    FAIL() << "expected usage_error";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown I/O engine 'spdk'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("posix"), std::string::npos) << e.what();
  }
}

#ifdef ZOE_HAVE_URING
// io_uring_setup refused with EPERM, as a container runtime's seccomp filter does: "auto" must
// skip uring, take the next, and say why.
TEST(backend_factory, AutoSkipsIoUringBlockedBySeccompAndSaysWhy) {
  const auto report = run_with_syscalls_failing({__NR_io_uring_setup}, EPERM, [] {
    const auto choice = io::choose_backend("auto", {});
    return std::string(choice.backend->name()) + "\n" + choice.explanation;
  });
  if (!report) GTEST_SKIP() << "seccomp filters are written for x86-64 only";
  const std::string second = io::available_backends().at(1);
  EXPECT_EQ(report->rfind(second + "\n", 0), 0u) << *report;
  EXPECT_NE(report->find("took " + second), std::string::npos) << *report;
  EXPECT_NE(report->find("uring skipped"), std::string::npos) << *report;
  EXPECT_NE(report->find("Operation not permitted"), std::string::npos) << *report;
  EXPECT_NE(report->find("seccomp"), std::string::npos) << *report;
}
#endif

}  // namespace
}  // namespace zoe::testing
