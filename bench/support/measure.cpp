#include "measure.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <thread>

namespace zoe::bench {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

double memcpy_gib_per_s(std::size_t bytes, unsigned threads, int repeats) {
  threads = std::max(1u, threads);
  const std::unique_ptr<std::byte[]> src(new std::byte[bytes]);
  const std::unique_ptr<std::byte[]> dst(new std::byte[bytes]);
  std::memset(src.get(), 0x5a, bytes);  // fault the pages in before timing
  std::memset(dst.get(), 0xa5, bytes);
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = bench_clock::now();
    std::vector<std::jthread> pool;
    const std::size_t part = (bytes / threads + 63) / 64 * 64;
    for (unsigned t = 0; t < threads; ++t) {
      const std::size_t begin = std::min(bytes, t * part);
      const std::size_t end = std::min(bytes, begin + part);
      pool.emplace_back([&, begin, end] { std::memcpy(dst.get() + begin, src.get() + begin, end - begin); });
    }
    pool.clear();
    const double s = seconds_since(start);
    best = std::max(best, 2.0 * static_cast<double>(bytes) / s / static_cast<double>(1ULL << 30));
  }
  return best;
}

}  // namespace zoe::bench
