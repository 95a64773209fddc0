#pragma once
// Asks whether a usable CUDA GPU is present, without needing one: a CUDA build links the runtime
// statically, so this answers "no" on a machine with no driver instead of failing to start.

#include <string>

namespace zoe {

struct gpu_probe_result {
  bool usable = false;   ///< at least one device answered
  int device_count = 0;  ///< devices the runtime reports
  std::string reason;    ///< why not usable ("no CUDA driver", "built without CUDA", ...), or the first device's name
};

/// Probes the CUDA runtime once per call. Never throws.
[[nodiscard]] gpu_probe_result probe_gpu() noexcept;

/// True when zoe was compiled with the CUDA device and kernels.
[[nodiscard]] bool built_with_cuda() noexcept;

}  // namespace zoe
