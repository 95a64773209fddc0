// Counters per direction on every backend: requests, bytes and errors as the completions say,
// run()'s requests included, busy time and summed latency that add up, and a reader on another
// thread while the driving thread works.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include "backend_types.hpp"
#include "fault_injecting_backend.hpp"
#include "faulty_engine_fixture.hpp"
#include "io_test_support.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/file.hpp"
#include "zoe/io/io_engine.hpp"
#include "zoe/io/io_stats.hpp"

namespace zoe::testing {
namespace {

using io::io_completion;
using io::io_op;
using io::io_request;

template <typename Backend>
class io_stats_test : public faulty_engine_fixture<Backend> {
 protected:
  io_stats_test() : faulty_engine_fixture<Backend>({.block_size = 64 * KiB, .queue_depth = 4}) {}

  std::vector<io_completion> wait_all() {
    std::vector<io_completion> done;
    while (this->engine_->outstanding() > 0) this->engine_->wait(done, this->engine_->outstanding());
    return done;
  }
};

TYPED_TEST_SUITE(io_stats_test, raw_backend_types, backend_type_names);

TYPED_TEST(io_stats_test, AFreshEngineCountsNothing) {
  const io::io_stats s = this->engine_->stats();
  for (const auto* d : {&s.read, &s.write}) {
    EXPECT_EQ(d->requests, 0u);
    EXPECT_EQ(d->bytes, 0u);
    EXPECT_EQ(d->errors, 0u);
    EXPECT_EQ(d->busy_ns, 0u);
    EXPECT_EQ(d->latency_ns, 0u);
    EXPECT_EQ(d->gib_per_s(), 0.0);
  }
}

TYPED_TEST(io_stats_test, CountsRequestsBytesAndErrorsPerDirection) {
  auto a = random_bytes(MiB, 1);
  auto b = random_bytes(100 * KiB + 7, 2);  // unaligned: bounce and read-modify-write
  const io_request writes[] = {{io_op::write, this->file_.get(), a, 0, 1},
                               {io_op::write, this->file_.get(), b, 3 * MiB + 5, 2}};
  this->engine_->submit(writes);
  for (const auto& c : this->wait_all()) ASSERT_TRUE(c.ok()) << c.message;
  // run()'s requests count as well, and an empty one is a request of no bytes.
  const io_request empty{io_op::write, this->file_.get(), {}, 0, 3};
  this->engine_->run(std::span(&empty, 1));

  this->plan_->add({.op = io_op::read, .begin = 3 * MiB, .end = 4 * MiB, .inject_errno = EIO, .times = -1});
  std::vector<std::byte> back_a(a.size());
  std::vector<std::byte> back_b(b.size());
  const io_request reads[] = {{io_op::read, this->file_.get(), back_a, 0, 4},
                              {io_op::read, this->file_.get(), back_b, 3 * MiB + 5, 5}};
  this->engine_->submit(reads);
  const auto done = this->wait_all();
  ASSERT_EQ(done.size(), 2u);

  const io::io_stats s = this->engine_->stats();
  EXPECT_EQ(s.write.requests, 3u);
  EXPECT_EQ(s.write.bytes, a.size() + b.size());
  EXPECT_EQ(s.write.errors, 0u);
  EXPECT_EQ(s.read.requests, 2u);
  EXPECT_EQ(s.read.bytes, a.size()) << "a failed read moves no bytes";
  EXPECT_EQ(s.read.errors, 1u);
  for (const auto* d : {&s.read, &s.write}) {
    EXPECT_GT(d->busy_ns, 0u);
    // Busy time is the union of the requests' lifetimes, so never more than their sum.
    EXPECT_GE(d->latency_ns, d->busy_ns);
    EXPECT_GT(d->gib_per_s(), 0.0);
  }
  EXPECT_EQ(s.of(io_op::read).errors, 1u);

  io::io_stats twice = s;
  twice += s;
  EXPECT_EQ(twice.write.bytes, 2 * s.write.bytes);
  EXPECT_EQ(twice.read.busy_ns, 2 * s.read.busy_ns);
}

TYPED_TEST(io_stats_test, AnotherThreadReadsTheCountersWhileTheDriverWorks) {
  std::atomic<bool> stop{false};
  std::uint64_t last_seen = 0;
  bool went_back = false;
  std::jthread reader([&] {
    while (!stop.load()) {
      const auto s = this->engine_->stats();
      went_back = went_back || s.write.requests < last_seen;
      last_seen = s.write.requests;
      std::this_thread::yield();
    }
  });
  constexpr std::size_t n = 64;
  auto data = random_bytes(16 * KiB, 3);
  for (std::size_t i = 0; i < n; ++i) {
    this->engine_->submit({io_op::write, this->file_.get(), data, i * data.size(), i});
    std::vector<io_completion> done;
    this->engine_->poll(done);
  }
  this->wait_all();
  stop = true;
  reader.join();
  EXPECT_FALSE(went_back) << "a counter went backwards";
  EXPECT_EQ(this->engine_->stats().write.requests, n);
  EXPECT_EQ(this->engine_->stats().write.bytes, n * data.size());
}

}  // namespace
}  // namespace zoe::testing
