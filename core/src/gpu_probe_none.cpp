#include "zoe/core/gpu_probe.hpp"

namespace zoe {

bool built_with_cuda() noexcept { return false; }

gpu_probe_result probe_gpu() noexcept {
  gpu_probe_result r;
  try {
    r.reason = "zoe was built without CUDA";
  } catch (...) {  // NOLINT(bugprone-empty-catch): the reason is optional text
  }
  return r;
}

}  // namespace zoe
