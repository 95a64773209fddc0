// launch_kernel: the host version runs as a host task in stream order on the host device (and on
// the fake device over it); a device reporting CUDA gets the CUDA launcher, called at once with the
// stream, and the host version is never queued.
#include <gtest/gtest.h>

#include <latch>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "fake_device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/stream_launch.hpp"
#include "zoe/core/units.hpp"

namespace zoe {
namespace {

// What ran, in order, from whichever thread.
class run_log {
 public:
  void add(int step) {
    const std::lock_guard lock(mutex_);
    steps_.push_back(step);
  }
  [[nodiscard]] std::vector<int> steps() const {
    const std::lock_guard lock(mutex_);
    return steps_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<int> steps_;
};

const std::function<void(stream_view)> no_cuda = [](stream_view) {
  ADD_FAILURE() << "the CUDA launcher ran on a host device";
};

TEST(launch_kernel, OnTheHostDeviceTheHostTaskRunsInStreamOrder) {
  const auto dev = make_host_device(1 * MiB);
  const device_stream stream = dev->create_stream();
  auto log = std::make_shared<run_log>();
  auto gate = std::make_shared<std::latch>(1);
  dev->launch_host(stream.view(), [gate, log] {
    gate->wait();
    log->add(1);
  });
  launch_kernel(
      *dev, stream.view(), [log] { log->add(2); }, no_cuda);
  dev->launch_host(stream.view(), [log] { log->add(3); });
  EXPECT_TRUE(log->steps().empty()) << "launch_kernel ran the host task at once instead of queuing it";
  gate->count_down();
  dev->synchronize(stream.view());
  EXPECT_EQ(log->steps(), (std::vector<int>{1, 2, 3}));
}

TEST(launch_kernel, TheHostTaskOrdersWithCopiesOnTheStream) {
  testing::fake_device fake(make_host_device(1 * MiB));
  fake.delay_tasks(std::chrono::milliseconds(2));  // host tasks run late: order, not timing, decides
  const device_stream stream = fake.create_stream();
  std::vector<float> host(256, 1.5f);
  auto* on_device = static_cast<float*>(fake.allocate(host.size() * sizeof(float), stream.view()));
  fake.copy_async(on_device, host.data(), host.size() * sizeof(float), copy_kind::host_to_device, stream.view());
  launch_kernel(
      fake, stream.view(),
      [on_device, n = host.size()] {
        for (std::size_t i = 0; i < n; ++i) on_device[i] *= 2.0f;  // the "kernel", on the copied data
      },
      no_cuda);
  std::vector<float> back(host.size());
  fake.copy_async(back.data(), on_device, back.size() * sizeof(float), copy_kind::device_to_host, stream.view());
  fake.synchronize(stream.view());
  fake.deallocate(on_device, host.size() * sizeof(float), stream.view());
  EXPECT_EQ(back, std::vector<float>(host.size(), 3.0f)) << "the task ran out of order with the copies";
  EXPECT_EQ(fake.calls().launch_host, 1);
}

TEST(launch_kernel, AThrowingHostTaskIsReportedBySynchronize) {
  const auto dev = make_host_device(1 * MiB);
  const device_stream stream = dev->create_stream();
  launch_kernel(
      *dev, stream.view(), [] { throw std::runtime_error("cpu adam failed on shard 7"); }, no_cuda);
  try {
    dev->synchronize(stream.view());
    FAIL() << "the failure of the host task was lost";
  } catch (const device_error& e) {
    EXPECT_NE(std::string(e.what()).find("shard 7"), std::string::npos) << e.what();
  }
}

TEST(launch_kernel, ACudaDeviceGetsTheLauncherAtOnceWithTheStream) {
  testing::fake_device fake(make_host_device(1 * MiB));
  fake.report_kind(device_kind::cuda);
  const device_stream stream = fake.create_stream();
  stream_view seen;
  int launches = 0;
  launch_kernel(
      fake, stream.view(), [] { ADD_FAILURE() << "the host task ran on a CUDA device"; },
      [&](stream_view s) {
        seen = s;
        ++launches;
      });
  EXPECT_EQ(launches, 1) << "the CUDA launcher must be called before launch_kernel returns";
  EXPECT_EQ(seen, stream.view());
  EXPECT_EQ(fake.calls().launch_host, 0) << "nothing is queued as a host task on a CUDA device";
  fake.synchronize(stream.view());
}

TEST(launch_kernel, ALauncherThatThrowsPropagates) {
  testing::fake_device fake(make_host_device(1 * MiB));
  fake.report_kind(device_kind::cuda);
  EXPECT_THROW(launch_kernel(
                   fake, {}, [] {}, [](stream_view) { throw device_error("kernels::cuda::adam_step: launch failed"); }),
               device_error);
}

TEST(launch_kernel, AMissingVersionIsAUsageErrorNamingTheDevice) {
  testing::fake_device fake(make_host_device(1 * MiB));
  for (const device_kind kind : {device_kind::host, device_kind::cuda}) {
    fake.report_kind(kind);
    try {
      launch_kernel(
          fake, {}, kind == device_kind::host ? std::function<void()>{} : [] {},
          kind == device_kind::cuda ? std::function<void(stream_view)>{} : no_cuda);
      ADD_FAILURE() << "an empty version was accepted";
    } catch (const usage_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("fake over host device"), std::string::npos) << what;
      EXPECT_NE(what.find(kind == device_kind::host ? "host task" : "CUDA launcher"), std::string::npos) << what;
    }
  }
  EXPECT_EQ(fake.calls().launch_host, 0);
}

}  // namespace
}  // namespace zoe
