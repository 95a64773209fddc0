#include <cuda_runtime_api.h>

#include "zoe/core/gpu_probe.hpp"
#include "zoe/core/str.hpp"

namespace zoe {

bool built_with_cuda() noexcept { return true; }

gpu_probe_result probe_gpu() noexcept {
  gpu_probe_result r;
  try {
    const cudaError_t e = cudaGetDeviceCount(&r.device_count);
    // Without a driver the runtime answers cudaErrorInsufficientDriver rather than
    // cudaErrorNoDevice; both mean there is no GPU to use.
    if (e == cudaErrorInsufficientDriver) {
      r.reason = "no CUDA driver on this machine";
    } else if (e == cudaErrorNoDevice || (e == cudaSuccess && r.device_count == 0)) {
      r.reason = "no CUDA device present";
    } else if (e != cudaSuccess) {
      r.reason = str("CUDA runtime error: ", cudaGetErrorString(e));
    } else {
      cudaDeviceProp prop{};
      r.usable = cudaGetDeviceProperties(&prop, 0) == cudaSuccess;
      r.reason = r.usable ? std::string(prop.name) : "device 0 did not report its properties";
    }
    if (!r.usable) r.device_count = 0;
    (void)cudaGetLastError();  // clear the sticky error so later calls start clean
  } catch (...) {
    r = {};
    r.reason = "out of memory while probing CUDA";
  }
  return r;
}

}  // namespace zoe
