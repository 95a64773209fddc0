#pragma once
// How the CPU entry points split work: TBB over index ranges, with a static partitioner so each
// thread streams one contiguous stretch (the kernels are memory bound and threads are scarce).

#include <cstddef>
#include <map>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

// ThreadSanitizer cannot see how TBB hands work to its threads and waits for them: Debian's libtbb
// is not instrumented, so a write by one parallel_for and a read after it look like a race. The
// annotations state the ordering TBB guarantees (the caller's writes before the loop are seen by
// every piece; every piece's writes are seen by the caller after it), so TSan still reports races
// between pieces of one loop, the ones that matter.
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define ZOE_TSAN_ACQUIRE(addr) __tsan_acquire(addr)
#define ZOE_TSAN_RELEASE(addr) __tsan_release(addr)
#else
#define ZOE_TSAN_ACQUIRE(addr) static_cast<void>(addr)
#define ZOE_TSAN_RELEASE(addr) static_cast<void>(addr)
#endif

namespace zoe::kernels::detail {

/// Calls fn(begin, end) over pieces of [0, count) no smaller than `grain`, in parallel.
template <class Fn>
void parallel_ranges(std::size_t count, std::size_t grain, const Fn& fn) {
  if (count == 0) return;
  if (count <= grain) {
    fn(std::size_t{0}, count);
    return;
  }
  // Only their addresses matter: TSan's names for the fork and the join. Two of them, so that no
  // piece is ordered after another.
  char fork_point = 0;
  char join_point = 0;
  ZOE_TSAN_RELEASE(&fork_point);
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, count, grain),
      [&](const tbb::blocked_range<std::size_t>& r) {
        ZOE_TSAN_ACQUIRE(&fork_point);
        fn(r.begin(), r.end());
        ZOE_TSAN_RELEASE(&join_point);
      },
      tbb::static_partitioner());
  ZOE_TSAN_ACQUIRE(&join_point);
}

/// parallel_ranges on at most `max_threads` threads: 0 as many as the current arena has, 1 the
/// calling thread alone in one piece (TBB untouched: no task, no worker wakes), n a TBB arena of n
/// threads for this call, the caller among them.
template <class Fn>
void parallel_ranges(std::size_t count, std::size_t grain, std::size_t max_threads, const Fn& fn) {
  if (max_threads == 1) {
    if (count > 0) fn(std::size_t{0}, count);
    return;
  }
  if (max_threads == 0 || max_threads >= static_cast<std::size_t>(tbb::this_task_arena::max_concurrency())) {
    parallel_ranges(count, grain, fn);
    return;
  }
  // One arena per budget and calling thread, kept: building a task_arena per call would set up
  // its worker slots again on every optimizer step.
  thread_local std::map<std::size_t, tbb::task_arena> arenas;
  tbb::task_arena& arena = arenas.try_emplace(max_threads, static_cast<int>(max_threads)).first->second;
  arena.execute([&] { parallel_ranges(count, grain, fn); });
}

/// Elements per piece for elementwise kernels: big enough to amortize a task, small enough to
/// split a shard over every thread.
inline constexpr std::size_t elementwise_grain = std::size_t{1} << 16;

}  // namespace zoe::kernels::detail
