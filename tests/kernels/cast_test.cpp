#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernel_test_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::kernels {
namespace {

using test::bits_of;
using test::float_of;

// bf16 by a route independent of the kernel: the two bf16 neighbours by truncation, the nearer one
// in double, ties to the even mantissa.
std::uint16_t reference_bf16(float x) {
  if (std::isnan(x)) return static_cast<std::uint16_t>((bits_of(x) >> 16) | 0x40u);
  const std::uint32_t u = bits_of(x);
  const std::uint32_t down = u & 0xffff0000u;
  const std::uint32_t up = down + 0x10000u;
  const double dd = std::abs(static_cast<double>(float_of(down)) - x);
  const double du = std::isinf(float_of(up)) && std::isfinite(x)
                        ? std::abs(std::ldexp(1.0, 128) * (std::signbit(x) ? -1 : 1) - x)
                        : std::abs(static_cast<double>(float_of(up)) - x);
  if (dd < du) return static_cast<std::uint16_t>(down >> 16);
  if (du < dd) return static_cast<std::uint16_t>(up >> 16);
  return static_cast<std::uint16_t>(((down >> 16) & 1u) == 0 ? down >> 16 : up >> 16);
}

// binary16 by the compiler's own _Float16 conversion (IEEE round to nearest even).
std::uint16_t reference_fp16(float x) {
  const auto h = static_cast<_Float16>(x);
  std::uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

TEST(bf16, RoundsToNearestEvenKeepsSubnormalsAndQuietsNan) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3f80);
  EXPECT_EQ(bf16_from_float(float_of(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(bf16_from_float(float_of(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(bf16_from_float(float_of(0x3f808001u)), 0x3f81);
  EXPECT_EQ(bf16_from_float(float_of(0x00010000u)), 0x0001);  // subnormal kept
  EXPECT_EQ(bf16_from_float(float_of(0x00018000u)), 0x0002);  // subnormal tie to even
  EXPECT_EQ(bf16_from_float(float_of(0x80008001u)), 0x8001);  // negative subnormal rounds up in magnitude
  EXPECT_EQ(bf16_from_float(float_of(0x00000001u)), 0x0000);
  EXPECT_EQ(bf16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(bf16_from_float(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::max()), 0x7f80);  // overflows to infinity
  EXPECT_EQ(bf16_from_float(float_of(0x7f800001u)), 0x7fc0);              // signalling NaN comes out quiet
  EXPECT_EQ(bf16_from_float(float_of(0xff800001u)), 0xffc0);
  EXPECT_EQ(bf16_from_float(float_of(0x7fffffffu)), 0x7fff);  // payload never rounds into infinity
  EXPECT_EQ(bits_of(float_from_bf16(0x0001)), 0x00010000u);
  EXPECT_EQ(bits_of(float_from_bf16(0xff80)), 0xff800000u);
}

TEST(bf16, MatchesAnIndependentReferenceOnRandomBits) {
  auto rng = test::rng_for_test();
  for (int i = 0; i < 200000; ++i) {
    const auto u = static_cast<std::uint32_t>(rng());
    ASSERT_EQ(bf16_from_float(float_of(u)), reference_bf16(float_of(u))) << std::hex << u;
  }
}

TEST(fp16, RoundsToNearestEvenKeepsSubnormalsAndQuietsNan) {
  EXPECT_EQ(fp16_from_float(1.0f), 0x3c00);
  EXPECT_EQ(fp16_from_float(65504.0f), 0x7bff);
  EXPECT_EQ(fp16_from_float(65519.99f), 0x7bff);
  EXPECT_EQ(fp16_from_float(65520.0f), 0x7c00);  // the tie above the largest finite goes to infinity
  EXPECT_EQ(fp16_from_float(1e10f), 0x7c00);
  EXPECT_EQ(fp16_from_float(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(fp16_from_float(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(fp16_from_float(std::ldexp(1.0f, -25)), 0x0000);  // tie to even zero
  EXPECT_EQ(fp16_from_float(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(fp16_from_float(std::ldexp(3.0f, -25)), 0x0002);  // tie to even 2
  EXPECT_EQ(fp16_from_float(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(fp16_from_float(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(fp16_from_float(std::ldexp(1023.0f, -24) + std::ldexp(1.0f, -26)), 0x03ff);
  EXPECT_EQ(fp16_from_float(1e-40f), 0x0000);  // fp32 subnormal input
  EXPECT_EQ(fp16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(fp16_from_float(float_of(0x7f800001u)) & 0x7e00, 0x7e00);  // quiet NaN
  EXPECT_EQ(fp16_from_float(float_of(0xffc00000u)), 0xfe00);
}

TEST(fp16, EveryHalfWidensExactlyAndNarrowsBack) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float x = float_from_fp16(half);
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (nan) {
      ASSERT_TRUE(std::isnan(x)) << h;
      ASSERT_NE(bits_of(x) & 0x00400000u, 0u) << "NaN must come back quiet: " << h;
      continue;
    }
    const int exponent = static_cast<int>((h >> 10) & 0x1f);
    const double mantissa = static_cast<double>(h & 0x3ff);
    double expected = exponent == 0    ? std::ldexp(mantissa, -24)
                      : exponent == 31 ? std::numeric_limits<double>::infinity()
                                       : std::ldexp(1024.0 + mantissa, exponent - 25);
    if ((h & 0x8000) != 0) expected = -expected;
    ASSERT_EQ(static_cast<double>(x), expected) << h;
    ASSERT_EQ(fp16_from_float(x), half) << h;
  }
}

TEST(fp16, MatchesTheCompilersConversionOnRandomBits) {
  auto rng = test::rng_for_test();
  for (int i = 0; i < 200000; ++i) {
    const auto u = static_cast<std::uint32_t>(rng());
    const float x = float_of(u);
    if (std::isnan(x)) continue;
    ASSERT_EQ(fp16_from_float(x), reference_fp16(x)) << std::hex << u;
  }
  // And concentrated around the binary16 range, where the cases are.
  std::uniform_real_distribution<float> exponent(-27.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::exp2(exponent(rng)) * (rng() % 2 == 0 ? 1.0f : -1.0f);
    ASSERT_EQ(fp16_from_float(x), reference_fp16(x)) << x;
  }
}

// Random values plus every special case, laid out so specials fall in vector bodies and tails.
std::vector<float> values_with_specials(std::mt19937_64& rng, std::size_t n) {
  std::vector<float> v = test::normal_values(rng, n, 100.0f);
  const float specials[] = {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            float_of(0x7f800001u),
                            float_of(0xffc00001u),
                            float_of(0x00000001u),
                            float_of(0x00012345u),
                            std::ldexp(1.0f, -24),
                            std::ldexp(3.0f, -25),
                            65520.0f,
                            65519.0f,
                            -0.0f,
                            1e38f,
                            float_of(0x3f808000u),
                            float_of(0x3f818000u)};
  for (std::size_t i = 0; i < std::size(specials); ++i) v[(i * 7919) % n] = specials[i];
  v[n - 1] = specials[0];
  return v;
}

class cast_paths : public ::testing::TestWithParam<cpu_path> {};

TEST_P(cast_paths, EveryConversionIsBitIdenticalToScalar) {
  auto rng = test::rng_for_test();
  const std::size_t n = 100003;
  const std::vector<float> values = values_with_specials(rng, n);
  for (const dtype from : {dtype::fp32, dtype::fp16, dtype::bf16}) {
    // The source in its own type, made by the scalar path.
    std::vector<std::byte> src;
    {
      const test::path_guard scalar(cpu_path::scalar);
      src = test::encode(values, from);
    }
    for (const dtype to : {dtype::fp32, dtype::fp16, dtype::bf16}) {
      if (from == to) continue;
      std::vector<std::byte> expected(n * dtype_size(to));
      std::vector<std::byte> got(n * dtype_size(to));
      test::poison(expected.data(), expected.size());
      test::poison(got.data(), got.size());
      {
        const test::path_guard scalar(cpu_path::scalar);
        cast(const_tensor_view{from, src.data(), n}, tensor_view{to, expected.data(), n});
      }
      {
        const test::path_guard simd(GetParam());
        cast(const_tensor_view{from, src.data(), n}, tensor_view{to, got.data(), n});
      }
      EXPECT_EQ(test::first_difference(expected.data(), got.data(), got.size()), -1)
          << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

// Every binary16 value, widened by the SIMD path's vector body (65536 is a multiple of every
// vector width, so no element falls to the scalar tail): the scalar path's bits, which are the
// documented ones (exact; NaN quiet, its payload shifted up; see EveryHalfWidensExactlyAndNarrowsBack).
TEST_P(cast_paths, EveryHalfWidensInVectorsToTheScalarBits) {
  std::vector<std::uint16_t> halves(0x10000);
  for (std::uint32_t h = 0; h < 0x10000; ++h) halves[h] = static_cast<std::uint16_t>(h);
  std::vector<float> got(halves.size());
  test::poison(got.data(), got.size() * 4);
  {
    const test::path_guard simd(GetParam());
    cast(const_tensor_view{dtype::fp16, halves.data(), halves.size()}, view(std::span<float>(got)));
  }
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    ASSERT_EQ(bits_of(got[h]), bits_of(float_from_fp16(halves[h]))) << std::hex << "half 0x" << h;
  }
}

TEST_P(cast_paths, InfNanCheckFindsEachSpecialAnywhere) {
  auto rng = test::rng_for_test();
  const test::path_guard path(GetParam());
  const std::size_t n = 70001;  // more than one piece of work, with a ragged tail
  const std::vector<float> clean = test::normal_values(rng, n);
  for (const dtype t : {dtype::fp32, dtype::fp16, dtype::bf16}) {
    std::vector<std::byte> data = test::encode(clean, t);
    EXPECT_FALSE(has_inf_nan(const_tensor_view{t, data.data(), n})) << dtype_name(t);
    for (const float special : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN()}) {
      for (const std::size_t at : {std::size_t{0}, n / 2 + 3, n - 1, std::size_t{rng() % n}}) {
        std::vector<float> dirty = clean;
        dirty[at] = special;
        data = test::encode(dirty, t);
        EXPECT_TRUE(has_inf_nan(const_tensor_view{t, data.data(), n})) << dtype_name(t) << " at " << at;
      }
    }
  }
}

TEST_P(cast_paths, SumOfSquaresIsBitIdenticalToScalarAndAccurate) {
  auto rng = test::rng_for_test();
  const std::size_t n = 300007;
  const std::vector<float> values = test::normal_values(rng, n, 3.0f);
  for (const dtype t : {dtype::fp32, dtype::fp16, dtype::bf16}) {
    const std::vector<std::byte> data = test::encode(values, t);
    const std::vector<float> exact = test::decode(data, t);
    long double reference = 0;
    for (const float x : exact) reference += static_cast<long double>(x) * x;
    double scalar = 0;
    {
      const test::path_guard p(cpu_path::scalar);
      scalar = sum_of_squares(const_tensor_view{t, data.data(), n});
    }
    const test::path_guard p(GetParam());
    const double simd = sum_of_squares(const_tensor_view{t, data.data(), n});
    EXPECT_EQ(bits_of(static_cast<float>(simd)), bits_of(static_cast<float>(scalar)));
    EXPECT_EQ(simd, scalar) << dtype_name(t);
    EXPECT_NEAR(simd, static_cast<double>(reference), 1e-10 * static_cast<double>(reference)) << dtype_name(t);
  }
}

// dst + float(src), one fp32 addition per element: the scalar path's bits on every path, and those
// of a plain loop (specials in vector bodies and tails; dst is finite, so a NaN comes from src).
TEST_P(cast_paths, AccumulateIsOneAdditionPerElementOnEveryPath) {
  auto rng = test::rng_for_test();
  const std::size_t n = 100003;
  const std::vector<float> values = values_with_specials(rng, n);
  const std::vector<float> start = test::normal_values(rng, n, 10.0f);
  for (const dtype from : {dtype::fp32, dtype::fp16, dtype::bf16}) {
    const std::vector<std::byte> src = test::encode(values, from);
    const std::vector<float> widened = test::decode(src, from);
    std::vector<float> expected(n);
    for (std::size_t i = 0; i < n; ++i) expected[i] = start[i] + widened[i];
    std::vector<float> scalar = start;
    std::vector<float> simd = start;
    {
      const test::path_guard p(cpu_path::scalar);
      accumulate(const_tensor_view{from, src.data(), n}, scalar);
    }
    {
      const test::path_guard p(GetParam());
      accumulate(const_tensor_view{from, src.data(), n}, simd);
    }
    EXPECT_EQ(test::first_difference(expected.data(), scalar.data(), n * 4), -1) << dtype_name(from);
    EXPECT_EQ(test::first_difference(expected.data(), simd.data(), n * 4), -1) << dtype_name(from);
  }
}

INSTANTIATE_TEST_SUITE_P(kernels, cast_paths, ::testing::ValuesIn(test::simd_paths()),
                         [](const auto& param_info) { return std::string(cpu_path_name(param_info.param)); });

TEST(cast, RejectsMismatchedCountsAndOverlap) {
  std::vector<float> a(16, 1.0f);
  std::vector<std::uint16_t> b(15);
  try {
    cast(view(std::span<const float>(a)), view(std::span<std::uint16_t>(b), dtype::bf16));
    FAIL() << "accepted 16 -> 15 elements";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cast(const_tensor_view{dtype::fp32, a.data(), 8}, tensor_view{dtype::fp16, a.data(), 8}), usage_error);
}

TEST(accumulate, RejectsMismatchedCountsAndOverlap) {
  std::vector<float> a(16, 1.0f);
  std::vector<float> b(15);
  try {
    accumulate(view(std::span<const float>(a)), b);
    FAIL() << "accepted 16 -> 15 elements";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(accumulate(const_tensor_view{dtype::fp16, a.data(), 8}, std::span<float>(a).subspan(2, 8)), usage_error);
  accumulate(const_tensor_view{dtype::fp32, nullptr, 0}, {});  // nothing to add
}

// Automatic dispatch names the widest SIMD path available, whatever Highway target it picked (a
// newer target than AVX3 is an AVX-512 one, not "scalar").
TEST(cpu_path, AutomaticIsTheWidestAvailablePath) {
  const std::vector<cpu_path> available = available_cpu_paths();
  const test::path_guard automatic(cpu_path::automatic);
  EXPECT_EQ(active_cpu_path(), available.back());
}

TEST(cpu_path, ParsesNamesAndRefusesUnknownOnes) {
  EXPECT_EQ(parse_cpu_path("avx2", "--path"), cpu_path::avx2);
  EXPECT_EQ(parse_cpu_path("auto", "--path"), cpu_path::automatic);
  try {
    (void)parse_cpu_path("neon", "--path");
    FAIL();
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("--path"), std::string::npos);
  }
  const auto paths = available_cpu_paths();
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.front(), cpu_path::scalar);
  for (const cpu_path p : paths) {
    const test::path_guard guard(p);
    EXPECT_EQ(active_cpu_path(), p);
  }
}

}  // namespace
}  // namespace zoe::kernels
