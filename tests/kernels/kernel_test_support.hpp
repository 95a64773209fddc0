#pragma once
// Shared by the kernel tests: fresh random data (never zeros), poisoned outputs, and a guard that
// forces one CPU path for a scope.

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <tbb/task_arena.h>

#include "zoe/kernels/cpu_path.hpp"
#include "zoe/kernels/dtype.hpp"

namespace zoe::kernels::test {

/// Forces `p` for the scope, then returns to automatic.
class path_guard {
 public:
  explicit path_guard(cpu_path p) { set_cpu_path(p); }
  ~path_guard() { set_cpu_path(cpu_path::automatic); }
  path_guard(const path_guard&) = delete;
  path_guard& operator=(const path_guard&) = delete;
};

/// Runs `fn` with the kernels' parallel loops in an arena of `threads` threads, whatever the machine.
/// The kernels split work with TBB's static partitioner, one piece per thread of the arena, so on a
/// machine with many cores the pieces of a test-sized input fall below the length where a kernel
/// switches to streaming stores. A global_control cap does not help: it limits the running threads
/// but not the arena's concurrency, which is what sets the number of pieces.
template <class Fn>
void on_threads(int threads, Fn&& fn) {
  tbb::task_arena arena(threads);
  arena.execute(fn);
}

/// The SIMD paths this machine has (every available path but scalar), then automatic dispatch.
[[nodiscard]] std::vector<cpu_path> simd_paths();

/// A generator seeded from the test's name, so every test gets its own fresh data.
[[nodiscard]] std::mt19937_64 rng_for_test();

/// `n` values drawn from N(0, sigma), with no exact zeros.
[[nodiscard]] std::vector<float> normal_values(std::mt19937_64& rng, std::size_t n, float sigma = 1.0f);

/// Elements in `t` as raw bytes (fp32 or 16-bit bits), converted from fp32 with the library casts.
[[nodiscard]] std::vector<std::byte> encode(const std::vector<float>& values, dtype t);
/// Back to fp32.
[[nodiscard]] std::vector<float> decode(const std::vector<std::byte>& bytes, dtype t);

/// Fills with a byte pattern that is a NaN in every float type, so an unwritten output shows.
inline void poison(void* data, std::size_t bytes) {
  if (bytes != 0) std::memset(data, 0xff, bytes);
}

[[nodiscard]] inline std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
[[nodiscard]] inline float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

/// The index of the first byte where a and b differ, or -1.
[[nodiscard]] long first_difference(const void* a, const void* b, std::size_t bytes);

}  // namespace zoe::kernels::test
