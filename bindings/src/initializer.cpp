// The seeded initializers (see initializer.hpp) and zoe_initializer_fill.
#include "initializer.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "status.hpp"
#include "zoe/core/checked.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::bindings {
namespace {

constexpr std::uint64_t golden_gamma = 0x9E3779B97F4A7C15ULL;

// The k-th output of splitmix64 (Steele, Lea and Flood) seeded with `seed`.
std::uint64_t splitmix64(std::uint64_t seed, std::uint64_t k) noexcept {
  std::uint64_t z = seed + (k + 1) * golden_gamma;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [0, 1): the top 53 bits, exact in a double.
double unit(std::uint64_t seed, std::uint64_t k) noexcept {
  return static_cast<double>(splitmix64(seed, k) >> 11) * 0x1.0p-53;
}

float uniform(float scale, std::uint64_t seed, std::uint64_t i) noexcept {
  const auto v = static_cast<float>(static_cast<double>(scale) * (2 * unit(seed, i) - 1));
  // Rounding to float may reach scale itself: the interval is half-open.
  return v >= scale && scale > 0 ? std::nextafter(scale, 0.0F) : v;
}

float normal(float scale, std::uint64_t seed, std::uint64_t i) noexcept {
  const double u1 = 1 - unit(seed, 2 * i);  // in (0, 1]: the logarithm is finite
  const double u2 = unit(seed, 2 * i + 1);
  const double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
  return static_cast<float>(static_cast<double>(scale) * z);
}

}  // namespace

void fill_initial(int init, float scale, std::uint64_t seed, std::uint64_t first, std::span<float> values) {
  // Element indices are 64-bit: past the last one they would wrap onto the first values.
  if (!checked_add(first, values.size())) {
    throw usage_error(str("elements [", first, ", +", values.size(), ") end past element 2^64 - 1"));
  }
  switch (init) {
    case ZOE_INIT_ZEROS: std::fill(values.begin(), values.end(), 0.0F); return;
    case ZOE_INIT_UNIFORM:
      for (std::size_t j = 0; j < values.size(); ++j) values[j] = uniform(scale, seed, first + j);
      return;
    case ZOE_INIT_NORMAL:
      for (std::size_t j = 0; j < values.size(); ++j) values[j] = normal(scale, seed, first + j);
      return;
    case ZOE_INIT_DATA: throw usage_error("ZOE_INIT_DATA is the caller's data, not a seeded initializer");
  }
  throw usage_error(
      str("init ", init, " is not a seeded initializer (ZOE_INIT_ZEROS, ZOE_INIT_UNIFORM or ZOE_INIT_NORMAL)"));
}

}  // namespace zoe::bindings

extern "C" {

zoe_status zoe_initializer_fill(zoe_init init, float scale, uint64_t seed, uint64_t first, float* values,
                                size_t count) {
  return zoe::bindings::guarded("zoe_initializer_fill", [&] {
    if (count > 0) zoe::bindings::expect_pointer(values, "values");
    const int kind = zoe::bindings::enum_value(init);
    if ((kind == ZOE_INIT_UNIFORM || kind == ZOE_INIT_NORMAL) && !(std::isfinite(scale) && scale >= 0)) {
      throw zoe::usage_error(zoe::str("the scale ", scale, " is not a finite number >= 0"));
    }
    zoe::bindings::fill_initial(kind, scale, seed, first, std::span<float>(values, count));
  });
}

}  // extern "C"
