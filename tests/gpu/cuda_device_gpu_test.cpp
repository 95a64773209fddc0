// The device contract (tests/core/device_contract.hpp) on the CUDA device: allocation over the
// budget, copies both ways, stream order, events, and a throwing host task as device_error.
#include "device_contract.hpp"
#include "zoe/core/gpu_probe.hpp"

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

}  // namespace
}  // namespace zoe
