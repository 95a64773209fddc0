#pragma once
// How the CPU entry points split work: TBB over index ranges, with a static partitioner so each
// thread streams one contiguous stretch (the kernels are memory bound and threads are scarce).

#include <cstddef>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

namespace zoe::kernels::detail {

/// Calls fn(begin, end) over pieces of [0, count) no smaller than `grain`, in parallel.
template <class Fn>
void parallel_ranges(std::size_t count, std::size_t grain, const Fn& fn) {
  if (count == 0) return;
  if (count <= grain) {
    fn(std::size_t{0}, count);
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, count, grain),
      [&](const tbb::blocked_range<std::size_t>& r) { fn(r.begin(), r.end()); }, tbb::static_partitioner());
}

/// Elements per piece for elementwise kernels: big enough to amortize a task, small enough to
/// split a shard over every thread.
inline constexpr std::size_t elementwise_grain = std::size_t{1} << 16;

}  // namespace zoe::kernels::detail
