// A build without CUDA: asking for the CUDA device is an error that says so.
#include "zoe/core/check.hpp"
#include "zoe/core/device.hpp"

namespace zoe {

std::unique_ptr<device> make_cuda_device(int ordinal) {
  throw device_error(str("cannot open cuda:", ordinal, ": zoe was built without CUDA (ZOE_WITH_CUDA=OFF)"));
}

}  // namespace zoe
