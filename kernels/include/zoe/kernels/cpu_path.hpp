#pragma once
// Which instruction set the CPU kernels run on. By default the best one the CPU supports is chosen
// at run time; tests and benchmarks force each path in turn to prove they agree bit for bit.

#include <string_view>
#include <vector>

namespace zoe::kernels {

enum class cpu_path {
  automatic,  ///< the best SIMD path this CPU supports
  scalar,     ///< the plain float instantiation of the shared arithmetic (the reference)
  sse4,       ///< 128-bit vectors
  avx2,       ///< 256-bit vectors
  avx512,     ///< 512-bit vectors (AVX-512 F/BW/DQ/VL)
};

/// "auto", "scalar", "sse4", "avx2", "avx512". Never throws.
[[nodiscard]] std::string_view cpu_path_name(cpu_path p) noexcept;

/// Parses a name printed by cpu_path_name. Throws usage_error naming `what` otherwise.
[[nodiscard]] cpu_path parse_cpu_path(std::string_view text, std::string_view what);

/// The concrete paths (never `automatic`) this binary has and this CPU can run, scalar first.
/// Thread-safe.
[[nodiscard]] std::vector<cpu_path> available_cpu_paths();

/// Forces every later CPU kernel call onto `p` (`automatic` returns to the default). Throws
/// usage_error when `p` is not available here. Not thread-safe against kernels running at the same
/// time: meant for start-up, tests and benchmarks.
///
/// The initial setting comes from the environment variable ZOE_KERNELS_CPU_PATH, read once per
/// process at the first kernel call or active_cpu_path(); a set_cpu_path() before that wins and the
/// variable is never read. A value that names no path (or one this CPU lacks) makes that first call
/// throw config_error naming the variable, the allowed values and the paths available here, once;
/// later calls run on the default path.
void set_cpu_path(cpu_path p);

/// The path the next kernel call runs on (resolving `automatic`). Thread-safe. May throw the one
/// config_error of a bad ZOE_KERNELS_CPU_PATH (see set_cpu_path).
[[nodiscard]] cpu_path active_cpu_path();

}  // namespace zoe::kernels
