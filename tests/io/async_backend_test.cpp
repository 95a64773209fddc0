// The bookkeeping the uring and aio backends share, under a scripted kernel that takes part of
// each batch (sometimes none), fails some operations at once and completes the rest in a shuffled
// order: schedules a real kernel produces rarely, and must never lose or repeat an operation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <random>

#include "async_backend.hpp"
#include "zoe/core/error.hpp"

namespace zoe::testing {
namespace {

using io::raw_op;
using io::raw_result;

class scripted_backend final : public io::detail::async_backend {
 public:
  scripted_backend(const io::engine_options& o, std::uint64_t seed)
      : async_backend(o, io::detail::async_capacity(o, 1024, "scripted")), rng_(seed) {}

  [[nodiscard]] std::string_view name() const noexcept override { return "scripted"; }

  bool refuse_everything = false;
  bool broken = false;  ///< start() throws, taking nothing, as a kernel interface that broke
  std::size_t largest_offer = 0;
  [[nodiscard]] std::size_t held() const noexcept { return kernel_.size(); }

 private:
  std::size_t start(std::span<const std::uint32_t> slots) override {
    largest_offer = std::max(largest_offer, slots.size());
    if (broken) throw io_error("scripted: the submission interface broke", ENOSPC);
    if (refuse_everything) return 0;
    std::size_t take = rng_() % (slots.size() + 1);
    // A real kernel that holds nothing takes something (refusing then is the EAGAIN case below).
    if (take == 0 && kernel_.empty()) take = 1;
    for (std::size_t i = 0; i < take; ++i) {
      if (rng_() % 10 == 0) {
        complete(slots[i], -EINVAL);  // failed to start
      } else {
        kernel_.push_back(slots[i]);
      }
    }
    return take;
  }

  void wait(std::size_t min_completions) override {
    EXPECT_LE(min_completions, kernel_.size()) << "asked to wait for more than the kernel holds";
    std::shuffle(kernel_.begin(), kernel_.end(), rng_);
    const std::size_t n = std::max(min_completions, kernel_.empty() ? 0 : rng_() % (kernel_.size() + 1));
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t slot = kernel_.back();
      kernel_.pop_back();
      complete(slot, static_cast<std::int64_t>(op_in(slot).length));
    }
  }

  std::mt19937_64 rng_;
  std::vector<std::uint32_t> kernel_;
};

// Drives a backend as io_engine does: never more in flight than capacity(), reaping at least one
// whenever full. Checks every tag comes back exactly once with its length or -EINVAL.
void drive(scripted_backend& backend, std::size_t operations, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> returned(operations, 0);
  std::size_t next = 0;
  std::size_t in_flight = 0;
  std::vector<raw_result> out;
  while (next < operations || in_flight > 0) {
    const std::size_t room = backend.capacity() - in_flight;
    const std::size_t batch = std::min<std::size_t>(operations - next, rng() % (room + 1));
    std::vector<raw_op> ops;
    for (std::size_t i = 0; i < batch; ++i, ++next) {
      ops.push_back({3, io::io_op::read, nullptr, 100 + next, next * 4096, next});
    }
    if (!ops.empty()) backend.submit(ops);
    in_flight += ops.size();
    out.clear();
    const std::size_t min =
        in_flight == backend.capacity() || next == operations ? std::min<std::size_t>(in_flight, 1) : 0;
    const std::size_t got = backend.reap(out, min);
    ASSERT_EQ(got, out.size());
    ASSERT_GE(got, min);
    for (const raw_result& r : out) {
      ASSERT_LT(r.tag, operations);
      ++returned[r.tag];
      EXPECT_TRUE(r.result == -EINVAL || r.result == static_cast<std::int64_t>(100 + r.tag)) << r.result;
    }
    in_flight -= got;
  }
  for (std::size_t i = 0; i < operations; ++i) ASSERT_EQ(returned[i], 1) << "operation " << i;
}

TEST(async_backend, PartialAcceptanceNeverLosesOrRepeatsAnOperation) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    scripted_backend backend({.queue_depth = 8, .intra_op_parallelism = 2}, seed);
    drive(backend, 3000, seed);
  }
}

TEST(async_backend, SingleSubmitOffersOneOperationPerKernelCall) {
  scripted_backend backend({.queue_depth = 16, .single_submit = true}, 5);
  drive(backend, 2000, 5);
  EXPECT_EQ(backend.largest_offer, 1u);
}

TEST(async_backend, BatchedSubmitOffersTheWholeBatch) {
  scripted_backend backend({.queue_depth = 16}, 6);
  std::vector<raw_op> ops;
  for (std::uint64_t i = 0; i < 16; ++i) ops.push_back({3, io::io_op::write, nullptr, 10, i * 4096, i});
  backend.submit(ops);
  EXPECT_EQ(backend.largest_offer, 16u);
  std::vector<raw_result> out;
  while (out.size() < 16) backend.reap(out, 1);
}

TEST(async_backend, WithoutOverlapEventsABlockingReapWaitsForTheWholeBatch) {
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    scripted_backend backend({.queue_depth = 32, .overlap_events = false}, seed);
    std::vector<raw_op> ops;
    for (std::uint64_t i = 0; i < 32; ++i) ops.push_back({3, io::io_op::read, nullptr, 10, i * 4096, i});
    backend.submit(ops);
    std::vector<raw_result> out;
    EXPECT_EQ(backend.reap(out, 1), 32u);
  }
}

TEST(async_backend, AKernelThatTakesNothingWithNothingInFlightYieldsEagain) {
  scripted_backend backend({.queue_depth = 4}, 7);
  backend.refuse_everything = true;
  const raw_op op{3, io::io_op::write, nullptr, 10, 0, 42};
  backend.submit(std::span(&op, 1));
  std::vector<raw_result> out;
  ASSERT_EQ(backend.reap(out, 1), 1u);
  EXPECT_EQ(out[0].tag, 42u);
  EXPECT_EQ(out[0].result, -EAGAIN);
}

// Once submit() returned the operations are the backend's: a kernel interface that breaks later
// fails them through reap (each once, with its errno), and nothing stays counted as in the
// kernel, so a reap or a drain does not wait for operations that were never started.
TEST(async_backend, AStartThatThrowsFailsTheWaitingOperationsInsteadOfLosingThem) {
  scripted_backend backend({.queue_depth = 8}, 8);
  std::vector<raw_op> ops;
  for (std::uint64_t i = 0; i < 4; ++i) ops.push_back({3, io::io_op::write, nullptr, 10, i * 4096, i});
  backend.submit(std::span(ops).first(2));
  backend.broken = true;
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(backend.submit(std::span(ops).subspan(2)));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("the submission interface broke"), std::string::npos) << log;
  std::vector<raw_result> out;
  while (out.size() < 4) ASSERT_GT(backend.reap(out, 1), 0u);
  std::vector<int> seen(4, 0);
  for (const raw_result& r : out) {
    ++seen.at(r.tag);
    if (r.tag >= 2) {
      EXPECT_EQ(r.result, -ENOSPC) << "operation " << r.tag;
    }
  }
  EXPECT_EQ(seen, std::vector<int>(4, 1));
  EXPECT_EQ(backend.held(), 0u);
  EXPECT_EQ(backend.reap(out, 0), 0u);
}

TEST(async_backend, TooDeepAQueueIsAUsageErrorNamingTheKnobs) {
  try {
    scripted_backend backend({.queue_depth = 1024, .intra_op_parallelism = 2}, 1);
    FAIL() << "expected usage_error";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("queue_depth 1024 x intra_op_parallelism 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zoe::testing
