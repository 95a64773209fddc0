#include "measure.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iostream>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include "cache_limits.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/units.hpp"

namespace zoe::bench {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

memcpy_probe::memcpy_probe(std::uint64_t bytes, unsigned threads, std::uint64_t min_piece)
    : pieces_(std::max(1u, threads)),
      piece_(align_up(std::max<std::uint64_t>({(bytes + pieces_ - 1) / pieces_, min_piece, 1}), 64)),
      src_(piece_ * pieces_),
      dst_(piece_ * pieces_) {
  std::memset(src_.span().data(), 0x5a, src_.span().size());  // content; host_buffer faulted the pages in
}

double memcpy_probe::run_once() {
  std::byte* const src = src_.span().data();
  std::byte* const dst = dst_.span().data();
  const auto start = bench_clock::now();
  tbb::parallel_for(
      tbb::blocked_range<unsigned>(0, pieces_, 1),
      [&](const tbb::blocked_range<unsigned>& r) {
        for (unsigned p = r.begin(); p < r.end(); ++p) std::memcpy(dst + p * piece_, src + p * piece_, piece_);
      },
      tbb::static_partitioner());
  return seconds_since(start);
}

double memcpy_probe::gib_per_s(double seconds) const { return bench::gib_per_s(2 * bytes(), seconds); }

memcpy_probe streaming_memcpy_probe(std::uint64_t bytes, unsigned threads) {
  const std::uint64_t piece = streaming_piece_bytes();
  // Source and destination of one piece per thread: on many threads with an old glibc (whose
  // threshold is 3/4 of the whole cache) that can outgrow the machine, and locking it would not end well.
  const std::uint64_t needed = 2 * std::max<std::uint64_t>(bytes, std::uint64_t{threads} * piece);
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  ZOE_EXPECTS(pages <= 0 || page_size <= 0 ||
                  needed <= static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size) / 2,
              "--threads ", threads, ": the memcpy limit needs ", format_bytes(needed), " (a piece of ",
              format_bytes(piece),
              " per thread, above glibc's streaming threshold, copied into another), more than "
              "half of this machine's memory; give fewer threads");
  memcpy_probe probe(bytes, threads, piece);
  (void)check_working_set(2 * probe.bytes(), "the memcpy limit");
  std::cerr << "zoe-bench: memcpy limit: " << format_bytes(probe.bytes()) << " in " << probe.pieces() << " pieces of "
            << format_bytes(probe.piece_bytes()) << " on " << threads << " threads (glibc streams copies of "
            << format_bytes(glibc_non_temporal_threshold().bytes)
            << " and more: " << glibc_non_temporal_threshold().source << "), "
            << (probe.locked() ? "locked" : "unlocked") << (probe.huge_pages() ? ", huge pages" : ", 4 KiB pages")
            << "\n";
  return probe;
}

nlohmann::json to_json(const memcpy_probe& probe) {
  nlohmann::json j = to_json(cache_fit{2 * probe.bytes(), llc().bytes()});
  j.update({{"bytes", probe.bytes()},
            {"pieces", probe.pieces()},
            {"piece_bytes", probe.piece_bytes()},
            {"non_temporal_threshold_bytes", glibc_non_temporal_threshold().bytes},
            {"non_temporal_threshold_source", glibc_non_temporal_threshold().source},
            {"locked", probe.locked()},
            {"huge_pages", probe.huge_pages()}});
  return j;
}

alternating_medians alternate_with_memcpy(memcpy_probe& probe, int runs, const std::function<void(int)>& work,
                                          const std::function<void(int, double, double)>& progress) {
  (void)probe.run_once();
  work(0);
  std::vector<double> seconds, memcpy_seconds;
  for (int run = 1; run <= runs; ++run) {
    const auto start = bench_clock::now();
    work(run);
    seconds.push_back(seconds_since(start));
    memcpy_seconds.push_back(probe.run_once());
    if (progress) progress(run, seconds.back(), probe.gib_per_s(memcpy_seconds.back()));
  }
  return {median(seconds), probe.gib_per_s(median(memcpy_seconds))};
}

}  // namespace zoe::bench
