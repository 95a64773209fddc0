#include "zoe/kernels/cpu_path.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "cpu/kernel_table.hpp"
#include "zoe/core/check.hpp"

namespace zoe::kernels {
namespace {

constexpr cpu_path all_paths[] = {cpu_path::automatic, cpu_path::scalar, cpu_path::sse4, cpu_path::avx2,
                                  cpu_path::avx512};

std::atomic<cpu_path> forced{cpu_path::automatic};
std::once_flag environment_read;

// The first kernel call (or the first query) applies ZOE_KERNELS_CPU_PATH, so a run can be pinned
// to one path without code.
void apply_environment() {
  std::call_once(environment_read, [] {
    const char* text = std::getenv("ZOE_KERNELS_CPU_PATH");
    if (text != nullptr && *text != '\0') set_cpu_path(parse_cpu_path(text, "ZOE_KERNELS_CPU_PATH"));
  });
}

}  // namespace

std::string_view cpu_path_name(cpu_path p) noexcept {
  switch (p) {
    case cpu_path::automatic: return "auto";
    case cpu_path::scalar: return "scalar";
    case cpu_path::sse4: return "sse4";
    case cpu_path::avx2: return "avx2";
    case cpu_path::avx512: return "avx512";
  }
  return "unknown";
}

cpu_path parse_cpu_path(std::string_view text, std::string_view what) {
  for (const cpu_path p : all_paths) {
    if (text == cpu_path_name(p)) return p;
  }
  throw usage_error(str(what, ": unknown CPU path '", text, "' (expected auto, scalar, sse4, avx2 or avx512)"));
}

std::vector<cpu_path> available_cpu_paths() {
  // Asked before any forcing is applied, so the answer is this CPU's, not the current setting's.
  static const std::vector<cpu_path> paths = [] {
    std::vector<cpu_path> v{cpu_path::scalar};
    const long long supported = detail::simd_supported_targets();
    for (const cpu_path p : {cpu_path::sse4, cpu_path::avx2, cpu_path::avx512}) {
      if ((supported & detail::simd_target_bit(p)) != 0) v.push_back(p);
    }
    return v;
  }();
  return paths;
}

void set_cpu_path(cpu_path p) {
  const std::vector<cpu_path> paths = available_cpu_paths();
  bool ok = p == cpu_path::automatic;
  for (const cpu_path a : paths) ok = ok || a == p;
  ZOE_EXPECTS(ok, "CPU path '", cpu_path_name(p), "' is not available on this CPU or in this build");
  detail::simd_force_targets(p == cpu_path::automatic || p == cpu_path::scalar ? 0 : detail::simd_target_bit(p));
  forced.store(p, std::memory_order_release);
}

cpu_path active_cpu_path() {
  (void)available_cpu_paths();
  apply_environment();
  const cpu_path p = forced.load(std::memory_order_acquire);
  return p == cpu_path::scalar ? p : detail::simd_active_path();
}

namespace detail {

const kernel_table& active_table() {
  (void)available_cpu_paths();
  apply_environment();
  return forced.load(std::memory_order_acquire) == cpu_path::scalar ? scalar_table() : simd_table();
}

}  // namespace detail
}  // namespace zoe::kernels
