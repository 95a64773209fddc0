#include "uniform_fill.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace zoe::bench {

void uniform_fill(std::span<float> x, float lo, float hi, std::uint64_t salt) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, x.size(), 1 << 20), [&](const auto& r) {
    for (std::size_t i = r.begin(); i < r.end(); ++i) {
      std::uint64_t h = (i + salt) * 0x9e3779b97f4a7c15ULL;
      h ^= h >> 31;
      h *= 0xbf58476d1ce4e5b9ULL;
      h ^= h >> 29;
      const float u = static_cast<float>(h >> 40) * 0x1p-24f;  // [0, 1)
      x[i] = lo + (hi - lo) * u;
    }
  });
}

}  // namespace zoe::bench
