#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernel_test_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::kernels {
namespace {

// A quantized tensor with its own storage, poisoned.
struct quantized_buffer {
  std::vector<std::byte> codes;
  std::vector<float> scales;
  std::vector<float> zero_points;

  quantized_buffer(const quant_config& c, std::size_t count)
      : codes(c.code_bytes(count)), scales(c.blocks(count)), zero_points(c.symmetric ? 0 : c.blocks(count)) {
    test::poison(codes.data(), codes.size());
    test::poison(scales.data(), scales.size() * 4);
    test::poison(zero_points.data(), zero_points.size() * 4);
  }
  quantized_span span() { return {codes, scales, zero_points}; }
  [[nodiscard]] const_quantized_span cspan() const { return {codes, scales, zero_points}; }
  bool operator==(const quantized_buffer& o) const {
    return codes == o.codes && test::first_difference(scales.data(), o.scales.data(), scales.size() * 4) == -1 &&
           test::first_difference(zero_points.data(), o.zero_points.data(), zero_points.size() * 4) == -1;
  }
};

struct quant_case {
  int bits;
  bool symmetric;
  std::size_t block;
  dtype type;
};

std::string case_name(const quant_case& c) {
  return "int" + std::to_string(c.bits) + (c.symmetric ? "_sym" : "_asym") + "_block" + std::to_string(c.block) + "_" +
         std::string(dtype_name(c.type));
}

quant_config config_of(const quant_case& c) { return {c.bits, c.block, c.symmetric}; }

// The largest code (127, 255, 7 or 15).
float levels_of(const quant_case& c) {
  return c.bits == 8 ? (c.symmetric ? 127.0f : 255.0f) : (c.symmetric ? 7.0f : 15.0f);
}

// Element i's code, decoded from its byte or nibble.
float code_at(const quantized_buffer& q, const quant_case& c, std::size_t i) {
  if (c.bits == 8) {
    return c.symmetric ? static_cast<float>(static_cast<std::int8_t>(q.codes[i])) : static_cast<float>(q.codes[i]);
  }
  const unsigned nibble = (static_cast<unsigned>(q.codes[i / 2]) >> (i % 2 == 0 ? 0 : 4)) & 0xfu;
  return c.symmetric && nibble >= 8 ? static_cast<float>(nibble) - 16.0f : static_cast<float>(nibble);
}

const quant_case all_cases[] = {
    {8, true, 2048, dtype::fp16},  {8, true, 64, dtype::fp32},    {8, false, 256, dtype::bf16},
    {8, false, 2048, dtype::fp32}, {4, true, 128, dtype::fp16},   {4, true, 2048, dtype::bf16},
    {4, false, 64, dtype::fp32},   {4, false, 1024, dtype::fp16}, {8, true, 8, dtype::bf16},
};

class quant_cases : public ::testing::TestWithParam<quant_case> {};

// Each element is within half a step of its block (plus the rounding of the scale itself), codes
// stay in range, and padding codes are zero.
TEST_P(quant_cases, ErrorWithinHalfAStepOfEachBlock) {
  const quant_case c = GetParam();
  const quant_config config = config_of(c);
  auto rng = test::rng_for_test();
  const std::size_t n = 3 * c.block + c.block / 2 + 3;  // ragged tail
  std::vector<float> values = test::normal_values(rng, n, 2.0f);
  values[n / 3] *= 10.0f;  // an outlier
  const std::vector<std::byte> input = test::encode(values, c.type);
  const std::vector<float> x = test::decode(input, c.type);
  quantized_buffer q(config, n);
  quantize(const_tensor_view{c.type, input.data(), n}, config, q.span());
  std::vector<float> back(n);
  test::poison(back.data(), n * 4);
  dequantize(q.cspan(), config, view(std::span<float>(back)));
  const double levels = levels_of(c);
  for (std::size_t b = 0; b < config.blocks(n); ++b) {
    const std::size_t begin = b * c.block;
    const std::size_t end = std::min(n, begin + c.block);
    double lo = x[begin], hi = x[begin];
    for (std::size_t i = begin; i < end; ++i) {
      lo = std::min<double>(lo, x[i]);
      hi = std::max<double>(hi, x[i]);
    }
    const double range = c.symmetric ? 2 * std::max(-lo, hi) : hi - lo;
    const double step = range / (c.symmetric ? 2 * levels : levels);
    EXPECT_NEAR(q.scales[b], step, step * 1e-6) << "block " << b;
    if (!c.symmetric) {
      EXPECT_EQ(q.zero_points[b], static_cast<float>(lo)) << "block " << b;
    }
    for (std::size_t i = begin; i < end; ++i) {
      ASSERT_LE(std::abs(static_cast<double>(back[i]) - x[i]), 0.5 * step * (1 + 1e-5) + std::abs(x[i]) * 1e-6)
          << "element " << i << " of block " << b;
    }
  }
  // Codes in range, padding zero.
  for (std::size_t i = 0; i < config.blocks(n) * c.block; ++i) {
    if (i >= n) {
      ASSERT_EQ(code_at(q, c, i), 0.0f) << "padding element " << i;
    } else {
      ASSERT_GE(code_at(q, c, i), c.symmetric ? -levels_of(c) : 0.0f) << i;
      ASSERT_LE(code_at(q, c, i), levels_of(c)) << i;
    }
  }
}

TEST_P(quant_cases, EveryPathBitIdenticalToScalar) {
  const quant_case c = GetParam();
  const quant_config config = config_of(c);
  auto rng = test::rng_for_test();
  const std::size_t n = 5 * c.block + 13;
  const std::vector<std::byte> input = test::encode(test::normal_values(rng, n, 3.0f), c.type);
  quantized_buffer expected(config, n);
  std::vector<std::byte> expected_back(n * dtype_size(c.type));
  {
    const test::path_guard p(cpu_path::scalar);
    quantize(const_tensor_view{c.type, input.data(), n}, config, expected.span());
    dequantize(expected.cspan(), config, tensor_view{c.type, expected_back.data(), n});
  }
  for (const cpu_path path : test::simd_paths()) {
    const test::path_guard p(path);
    quantized_buffer got(config, n);
    quantize(const_tensor_view{c.type, input.data(), n}, config, got.span());
    EXPECT_TRUE(got == expected) << cpu_path_name(path);
    std::vector<std::byte> back(n * dtype_size(c.type));
    test::poison(back.data(), back.size());
    dequantize(expected.cspan(), config, tensor_view{c.type, back.data(), n});
    EXPECT_EQ(test::first_difference(back.data(), expected_back.data(), back.size()), -1) << cpu_path_name(path);
  }
}

// out += dequantized value: each element is the accumulator plus the value dequantize gives, added
// in fp32 by plain C++ (the reference), on every path; elements past out.size() are not touched.
TEST_P(quant_cases, DequantizeAccumulateAddsTheValuesOnEveryPath) {
  const quant_case c = GetParam();
  const quant_config config = config_of(c);
  auto rng = test::rng_for_test();
  const std::size_t n = 5 * c.block + 13;
  quantized_buffer q(config, n);
  const std::vector<float> x = test::normal_values(rng, n, 3.0f);
  quantize(view(std::span<const float>(x)), config, q.span());
  std::vector<float> values(n);
  {
    const test::path_guard p(cpu_path::scalar);
    dequantize(q.cspan(), config, view(std::span<float>(values)));
  }
  const std::vector<float> start = test::normal_values(rng, n);
  std::vector<float> expected(n);
  for (std::size_t i = 0; i < n; ++i) expected[i] = start[i] + values[i];
  for (const cpu_path path : available_cpu_paths()) {
    const test::path_guard p(path);
    std::vector<float> sum = start;
    sum.push_back(-1.5f);  // a guard past the output
    dequantize_accumulate(q.cspan(), config, std::span<float>(sum).first(n));
    EXPECT_EQ(test::first_difference(sum.data(), expected.data(), n * 4), -1) << cpu_path_name(path);
    EXPECT_EQ(sum.back(), -1.5f) << cpu_path_name(path) << " wrote past the output";
  }
}

// Long enough to be split over threads: each piece adds into its own blocks.
TEST(quantize, LongDequantizeAccumulateBitIdenticalToTheReferenceOnTwoThreads) {
  auto rng = test::rng_for_test();
  const quant_config config{4, 64, false};
  const std::size_t n = (std::size_t{1} << 18) + 5;
  quantized_buffer q(config, n);
  quantize(view(std::span<const float>(test::normal_values(rng, n))), config, q.span());
  std::vector<float> values(n);
  dequantize(q.cspan(), config, view(std::span<float>(values)));
  const std::vector<float> start = test::normal_values(rng, n);
  test::on_threads(2, [&] {
    for (const cpu_path path : available_cpu_paths()) {
      const test::path_guard p(path);
      std::vector<float> sum = start;
      dequantize_accumulate(q.cspan(), config, sum);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(test::bits_of(sum[i]), test::bits_of(start[i] + values[i]))
            << cpu_path_name(path) << " element " << i;
      }
    }
  });
}

TEST(quantize, DequantizeAccumulateRejectsMismatchedSizesNamingThem) {
  const quant_config config{8, 64, true};
  quantized_buffer q(config, 100);
  std::vector<float> out(200);  // 4 blocks, the input holds 2
  try {
    dequantize_accumulate(q.cspan(), config, out);
    FAIL() << "200 elements from 2 blocks of 64";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("dequantize"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4 blocks"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dequantize_accumulate(q.cspan(), quant_config{8, 60, true}, std::span<float>(out).first(100)),
               usage_error);
}

// Long ranges stream their 8-bit codes out: straight from the registers when the output is aligned,
// else through an L1 buffer from the first vector-aligned byte of each block. The codes must not
// depend on that, whatever the alignment of the output.
TEST(quantize, LongInputsBitIdenticalToScalarWhateverTheCodeAlignment) {
  auto rng = test::rng_for_test();
  const std::size_t n = (std::size_t{3} << 19) + 13;  // pieces past the streaming threshold, ragged
  // Two threads, whatever the machine: each piece stays long enough to be streamed.
  test::on_threads(2, [&] {
    for (const quant_case c : {quant_case{8, true, 2048, dtype::fp16}, quant_case{8, false, 2048, dtype::bf16},
                               quant_case{8, false, 64, dtype::fp32}}) {
      const quant_config config = config_of(c);
      const std::vector<std::byte> input = test::encode(test::normal_values(rng, n, 3.0f), c.type);
      const std::size_t blocks = config.blocks(n);
      for (const cpu_path path : test::simd_paths()) {
        for (const std::size_t shift : {std::size_t{0}, std::size_t{1}, std::size_t{24}}) {
          std::vector<std::byte> codes[2];
          std::vector<float> scales[2], zero_points[2];
          for (int run = 0; run < 2; ++run) {
            const test::path_guard p(run == 0 ? cpu_path::scalar : path);
            // `shift` bytes past a 64-byte boundary (0: the aligned output streamed straight out).
            std::vector<std::byte> storage(config.code_bytes(n) + 64 + shift);
            test::poison(storage.data(), storage.size());
            scales[run].assign(blocks, 0.0f);
            zero_points[run].assign(c.symmetric ? 0 : blocks, 0.0f);
            const std::size_t to_boundary = (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64;
            const std::span<std::byte> out(storage.data() + to_boundary + shift, config.code_bytes(n));
            quantize(const_tensor_view{c.type, input.data(), n}, config, {out, scales[run], zero_points[run]});
            codes[run].assign(out.begin(), out.end());
          }
          const std::string where =
              case_name(c) + " " + std::string(cpu_path_name(path)) + " shift " + std::to_string(shift);
          ASSERT_EQ(test::first_difference(codes[0].data(), codes[1].data(), codes[0].size()), -1) << where;
          ASSERT_EQ(test::first_difference(scales[0].data(), scales[1].data(), blocks * 4), -1) << where;
          ASSERT_EQ(test::first_difference(zero_points[0].data(), zero_points[1].data(), zero_points[0].size() * 4), -1)
              << where;
        }
      }
    }
  });
}

// qgZ: the fused reduction equals dequantize, sum in input order, scale, quantize, done step by step.
TEST_P(quant_cases, ReduceRequantizeEqualsTheStepByStepComposition) {
  const quant_case c = GetParam();
  const quant_config config = config_of(c);
  const quant_config out_config{8, c.block, c.symmetric};
  auto rng = test::rng_for_test();
  const std::size_t n = 4 * c.block + 5;
  const float post_scale = 1.0f / 3.0f;
  std::vector<quantized_buffer> inputs;
  std::vector<const_quantized_span> views;
  for (int r = 0; r < 3; ++r) {
    const std::vector<float> values = test::normal_values(rng, n);
    inputs.emplace_back(config, n);
    quantize(view(std::span<const float>(values)), config, inputs.back().span());
  }
  for (const auto& q : inputs) views.push_back(q.cspan());
  std::vector<float> sum(n), part(n);
  for (std::size_t r = 0; r < inputs.size(); ++r) {
    dequantize(views[r], config, view(std::span<float>(part)));
    for (std::size_t i = 0; i < n; ++i) sum[i] = r == 0 ? part[i] : sum[i] + part[i];
  }
  for (float& s : sum) s = s * post_scale;
  quantized_buffer expected(out_config, n);
  quantize(view(std::span<const float>(sum)), out_config, expected.span());

  for (const cpu_path path : available_cpu_paths()) {
    const test::path_guard p(path);
    quantized_buffer got(out_config, n);
    reduce_requantize(views, config, n, post_scale, out_config, got.span());
    EXPECT_TRUE(got == expected) << cpu_path_name(path);
    std::vector<float> reduced(n);
    test::poison(reduced.data(), n * 4);
    reduce_dequantize(views, config, post_scale, view(std::span<float>(reduced)));
    EXPECT_EQ(test::first_difference(reduced.data(), sum.data(), n * 4), -1) << cpu_path_name(path);
  }
}

// Quantizes `input` (n elements of c.type) on the scalar path, then on every SIMD path, and expects
// the same bits from each; returns the scalar result.
quantized_buffer quantize_on_every_path(const quant_case& c, const std::vector<std::byte>& input, std::size_t n) {
  const quant_config config = config_of(c);
  quantized_buffer expected(config, n);
  {
    const test::path_guard p(cpu_path::scalar);
    quantize(const_tensor_view{c.type, input.data(), n}, config, expected.span());
  }
  for (const cpu_path path : test::simd_paths()) {
    const test::path_guard p(path);
    quantized_buffer got(config, n);
    quantize(const_tensor_view{c.type, input.data(), n}, config, got.span());
    EXPECT_TRUE(got == expected) << cpu_path_name(path);
  }
  return expected;
}

// Dequantizes `q` (n elements) to fp32 on the scalar path, then on every SIMD path, and expects
// the same bits from each; returns the scalar result.
std::vector<float> dequantize_on_every_path(const quant_case& c, const quantized_buffer& q, std::size_t n) {
  const quant_config config = config_of(c);
  std::vector<float> expected(n);
  {
    const test::path_guard p(cpu_path::scalar);
    dequantize(q.cspan(), config, view(std::span<float>(expected)));
  }
  for (const cpu_path path : test::simd_paths()) {
    const test::path_guard p(path);
    std::vector<float> got(n);
    test::poison(got.data(), n * 4);
    dequantize(q.cspan(), config, view(std::span<float>(got)));
    EXPECT_EQ(test::first_difference(got.data(), expected.data(), n * 4), -1) << cpu_path_name(path);
  }
  return expected;
}

// Whole blocks of a test tensor: enough for two groups of four plus one (the grouped path reads a
// group's extremes while coding the group before), and the block where the special ones start:
// the second group.
constexpr std::size_t grouped_blocks = 9;
constexpr std::size_t special_block = 4;

// Block extremes are found on integer keys of the bits: blocks of one sign (where the key order of
// negative values is reversed) and blocks of signed zeros must still get their exact extremes.
TEST_P(quant_cases, ExactExtremesForBlocksOfOneSignAndOfSignedZeros) {
  const quant_case c = GetParam();
  auto rng = test::rng_for_test();
  const std::size_t n = grouped_blocks * c.block;
  std::vector<float> values = test::normal_values(rng, n, 2.0f);
  const std::size_t negative = special_block * c.block, positive = negative + c.block, zeros = positive + c.block;
  for (std::size_t i = negative; i < positive; ++i) values[i] = -std::abs(values[i]);
  for (std::size_t i = positive; i < zeros; ++i) values[i] = std::abs(values[i]);
  for (std::size_t i = zeros; i < zeros + c.block; ++i) values[i] = (i % 3 == 0) ? -0.0f : 0.0f;
  const std::vector<std::byte> input = test::encode(values, c.type);
  const std::vector<float> x = test::decode(input, c.type);
  const quantized_buffer q = quantize_on_every_path(c, input, n);
  for (std::size_t b = special_block; b < special_block + 2; ++b) {
    const auto first = x.begin() + static_cast<long>(b * c.block);
    const auto last = first + static_cast<long>(c.block);
    const float lo = *std::min_element(first, last);
    const float hi = *std::max_element(first, last);
    if (c.symmetric) {
      EXPECT_EQ(q.scales[b], std::max(-lo, hi) / levels_of(c)) << "block " << b;
    } else {
      EXPECT_EQ(q.zero_points[b], lo) << "block " << b;
      EXPECT_EQ(q.scales[b], (hi - lo) / levels_of(c)) << "block " << b;
    }
  }
  const std::size_t z = special_block + 2;
  EXPECT_EQ(test::bits_of(q.scales[z]), 0u) << "a block of zeros has scale +0";
  if (!c.symmetric) {
    EXPECT_EQ(test::bits_of(q.zero_points[z]), 0u) << "and zero point +0";
  }
  for (std::size_t i = zeros; i < zeros + c.block; ++i) ASSERT_EQ(code_at(q, c, i), 0.0f) << "element " << i;
}

// A block holding NaN or an infinity has no meaningful scale, but it is quantized the same way on
// every path (NaN has a place in the key order), its codes stay in range, and the other blocks are
// untouched by it.
TEST_P(quant_cases, NonFiniteBlocksAreIdenticalOnEveryPathAndLeaveOthersAlone) {
  const quant_case c = GetParam();
  auto rng = test::rng_for_test();
  const std::size_t n = grouped_blocks * c.block;
  const std::vector<float> finite = test::normal_values(rng, n, 2.0f);
  std::vector<float> values = finite;
  const std::size_t nan = special_block, inf = nan + 1, minus_inf = nan + 2;
  values[nan * c.block + c.block / 2] = std::numeric_limits<float>::quiet_NaN();
  values[inf * c.block + 1] = std::numeric_limits<float>::infinity();
  values[minus_inf * c.block + c.block - 1] = -std::numeric_limits<float>::infinity();
  const quantized_buffer q = quantize_on_every_path(c, test::encode(values, c.type), n);
  EXPECT_TRUE(std::isnan(q.scales[nan]));
  EXPECT_TRUE(std::isinf(q.scales[inf]));
  EXPECT_TRUE(std::isinf(q.scales[minus_inf]));
  if (!c.symmetric) {
    EXPECT_EQ(q.zero_points[minus_inf], -std::numeric_limits<float>::infinity());
  }
  for (std::size_t i = nan * c.block; i < (minus_inf + 1) * c.block; ++i) {
    ASSERT_GE(code_at(q, c, i), c.symmetric ? -levels_of(c) : 0.0f) << i;
    ASSERT_LE(code_at(q, c, i), levels_of(c)) << i;
  }
  // Every other block is quantized as it is without the non-finite values.
  const quantized_buffer clean = quantize_on_every_path(c, test::encode(finite, c.type), n);
  for (std::size_t b = 0; b < grouped_blocks; ++b) {
    if (b >= nan && b <= minus_inf) continue;
    EXPECT_EQ(q.scales[b], clean.scales[b]) << "block " << b;
    for (std::size_t i = b * c.block; i < (b + 1) * c.block; ++i)
      ASSERT_EQ(code_at(q, c, i), code_at(clean, c, i)) << i;
  }
}

// fp32 and bf16 reach blocks so small that levels / range overflows to infinity (about 1e-37 and
// below, subnormals included). They are coded like any other block: the same bits on every path,
// codes in range, each element within half a step (plus the rounding of a subnormal scale, half
// its last place per unit of code).
TEST(quantize, TinyBlocksAreCodedLikeAnyOther) {
  auto rng = test::rng_for_test();
  for (const dtype type : {dtype::fp32, dtype::bf16}) {
    for (const quant_case c : {quant_case{8, true, 256, type}, quant_case{8, false, 256, type},
                               quant_case{4, true, 256, type}, quant_case{4, false, 256, type}}) {
      const std::size_t n = grouped_blocks * c.block;
      std::vector<float> values = test::normal_values(rng, n, 1.0f);
      for (std::size_t i = special_block * c.block; i < (special_block + 1) * c.block; ++i) values[i] *= 1e-38f;
      for (std::size_t i = (special_block + 1) * c.block; i < (special_block + 2) * c.block; ++i)
        values[i] *= 1e-39f;  // subnormal
      const std::vector<std::byte> input = test::encode(values, c.type);
      const std::vector<float> x = test::decode(input, c.type);
      const quantized_buffer q = quantize_on_every_path(c, input, n);
      const quant_config config = config_of(c);
      std::vector<float> back(n);
      dequantize(q.cspan(), config, view(std::span<float>(back)));
      const std::string where = case_name(c);
      for (std::size_t b = special_block; b < special_block + 2; ++b) {
        const float step = q.scales[b];
        ASSERT_GT(step, 0.0f) << where << " block " << b;
        for (std::size_t i = b * c.block; i < (b + 1) * c.block; ++i) {
          ASSERT_GE(code_at(q, c, i), c.symmetric ? -levels_of(c) : 0.0f) << where << " " << i;
          ASSERT_LE(code_at(q, c, i), levels_of(c)) << where << " " << i;
          const double bound = 0.5 * step * (1 + 1e-5) + levels_of(c) * 0x1p-150;
          ASSERT_LE(std::abs(static_cast<double>(back[i]) - x[i]), bound) << where << " element " << i;
        }
      }
    }
  }
}

// Huge finite blocks: values near +-FLT_MAX, where the range of an asymmetric block (hi - lo)
// overflows to infinity and where code * scale may pass FLT_MAX before the zero point brings it
// back. They are coded like any other block: the same bits on every path, codes in range, a finite
// scale, and every element decoded finite (never NaN) within half a step of its value.
TEST(quantize, HugeBlocksRoundTripWithinHalfAStep) {
  auto rng = test::rng_for_test();
  for (const dtype type : {dtype::fp32, dtype::bf16}) {
    // The largest finite value of the type (values above bf16's would round to infinity).
    const float max = type == dtype::bf16 ? test::float_of(0x7f7f0000u) : std::numeric_limits<float>::max();
    for (const quant_case c : {quant_case{8, true, 256, type}, quant_case{8, false, 256, type},
                               quant_case{4, true, 256, type}, quant_case{4, false, 256, type}}) {
      const std::size_t n = grouped_blocks * c.block;
      std::vector<float> values = test::normal_values(rng, n, 1.0f);
      // (Scaled from a unit range: the distribution needs b - a to be finite.)
      std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
      std::uniform_real_distribution<float> upper(0.5f, 1.0f);
      const auto anywhere = [&] { return unit(rng) * max; };
      const auto top = [&] { return upper(rng) * max; };
      const std::size_t first = special_block * c.block;
      for (std::size_t i = 0; i < c.block; ++i) {
        values[first + i] = i % 2 == 0 ? 3e38f : -3e38f;  // +-3e38, alternating
        values[first + c.block + i] = anywhere();         // mixed huge values
        values[first + 2 * c.block + i] = top();          // one sign, up to FLT_MAX
        values[first + 3 * c.block + i] = i % 3 == 0 ? -top() : values[first + 2 * c.block + i];
      }
      values[first + 2 * c.block + 7] = max;  // the extremes themselves
      values[first + 3 * c.block + 9] = -max;
      const std::vector<std::byte> input = test::encode(values, c.type);
      const std::vector<float> x = test::decode(input, c.type);
      const quantized_buffer q = quantize_on_every_path(c, input, n);
      const std::vector<float> back = dequantize_on_every_path(c, q, n);
      const std::string where = case_name(c);
      for (std::size_t b = special_block; b < special_block + 4; ++b) {
        const float step = q.scales[b];
        ASSERT_TRUE(std::isfinite(step)) << where << " block " << b;
        ASSERT_GT(step, 0.0f) << where << " block " << b;
        for (std::size_t i = b * c.block; i < (b + 1) * c.block; ++i) {
          ASSERT_GE(code_at(q, c, i), c.symmetric ? -levels_of(c) : 0.0f) << where << " " << i;
          ASSERT_LE(code_at(q, c, i), levels_of(c)) << where << " " << i;
          ASSERT_TRUE(std::isfinite(back[i])) << where << " element " << i << " (" << x[i] << ") -> " << back[i];
          const double bound = 0.5 * static_cast<double>(step) * (1 + 1e-5) + std::abs(x[i]) * 1e-6;
          ASSERT_LE(std::abs(static_cast<double>(back[i]) - x[i]), bound) << where << " element " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(kernels, quant_cases, ::testing::ValuesIn(all_cases),
                         [](const auto& param_info) { return case_name(param_info.param); });

TEST(int4, PacksElementPairsLowNibbleFirst) {
  // One symmetric block of 8 whose maximum is 7: the scale is 1 and the codes are the values.
  const std::vector<float> values = {1, -2, 3, -4, 7, -7, 0.4f, -5};
  const quant_config config{4, 8, true};
  quantized_buffer q(config, values.size());
  quantize(view(std::span<const float>(values)), config, q.span());
  EXPECT_EQ(q.scales[0], 1.0f);
  const unsigned expected[] = {0xe1, 0xc3, 0x97, 0xb0};  // (-2<<4 | 1), (-4<<4 | 3), (-7<<4 | 7), (-5<<4 | 0)
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(static_cast<unsigned>(q.codes[i]), expected[i]) << i;

  const quant_config asym{4, 8, false};
  const std::vector<float> ramp = {0, 1, 2, 3, 12, 13, 14, 15};
  quantized_buffer a(asym, ramp.size());
  quantize(view(std::span<const float>(ramp)), asym, a.span());
  EXPECT_EQ(a.scales[0], 1.0f);
  EXPECT_EQ(a.zero_points[0], 0.0f);
  const unsigned ramp_bytes[] = {0x10, 0x32, 0xdc, 0xfe};
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(static_cast<unsigned>(a.codes[i]), ramp_bytes[i]) << i;
}

TEST(quantize, BlockScalesBeatOneTensorScaleThreefoldOnOutliers) {
  auto rng = test::rng_for_test();
  const std::size_t n = std::size_t{1} << 20;
  std::vector<float> x = test::normal_values(rng, n);
  for (std::size_t i = rng() % 10000; i < n; i += 10000) x[i] *= 10.0f;
  const auto rel_error = [&](std::size_t block) {
    const quant_config config{8, block, true};
    quantized_buffer q(config, n);
    quantize(view(std::span<const float>(x)), config, q.span());
    std::vector<float> back(n);
    dequantize(q.cspan(), config, view(std::span<float>(back)));
    double err = 0, norm = 0;
    for (std::size_t i = 0; i < n; ++i) {
      err += (static_cast<double>(x[i]) - back[i]) * (static_cast<double>(x[i]) - back[i]);
      norm += static_cast<double>(x[i]) * x[i];
    }
    return std::sqrt(err / norm);
  };
  const double block = rel_error(2048);
  const double tensor = rel_error(n);  // one block: one scale for the whole tensor
  EXPECT_LE(block, tensor / 3) << "block " << block << " tensor " << tensor;
}

class swizzle_topologies : public ::testing::TestWithParam<topology> {};

TEST_P(swizzle_topologies, UnswizzleUndoesSwizzle) {
  const topology topo = GetParam();
  auto rng = test::rng_for_test();
  for (const quant_config config : {quant_config{8, 64, false}, quant_config{4, 128, true}}) {
    const std::size_t n = topo.world() * 3 * config.block;
    const std::vector<float> values = test::normal_values(rng, n);
    quantized_buffer original(config, n), swizzled(config, n), restored(config, n);
    quantize(view(std::span<const float>(values)), config, original.span());
    swizzle(original.cspan(), config, topo, swizzled.span());
    if (topo.nodes > 1 && topo.ranks_per_node > 1) {
      EXPECT_FALSE(swizzled == original);
    }
    unswizzle(swizzled.cspan(), config, topo, restored.span());
    EXPECT_TRUE(restored == original);
    // Partition (node, local) sits at position local * nodes + node.
    const std::size_t part_blocks = 3;
    for (std::size_t node = 0; node < topo.nodes; ++node) {
      for (std::size_t local = 0; local < topo.ranks_per_node; ++local) {
        const std::size_t from = (node * topo.ranks_per_node + local) * part_blocks;
        const std::size_t to = (local * topo.nodes + node) * part_blocks;
        EXPECT_EQ(swizzled.scales[to], original.scales[from]);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(kernels, swizzle_topologies,
                         ::testing::Values(topology{1, 1}, topology{1, 4}, topology{4, 1}, topology{2, 2},
                                           topology{3, 2}, topology{2, 3}, topology{4, 8}),
                         [](const auto& param_info) {
                           return std::to_string(param_info.param.nodes) + "x" +
                                  std::to_string(param_info.param.ranks_per_node);
                         });

TEST(quantize, RejectsBadConfigsAndSizesNamingThem) {
  std::vector<float> x(100, 1.0f);
  quant_config bad{3, 64, true};
  std::vector<std::byte> codes(128);
  std::vector<float> scales(2);
  try {
    quantize(view(std::span<const float>(x)), bad, {codes, scales, {}});
    FAIL();
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("bits"), std::string::npos) << e.what();
  }
  bad = {8, 60, true};
  EXPECT_THROW(quantize(view(std::span<const float>(x)), bad, {codes, scales, {}}), usage_error);
  const quant_config good{8, 64, true};
  std::vector<std::byte> short_codes(100);
  try {
    quantize(view(std::span<const float>(x)), good, {short_codes, scales, {}});
    FAIL();
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("codes"), std::string::npos) << e.what();
  }
  std::vector<float> zp(2);
  EXPECT_THROW(quantize(view(std::span<const float>(x)), good, {codes, scales, zp}), usage_error);
  quantized_buffer q(good, 100), out(good, 100);
  quantize(view(std::span<const float>(x)), good, q.span());
  try {
    swizzle(q.cspan(), good, topology{3, 1}, out.span());
    FAIL() << "2 blocks split into 3 partitions";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("partitions"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zoe::kernels
