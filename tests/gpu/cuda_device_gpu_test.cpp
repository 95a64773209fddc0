// The device contract (tests/core/device_contract.hpp) on the CUDA device: allocation over the
// budget, copies both ways, stream order, events, and a throwing host task as device_error.
#include <string>

#include "device_contract.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/gpu_probe.hpp"
#include "zoe/core/str.hpp"

namespace zoe {
namespace {

using testing::device_contract;
INSTANTIATE_TEST_SUITE_P(devices, device_contract,
                         ::testing::Values(testing::device_maker{"cuda",
                                                                 []() -> std::unique_ptr<device> {
                                                                   if (!probe_gpu().usable) return nullptr;
                                                                   return make_cuda_device(0);
                                                                 }}),
                         testing::device_maker_name);

// A failing CUDA call is the device's failure, or the user's (here an ordinal the machine lacks),
// not a broken invariant of zoe: the message names the call and the ordinal, and no source path
// of the build machine (that goes to the debug log).
TEST(cuda_device, AFailedCallIsADeviceErrorWithoutTheBuildsSourcePath) {
  const gpu_probe_result gpu = probe_gpu();
  if (!gpu.usable) GTEST_SKIP() << "no usable GPU: " << gpu.reason;
  const int missing = gpu.device_count;  // one past the last device
  try {
    (void)make_cuda_device(missing);
    FAIL() << "cuda ordinal " << missing << " does not exist";
  } catch (const device_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(str("cudaSetDevice(", missing, ")")), std::string::npos) << what;
    EXPECT_EQ(what.find("cuda_device.cpp"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace zoe
