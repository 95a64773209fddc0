#include "measure.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

namespace zoe::bench {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

memcpy_probe::memcpy_probe(std::size_t bytes, unsigned threads)
    : bytes_(bytes), threads_(std::max(1u, threads)), src_(new std::byte[bytes]), dst_(new std::byte[bytes]) {
  std::memset(src_.get(), 0x5a, bytes_);  // fault the pages in before any timing
  std::memset(dst_.get(), 0xa5, bytes_);
}

double memcpy_probe::run_once() {
  const auto start = bench_clock::now();
  if (threads_ == 1) {
    std::memcpy(dst_.get(), src_.get(), bytes_);
    return seconds_since(start);
  }
  std::vector<std::jthread> pool;
  const std::size_t part = (bytes_ / threads_ + 63) / 64 * 64;
  for (unsigned t = 0; t < threads_; ++t) {
    const std::size_t begin = std::min(bytes_, t * part);
    const std::size_t end = std::min(bytes_, begin + part);
    pool.emplace_back([this, begin, end] { std::memcpy(dst_.get() + begin, src_.get() + begin, end - begin); });
  }
  pool.clear();
  return seconds_since(start);
}

double memcpy_probe::gib_per_s(double seconds) const { return bench::gib_per_s(2 * std::uint64_t{bytes_}, seconds); }

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
