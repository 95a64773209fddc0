// The cases of the device contract (device_contract.hpp), compiled into each suite that runs it.
#include "device_contract.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"

namespace zoe::testing {
namespace {

using namespace std::chrono_literals;

// Blocks the stream it runs on until release() (or destruction) lets it go.
class gate {
 public:
  gate() = default;
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;
  ~gate() { release(); }
  std::function<void()> task() {
    return [this] {
      while (!open_.load()) std::this_thread::sleep_for(1ms);
    };
  }
  void release() { open_ = true; }

 private:
  std::atomic<bool> open_{false};
};

TEST_P(device_contract, AnAllocationOverTheBudgetIsAMemoryErrorAndChangesNothing) {
  const std::uint64_t budget = dev_->usage().budget_bytes;
  ASSERT_GT(budget, 0U);
  const std::uint64_t before = dev_->usage().current_bytes;
  EXPECT_THROW((void)dev_->allocate(static_cast<std::size_t>(budget + 1 * MiB)), memory_error);
  EXPECT_EQ(dev_->usage().current_bytes, before) << "a failed allocation must not count";
  void* p = dev_->allocate(1 * MiB);
  ASSERT_NE(p, nullptr) << "the device still allocates after a refusal";
  EXPECT_EQ(dev_->usage().current_bytes, before + 1 * MiB);
  dev_->deallocate(p, 1 * MiB);
  EXPECT_EQ(dev_->allocate(0), nullptr);
}

TEST_P(device_contract, CopiesMoveEveryByteInEveryDirection) {
  const auto s = dev_->create_stream();
  constexpr std::size_t n = 1 * MiB + 77;
  std::vector<unsigned char> src(n);
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 7 + i / 251);
  void* a = dev_->allocate(n, s.view());
  void* b = dev_->allocate(n, s.view());
  dev_->copy_async(a, src.data(), n, copy_kind::host_to_device, s.view());
  dev_->copy_async(b, a, n, copy_kind::device_to_device, s.view());
  dev_->memset_async(a, 0x11, n / 2, s.view());
  std::vector<unsigned char> from_b(n, 0);
  std::vector<unsigned char> from_a(n, 0);
  dev_->copy_async(from_b.data(), b, n, copy_kind::device_to_host, s.view());
  dev_->copy_async(from_a.data(), a, n, copy_kind::device_to_host, s.view());
  dev_->synchronize(s.view());
  EXPECT_EQ(from_b, src);
  EXPECT_EQ(from_a[0], 0x11);
  EXPECT_EQ(from_a[n / 2 - 1], 0x11);
  EXPECT_EQ(std::memcmp(from_a.data() + n / 2, src.data() + n / 2, n - n / 2), 0);
  dev_->deallocate(a, n, s.view());
  dev_->deallocate(b, n, s.view());
  dev_->synchronize(s.view());
}

TEST_P(device_contract, WorkOnOneStreamRunsInOrder) {
  const auto s = dev_->create_stream();
  std::vector<int> seen;
  for (int i = 0; i < 500; ++i) dev_->launch_host(s.view(), [&seen, i] { seen.push_back(i); });
  dev_->synchronize(s.view());
  std::vector<int> want(500);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(seen, want);
}

TEST_P(device_contract, WorkAfterAnEventWaitRunsOnlyOnceTheEventCompletes) {
  const auto a = dev_->create_stream();
  const auto b = dev_->create_stream();
  const auto e = dev_->create_event();
  EXPECT_TRUE(dev_->query(e)) << "a never-recorded event counts as complete";
  gate g;
  std::atomic<int> produced{0};
  std::atomic<int> observed{-1};
  dev_->launch_host(a.view(), g.task());
  dev_->launch_host(a.view(), [&] { produced = 1; });
  dev_->record(e, a.view());
  dev_->wait(b.view(), e);
  dev_->launch_host(b.view(), [&] { observed = produced.load(); });
  EXPECT_FALSE(dev_->query(e)) << "the work before the record is held";
  EXPECT_EQ(observed.load(), -1) << "the waiting stream ran ahead of the event";
  g.release();
  dev_->synchronize(b.view());
  EXPECT_EQ(observed.load(), 1);
  dev_->synchronize(e);
  EXPECT_TRUE(dev_->query(e));
}

// No wall-clock bound (a loaded machine stretches anything): the times of three events recorded in
// order on one stream are ordered and add up, so they measure the stream's own timeline.
TEST_P(device_contract, EventTimesAreOrderedAndAddUp) {
  const auto s = dev_->create_stream();
  const auto start = dev_->create_event();
  const auto middle = dev_->create_event();
  const auto end = dev_->create_event();
  EXPECT_THROW((void)dev_->elapsed_ms(start, end), usage_error) << "never recorded";
  gate first;
  dev_->record(start, s.view());
  dev_->launch_host(s.view(), first.task());
  dev_->record(middle, s.view());
  dev_->launch_host(s.view(), [] { std::this_thread::sleep_for(1ms); });
  dev_->record(end, s.view());
  EXPECT_THROW((void)dev_->elapsed_ms(start, end), usage_error) << "not completed yet";
  first.release();
  dev_->synchronize(end);
  const float to_middle = dev_->elapsed_ms(start, middle);
  const float from_middle = dev_->elapsed_ms(middle, end);
  const float total = dev_->elapsed_ms(start, end);
  EXPECT_GE(to_middle, 0.0F);
  EXPECT_GE(from_middle, 0.0F);
  EXPECT_GE(total, to_middle);
  EXPECT_GE(total, from_middle);
  EXPECT_NEAR(to_middle + from_middle, total, 0.01 + 1e-4 * total);
}

TEST_P(device_contract, AThrowingTaskIsADeviceErrorOfItsStreamOnce) {
  const auto s = dev_->create_stream();
  const auto other = dev_->create_stream();
  std::atomic<int> after{0};
  dev_->launch_host(s.view(), [] { throw std::runtime_error("kernel exploded"); });
  dev_->launch_host(s.view(), [&] { after = 1; });
  EXPECT_NO_THROW(dev_->synchronize(other.view())) << "another stream's failure is not this one's";
  try {
    dev_->synchronize(s.view());
    FAIL() << "the failure must surface";
  } catch (const device_error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel exploded"), std::string::npos) << e.what();
  }
  EXPECT_EQ(after.load(), 1) << "the work after a failed task still runs";
  EXPECT_NO_THROW(dev_->synchronize(s.view())) << "a failure is reported once";
  EXPECT_NO_THROW(dev_->synchronize());
}

TEST_P(device_contract, AThrowingTaskIsADeviceErrorOfTheWholeDevice) {
  for (const bool on_default : {false, true}) {
    const auto s = dev_->create_stream();
    const stream_view where = on_default ? stream_view{} : s.view();
    dev_->launch_host(where, [] { throw 42; });
    try {
      dev_->synchronize();
      FAIL() << "the failure must surface (default stream: " << on_default << ")";
    } catch (const device_error& e) {
      EXPECT_NE(std::string(e.what()).find("non-standard"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(dev_->synchronize(where)) << "reported once, by the device";
  }
}

}  // namespace
}  // namespace zoe::testing
