#pragma once
// Benchmark data for the Adam benchmarks: floats spread over a range, cheap to make in parallel.

#include <cstdint>
#include <span>

namespace zoe::bench {

/// Fills `x` with values in [lo, hi) from a cheap hash of (index + salt), in parallel on TBB's
/// threads. The values never matter for speed as long as none is subnormal, and gigabytes of
/// normal draws would take longer than the benchmark. The same salt gives the same values.
void uniform_fill(std::span<float> x, float lo, float hi, std::uint64_t salt);

}  // namespace zoe::bench
