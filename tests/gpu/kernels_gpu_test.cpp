// Every CUDA launcher against the scalar CPU path, bit for bit: the same inputs go through
// kernels::X (forced onto the scalar path, the reference) and kernels::cuda::X on the GPU, and the
// outputs are compared byte by byte. Skipped where the build has no CUDA or the machine no GPU.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/core/gpu_probe.hpp"
#include "zoe/kernels/adam.hpp"
#include "zoe/kernels/cast.hpp"
#include "zoe/kernels/cpu_path.hpp"
#include "zoe/kernels/cuda.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::kernels {
namespace {

class cuda_kernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::available()) GTEST_SKIP() << "this build has no CUDA launchers";
    const gpu_probe_result probe = probe_gpu();
    if (!probe.usable) GTEST_SKIP() << "no usable GPU: " << probe.reason;
    dev_ = make_cuda_device(0);
    stream_ = dev_->create_stream();
    set_cpu_path(cpu_path::scalar);  // the reference
  }
  void TearDown() override {
    if (dev_) set_cpu_path(cpu_path::automatic);
  }

  // A device copy of `host`.
  template <class T>
  std::unique_ptr<device_allocation> upload(const std::vector<T>& host) {
    auto buf = std::make_unique<device_allocation>(*dev_, std::max<std::size_t>(1, host.size() * sizeof(T)));
    dev_->copy_async(buf->data(), host.data(), host.size() * sizeof(T), copy_kind::host_to_device, stream_.view());
    return buf;
  }
  // `count` elements of T back from the device, after the stream has run.
  template <class T>
  std::vector<T> download(const device_allocation& buf, std::size_t count) {
    std::vector<T> host(count);
    dev_->copy_async(host.data(), buf.data(), count * sizeof(T), copy_kind::device_to_host, stream_.view());
    dev_->synchronize(stream_.view());
    return host;
  }
  std::unique_ptr<device_allocation> workspace(std::size_t bytes) {
    return std::make_unique<device_allocation>(*dev_, std::max<std::size_t>(1, bytes));
  }

  std::unique_ptr<device> dev_;
  device_stream stream_;
};

std::mt19937_64 rng_for_test() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = std::string(info->test_suite_name()) + "." + info->name();
  return std::mt19937_64(std::hash<std::string>{}(name));
}

std::vector<float> normal_values(std::mt19937_64& rng, std::size_t n, float sigma) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// `values` as elements of type t (16-bit types as their bits, through the library's casts).
std::vector<std::byte> encode(const std::vector<float>& values, dtype t) {
  std::vector<std::byte> out(values.size() * dtype_size(t));
  cast(view(std::span<const float>(values)), tensor_view{t, out.data(), values.size()});
  return out;
}

// Every value class a cast meets: zeros, subnormals of each type, the largest finite values,
// values that overflow fp16 and bf16, infinities, NaNs with payloads, and random normal values.
std::vector<float> cast_inputs(std::mt19937_64& rng) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1e-45f,
                          -1e-45f,
                          1e-40f,
                          6e-8f,
                          3e-5f,
                          65504.0f,
                          65520.0f,
                          7e4f,
                          3.4e38f,
                          -3.4e38f,
                          1e38f,
                          1.0f / 3,
                          -2.5f,
                          1.0009765625f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  std::uint32_t nan_bits = 0x7fc01234u;
  float nan = 0.0f;
  std::memcpy(&nan, &nan_bits, 4);
  v.push_back(nan);
  nan_bits = 0xff800001u;  // signalling, negative
  std::memcpy(&nan, &nan_bits, 4);
  v.push_back(nan);
  const std::vector<float> random = normal_values(rng, 100'003, 50.0f);
  v.insert(v.end(), random.begin(), random.end());
  return v;
}

constexpr std::array<dtype, 3> all_types{dtype::fp32, dtype::fp16, dtype::bf16};

TEST_F(cuda_kernels, AdamMatchesTheScalarPathForEveryGradientAndWorkingType) {
  auto rng = rng_for_test();
  constexpr std::size_t n = 70'001;
  const adam_config config{.lr = 1e-2f, .weight_decay = 0.01f, .step = 3, .grad_scale = 0.5f};
  for (const dtype g : all_types) {
    for (const int working : {-1, static_cast<int>(dtype::fp16), static_cast<int>(dtype::bf16)}) {
      std::vector<float> params = normal_values(rng, n, 1.0f);
      std::vector<float> m = normal_values(rng, n, 0.1f);
      std::vector<float> v = normal_values(rng, n, 0.01f);
      for (float& x : v) x = x * x;
      const std::vector<std::byte> grad = encode(normal_values(rng, n, 2.0f), g);
      std::vector<std::uint16_t> work(working < 0 ? 0 : n);
      const auto d_params = upload(params);
      const auto d_m = upload(m);
      const auto d_v = upload(v);
      const auto d_grad = upload(grad);
      const auto d_work = upload(work);
      const auto wt = static_cast<dtype>(working < 0 ? 0 : working);

      adam_step(config, {params, m, v, const_tensor_view{g, grad.data(), n},
                         working < 0 ? std::nullopt : std::optional<tensor_view>(tensor_view{wt, work.data(), n})});
      cuda::adam_step(config,
                      {{d_params->as<float>(), n},
                       {d_m->as<float>(), n},
                       {d_v->as<float>(), n},
                       const_tensor_view{g, d_grad->data(), n},
                       working < 0 ? std::nullopt : std::optional<tensor_view>(tensor_view{wt, d_work->data(), n})},
                      stream_.view());
      SCOPED_TRACE(::testing::Message() << "grad " << dtype_name(g) << ", working " << working);
      EXPECT_EQ(download<float>(*d_params, n), params);
      EXPECT_EQ(download<float>(*d_m, n), m);
      EXPECT_EQ(download<float>(*d_v, n), v);
      if (working >= 0) {
        EXPECT_EQ(download<std::uint16_t>(*d_work, n), work);
      }
    }
  }
}

TEST_F(cuda_kernels, CastsMatchTheScalarPathForEveryPairOfTypes) {
  auto rng = rng_for_test();
  const std::vector<float> values = cast_inputs(rng);
  const std::size_t n = values.size();
  for (const dtype from : all_types) {
    const std::vector<std::byte> src = encode(values, from);
    const auto d_src = upload(src);
    for (const dtype to : all_types) {
      std::vector<std::byte> want(n * dtype_size(to));
      cast(const_tensor_view{from, src.data(), n}, tensor_view{to, want.data(), n});
      const auto d_dst = workspace(want.size());
      cuda::cast(const_tensor_view{from, d_src->data(), n}, tensor_view{to, d_dst->data(), n}, stream_.view());
      EXPECT_EQ(download<std::byte>(*d_dst, want.size()), want) << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

// One type, overlapping views: the CPU's memmove result, in both directions and at distances below
// and above the kernel's tile.
TEST_F(cuda_kernels, ASameTypeCastBetweenOverlappingViewsMovesLikeMemmove) {
  constexpr std::size_t n = 300'000;
  std::vector<std::uint16_t> base(n);
  for (std::size_t i = 0; i < n; ++i) base[i] = static_cast<std::uint16_t>(i * 2654435761u >> 7);
  for (const std::ptrdiff_t shift : {1, -1, 7, -4096, 5000, -70'000}) {
    const std::size_t count = n - static_cast<std::size_t>(shift < 0 ? -shift : shift);
    const std::size_t from = shift < 0 ? static_cast<std::size_t>(-shift) : 0;
    const std::size_t to = shift < 0 ? 0 : static_cast<std::size_t>(shift);
    std::vector<std::uint16_t> want = base;
    std::memmove(want.data() + to, want.data() + from, count * 2);
    const auto d = upload(base);
    cuda::cast(const_tensor_view{dtype::fp16, d->as<std::uint16_t>() + from, count},
               tensor_view{dtype::fp16, d->as<std::uint16_t>() + to, count}, stream_.view());
    EXPECT_EQ(download<std::uint16_t>(*d, n), want) << "shift " << shift;
  }
}

struct quantized_host {
  std::vector<std::byte> codes;
  std::vector<float> scales;
  std::vector<float> zero_points;
  quantized_host(const quant_config& c, std::size_t count)
      : codes(c.code_bytes(count)), scales(c.blocks(count)), zero_points(c.symmetric ? 0 : c.blocks(count)) {}
  [[nodiscard]] quantized_span span() { return {codes, scales, zero_points}; }
};

// A device copy of a quantized tensor, with its spans.
struct quantized_device {
  std::unique_ptr<device_allocation> codes;
  std::unique_ptr<device_allocation> scales;
  std::unique_ptr<device_allocation> zero_points;
  quantized_span q;
};

constexpr std::array<quant_config, 4> all_layouts{quant_config{8, 256, true}, quant_config{8, 256, false},
                                                  quant_config{4, 256, true}, quant_config{4, 256, false}};

class cuda_quant : public cuda_kernels {
 protected:
  quantized_device upload_quantized(quantized_host& h) {
    quantized_device d{upload(h.codes), upload(h.scales), upload(h.zero_points), {}};
    d.q = {{d.codes->as<std::byte>(), h.codes.size()},
           {d.scales->as<float>(), h.scales.size()},
           {d.zero_points->as<float>(), h.zero_points.size()}};
    return d;
  }
  void expect_same(const quantized_device& d, const quantized_host& want, const char* what) {
    EXPECT_EQ(download<std::byte>(*d.codes, want.codes.size()), want.codes) << what << ": codes";
    EXPECT_EQ(download<float>(*d.scales, want.scales.size()), want.scales) << what << ": scales";
    EXPECT_EQ(download<float>(*d.zero_points, want.zero_points.size()), want.zero_points) << what << ": zero points";
  }
};

TEST_F(cuda_quant, QuantizeAndDequantizeMatchTheScalarPathForEveryLayoutAndType) {
  auto rng = rng_for_test();
  constexpr std::size_t n = 50'000;  // a ragged last block
  std::vector<float> values = normal_values(rng, n, 3.0f);
  values[7] = 0.0f;
  values[300] = 6e4f;  // one outlier in a block
  for (const quant_config& c : all_layouts) {
    for (const dtype t : all_types) {
      SCOPED_TRACE(::testing::Message() << "int" << c.bits << (c.symmetric ? " sym " : " asym ") << dtype_name(t));
      const std::vector<std::byte> in = encode(values, t);
      quantized_host want(c, n);
      quantize(const_tensor_view{t, in.data(), n}, c, want.span());
      const auto d_in = upload(in);
      quantized_host blank(c, n);
      quantized_device got = upload_quantized(blank);
      cuda::quantize(const_tensor_view{t, d_in->data(), n}, c, got.q, stream_.view());
      expect_same(got, want, "quantize");

      for (const dtype out : all_types) {
        std::vector<std::byte> back(n * dtype_size(out));
        dequantize(want.span(), c, tensor_view{out, back.data(), n});
        const auto d_back = workspace(back.size());
        cuda::dequantize(got.q, c, tensor_view{out, d_back->data(), n}, stream_.view());
        EXPECT_EQ(download<std::byte>(*d_back, back.size()), back) << "dequantize to " << dtype_name(out);
      }
      std::vector<float> sum = normal_values(rng, n, 1.0f);
      const auto d_sum = upload(sum);
      dequantize_accumulate(want.span(), c, sum);
      cuda::dequantize_accumulate(got.q, c, {d_sum->as<float>(), n}, stream_.view());
      EXPECT_EQ(download<float>(*d_sum, n), sum) << "dequantize_accumulate";
    }
  }
}

// Few inputs take one launch; more than 32 carry their sums between launches in the workspace.
TEST_F(cuda_quant, ReductionsMatchTheScalarPathWithTheWorkspaceTheyAskFor) {
  auto rng = rng_for_test();
  constexpr std::size_t n = 20'000;
  for (const std::size_t inputs : {std::size_t{3}, std::size_t{40}}) {
    for (const quant_config& c : all_layouts) {
      SCOPED_TRACE(::testing::Message() << inputs << " inputs, int" << c.bits << (c.symmetric ? " sym" : " asym"));
      std::vector<quantized_host> host;
      std::vector<quantized_device> dev;
      std::vector<const_quantized_span> host_views;
      std::vector<const_quantized_span> dev_views;
      host.reserve(inputs);
      dev.reserve(inputs);
      for (std::size_t i = 0; i < inputs; ++i) {
        host.emplace_back(c, n);
        quantize(view(std::span<const float>(normal_values(rng, n, 1.0f))), c, host.back().span());
        dev.push_back(upload_quantized(host.back()));
        host_views.emplace_back(host.back().span());
        dev_views.emplace_back(dev.back().q);
      }
      const float post_scale = 1.0f / static_cast<float>(inputs);

      const quant_config out_config{8, c.block, true};
      quantized_host want(out_config, n);
      reduce_requantize(host_views, c, n, post_scale, out_config, want.span());
      quantized_host blank(out_config, n);
      quantized_device got = upload_quantized(blank);
      const auto ws = workspace(cuda::reduce_requantize_workspace(n));
      cuda::reduce_requantize(dev_views, c, n, post_scale, out_config, got.q, ws->span(), stream_.view());
      expect_same(got, want, "reduce_requantize");

      for (const dtype out : all_types) {
        std::vector<std::byte> reduced(n * dtype_size(out));
        reduce_dequantize(host_views, c, post_scale, tensor_view{out, reduced.data(), n});
        const auto d_out = workspace(reduced.size());
        const auto ws2 = workspace(cuda::reduce_dequantize_workspace(inputs, n));
        cuda::reduce_dequantize(dev_views, c, post_scale, tensor_view{out, d_out->data(), n}, ws2->span(),
                                stream_.view());
        EXPECT_EQ(download<std::byte>(*d_out, reduced.size()), reduced) << "reduce_dequantize to " << dtype_name(out);
      }
    }
  }
}

TEST_F(cuda_quant, SwizzleAndUnswizzleMatchTheScalarPath) {
  auto rng = rng_for_test();
  const topology topo{2, 3};
  for (const quant_config& c : all_layouts) {
    const std::size_t n = c.block * topo.world() * 5;
    quantized_host in(c, n);
    quantize(view(std::span<const float>(normal_values(rng, n, 1.0f))), c, in.span());
    quantized_host want(c, n);
    swizzle(in.span(), c, topo, want.span());
    quantized_device d_in = upload_quantized(in);
    quantized_host blank(c, n);
    quantized_device got = upload_quantized(blank);
    cuda::swizzle(d_in.q, c, topo, got.q, stream_.view());
    expect_same(got, want, "swizzle");
    quantized_device back = upload_quantized(blank);
    cuda::unswizzle(got.q, c, topo, back.q, stream_.view());
    expect_same(back, in, "unswizzle");
  }
}

TEST_F(cuda_kernels, SumOfSquaresAndTheOverflowFlagMatchTheScalarPath) {
  auto rng = rng_for_test();
  constexpr std::size_t n = 3 * (std::size_t{1} << 16) + 12'345;
  std::vector<float> values = normal_values(rng, n, 4.0f);
  for (const dtype t : all_types) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<std::byte> x = encode(values, t);
    const double want = sum_of_squares(const_tensor_view{t, x.data(), n});
    const auto d_x = upload(x);
    const auto d_result = workspace(sizeof(double));
    const auto ws = workspace(cuda::sum_of_squares_workspace(n));
    cuda::sum_of_squares(const_tensor_view{t, d_x->data(), n}, d_result->as<double>(), ws->span(), stream_.view());
    const double got = download<double>(*d_result, 1)[0];
    EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << got << " vs " << want;

    const auto flag = upload(std::vector<std::uint32_t>{0});
    cuda::has_inf_nan(const_tensor_view{t, d_x->data(), n}, flag->as<std::uint32_t>(), stream_.view());
    EXPECT_EQ(download<std::uint32_t>(*flag, 1)[0], has_inf_nan(const_tensor_view{t, x.data(), n}) ? 1U : 0U);
    values[n / 2] = std::numeric_limits<float>::infinity();
    x = encode(values, t);
    const auto d_inf = upload(x);
    cuda::has_inf_nan(const_tensor_view{t, d_inf->data(), n}, flag->as<std::uint32_t>(), stream_.view());
    EXPECT_EQ(download<std::uint32_t>(*flag, 1)[0], 1U);
    EXPECT_TRUE(has_inf_nan(const_tensor_view{t, x.data(), n}));
    values[n / 2] = 1.0f;
  }
}

}  // namespace
}  // namespace zoe::kernels
