#include <gtest/gtest.h>

#include "zoe/core/gpu_probe.hpp"
#include "zoe/core/stream_view.hpp"

namespace zoe {
namespace {

TEST(gpu_probe, AnswersWithoutAGpuAndSaysWhy) {
  const gpu_probe_result r = probe_gpu();
  // A build with CUDA must still start and answer on a machine without a driver.
  EXPECT_FALSE(r.reason.empty());
  if (r.usable) {
    EXPECT_GT(r.device_count, 0);
  } else {
    EXPECT_EQ(r.device_count, 0);
    if (!built_with_cuda()) {
      EXPECT_NE(r.reason.find("without CUDA"), std::string::npos) << r.reason;
    }
  }
}

TEST(stream_view, DefaultIsTheDefaultStream) {
  constexpr stream_view s;
  static_assert(s.is_default());
  int x = 0;
  const stream_view t(&x);
  EXPECT_FALSE(t.is_default());
  EXPECT_EQ(t.native(), &x);
  EXPECT_NE(s, t);
}

}  // namespace
}  // namespace zoe
