#pragma once
// Timing helpers shared by the zoe-bench subcommands: a clock, medians, and the memcpy
// bandwidth each benchmark reports beside its own figure (the limit measured in the same run).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "host_buffer.hpp"

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

/// The memcpy limit a benchmark reports beside its own figure: a copy between two host_buffers
/// (the locked, huge-page memory the kernels' buffers come from), faulted in up front, split into
/// equal pieces, one per thread, on TBB's threads (the ones the kernels run on; the first,
/// untimed run starts them, so no thread start lands inside a timed run).
class memcpy_probe {
 public:
  /// Copies max(bytes, threads × min_piece) bytes per run (rounded up to whole 64-byte lines per
  /// piece). Throws memory_error naming the size when the buffers cannot be mapped.
  memcpy_probe(std::uint64_t bytes, unsigned threads, std::uint64_t min_piece = 0);
  /// Copies once; returns the seconds taken.
  double run_once();
  /// GiB/s for a time `seconds` of run_once, counting bytes read plus written (X copied moves 2X).
  [[nodiscard]] double gib_per_s(double seconds) const;
  [[nodiscard]] std::uint64_t bytes() const noexcept { return piece_ * pieces_; }
  [[nodiscard]] std::uint64_t piece_bytes() const noexcept { return piece_; }
  [[nodiscard]] unsigned pieces() const noexcept { return pieces_; }
  /// What its buffers got: locked, and transparent huge pages.
  [[nodiscard]] bool locked() const noexcept { return src_.locked() && dst_.locked(); }
  [[nodiscard]] bool huge_pages() const noexcept { return src_.huge_pages() && dst_.huge_pages(); }

 private:
  unsigned pieces_;
  std::uint64_t piece_;
  host_buffer src_;
  host_buffer dst_;
};

/// The memcpy limit of a kernel benchmark: at least `bytes`, on `threads` threads, in pieces above
/// glibc's non-temporal threshold, so every call streams as one large copy would. Says on stderr
/// what it allocates and why.
[[nodiscard]] memcpy_probe streaming_memcpy_probe(std::uint64_t bytes, unsigned threads);

/// The probe's shape for a benchmark's JSON: bytes, pieces, piece and threshold sizes, memory kind.
[[nodiscard]] nlohmann::json to_json(const memcpy_probe& probe);

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
