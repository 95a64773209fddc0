#pragma once
// Timing helpers shared by the zoe-bench subcommands: a clock, medians, and the memcpy
// bandwidth each benchmark reports beside its own figure (the limit measured in the same run).

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

namespace zoe::bench {

using bench_clock = std::chrono::steady_clock;

[[nodiscard]] inline double seconds_since(bench_clock::time_point start) {
  return std::chrono::duration<double>(bench_clock::now() - start).count();
}

/// The median of the values (the mean of the middle two for an even count). Empty gives 0.
[[nodiscard]] double median(std::vector<double> values);

/// A memcpy of `bytes` between two buffers faulted in up front, on `threads` threads, so a
/// benchmark can time it between its own runs (alternating, on a shared, noisy machine) and
/// compare medians with medians.
class memcpy_probe {
 public:
  memcpy_probe(std::size_t bytes, unsigned threads);
  /// Copies once; returns the seconds taken.
  double run_once();
  /// GiB/s for a time `seconds` of run_once, counting bytes read plus written (X copied moves 2X).
  [[nodiscard]] double gib_per_s(double seconds) const;
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

 private:
  std::size_t bytes_;
  unsigned threads_;
  std::unique_ptr<std::byte[]> src_;
  std::unique_ptr<std::byte[]> dst_;
};

/// The median rate of `repeats` memcpy runs of `bytes` on `threads` threads, in GiB/s counting
/// bytes read plus written. For a benchmark that cannot interleave its runs with memcpy_probe.
[[nodiscard]] double memcpy_gib_per_s(std::size_t bytes, unsigned threads, int repeats = 7);

}  // namespace zoe::bench
