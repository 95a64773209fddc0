#include "zoe/kernels/cpu_path.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "cpu/kernel_table.hpp"
#include "zoe/core/check.hpp"

namespace zoe::kernels {
namespace {

constexpr cpu_path all_paths[] = {cpu_path::automatic, cpu_path::scalar, cpu_path::sse4, cpu_path::avx2,
                                  cpu_path::avx512};

constexpr const char* environment_variable = "ZOE_KERNELS_CPU_PATH";

std::atomic<cpu_path> forced{cpu_path::automatic};

// ZOE_KERNELS_CPU_PATH is consulted once per process, at the first kernel call, query or
// set_cpu_path(), whichever comes first; an explicit set_cpu_path() before any kernel call wins, so
// the variable is then never read. A bad value is one config_error, thrown by that first use; the
// kernels then run on the default path rather than failing every call.
std::once_flag settled;
std::string environment_error;  // written once under `settled`, read by the thread that takes it
std::atomic<bool> error_pending{false};

std::string available_names() {
  std::string names;
  for (const cpu_path p : available_cpu_paths()) names += str(names.empty() ? "" : ", ", cpu_path_name(p));
  return names;
}

void apply(cpu_path p);

void settle(bool explicit_setting) {
  // Asked before any forcing is applied, so its answer is this CPU's, not the current setting's.
  (void)available_cpu_paths();
  std::call_once(settled, [explicit_setting] {
    if (explicit_setting) return;
    const char* text = std::getenv(environment_variable);
    if (text == nullptr || *text == '\0') return;
    try {
      apply(parse_cpu_path(text, environment_variable));
    } catch (const usage_error& e) {
      // The variable leads: an unavailable path's message from apply() does not name it.
      environment_error = str(environment_variable, "='", text, "': ", e.what(), "; this CPU and build have ",
                              available_names(), " (unset the variable or use auto for the best of them)");
      error_pending.store(true, std::memory_order_release);
    }
  });
  if (error_pending.load(std::memory_order_acquire) && error_pending.exchange(false)) {
    throw config_error(environment_error);
  }
}

void apply(cpu_path p) {
  const std::vector<cpu_path> paths = available_cpu_paths();
  bool ok = p == cpu_path::automatic;
  for (const cpu_path a : paths) ok = ok || a == p;
  ZOE_EXPECTS(ok, "CPU path '", cpu_path_name(p), "' is not available on this CPU or in this build");
  detail::simd_force_targets(p == cpu_path::automatic || p == cpu_path::scalar ? 0 : detail::simd_target_bit(p));
  forced.store(p, std::memory_order_release);
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
  settle(true);
  apply(p);
}

cpu_path active_cpu_path() {
  settle(false);
  const cpu_path p = forced.load(std::memory_order_acquire);
  return p == cpu_path::scalar ? p : detail::simd_active_path();
}

namespace detail {

const kernel_table& active_table() {
  settle(false);
  return forced.load(std::memory_order_acquire) == cpu_path::scalar ? scalar_table() : simd_table();
}

}  // namespace detail
}  // namespace zoe::kernels
