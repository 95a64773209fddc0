#pragma once
// Timing helpers shared by the zoe-bench subcommands: a clock, medians, and the memcpy
// bandwidth each benchmark reports beside its own figure (the limit measured in the same run).

#include <chrono>
#include <cstddef>
#include <vector>

namespace zoe::bench {

using bench_clock = std::chrono::steady_clock;

[[nodiscard]] inline double seconds_since(bench_clock::time_point start) {
  return std::chrono::duration<double>(bench_clock::now() - start).count();
}

/// The median of the values (the mean of the middle two for an even count). Empty gives 0.
[[nodiscard]] double median(std::vector<double> values);

/// Copies `bytes` between two pre-faulted buffers on `threads` threads, `repeats` times, and
/// returns the best rate in GiB/s counting bytes read plus written (a memcpy of X bytes moves 2X).
[[nodiscard]] double memcpy_gib_per_s(std::size_t bytes, unsigned threads, int repeats = 5);

}  // namespace zoe::bench
