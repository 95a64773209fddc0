#pragma once
// Timing helpers shared by the zoe-bench subcommands: a clock, medians, and the memcpy
// bandwidth each benchmark reports beside its own figure (the limit measured in the same run).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace zoe::bench {

using bench_clock = std::chrono::steady_clock;

[[nodiscard]] inline double seconds_since(bench_clock::time_point start) {
  return std::chrono::duration<double>(bench_clock::now() - start).count();
}

/// The median of the values (the mean of the middle two for an even count). Empty gives 0.
[[nodiscard]] double median(std::vector<double> values);

/// `bytes` moved in `seconds`, in GiB/s.
[[nodiscard]] inline double gib_per_s(std::uint64_t bytes, double seconds) {
  return static_cast<double>(bytes) / seconds / static_cast<double>(std::uint64_t{1} << 30);
}

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

 private:
  std::size_t bytes_;
  unsigned threads_;
  std::unique_ptr<std::byte[]> src_;
  std::unique_ptr<std::byte[]> dst_;
};

/// Medians of a benchmark timed in alternation with its memcpy limit.
struct alternating_medians {
  double seconds = 0;           ///< the median time of one timed call of the work
  double memcpy_gib_per_s = 0;  ///< the memcpy rate at the median memcpy time
};

/// Calls `work(0)` and the probe once untimed (thread start-up, first touches), then `runs` times
/// `work(i)` (i = 1..runs) timed, each followed by one timed memcpy, so on a shared machine both
/// see the same load; `progress`, when given, hears each run's seconds and memcpy GiB/s.
alternating_medians alternate_with_memcpy(memcpy_probe& probe, int runs, const std::function<void(int)>& work,
                                          const std::function<void(int, double, double)>& progress = {});

}  // namespace zoe::bench
