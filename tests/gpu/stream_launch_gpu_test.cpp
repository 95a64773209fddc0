// launch_kernel on the CUDA device: the CUDA launcher is called with the stream, and its kernel
// runs in order between the copies on that stream, with the CPU version's bits. Skipped where the
// build has no CUDA or the machine no usable GPU.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/core/gpu_probe.hpp"
#include "zoe/core/stream_launch.hpp"
#include "zoe/kernels/cuda.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe {
namespace {

TEST(launch_kernel_gpu, RunsTheCudaLauncherInStreamOrder) {
  if (!kernels::cuda::available()) GTEST_SKIP() << "this build has no CUDA launchers";
  const gpu_probe_result probe = probe_gpu();
  if (!probe.usable) GTEST_SKIP() << "no usable GPU: " << probe.reason;
  const auto dev = make_cuda_device(0);
  const device_stream stream = dev->create_stream();
  const stream_view s = stream.view();

  const kernels::quant_config config{8, 64, true};
  constexpr std::size_t n = 1000;
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 97) * 0.25f - 9.0f;
  std::vector<std::byte> codes(config.code_bytes(n));
  std::vector<float> scales(config.blocks(n));
  kernels::quantize(kernels::view(std::span<const float>(values)), config, {codes, scales, {}});
  std::vector<float> expected(n, 0.5f);
  kernels::dequantize_accumulate({codes, scales, {}}, config, expected);

  const std::size_t bytes = codes.size() + scales.size() * sizeof(float) + n * sizeof(float);
  auto* base = static_cast<std::byte*>(dev->allocate(bytes, s));
  auto* d_codes = base;
  auto* d_scales = reinterpret_cast<float*>(base + codes.size());
  auto* d_sum = d_scales + scales.size();
  const std::vector<float> start(n, 0.5f);
  dev->copy_async(d_codes, codes.data(), codes.size(), copy_kind::host_to_device, s);
  dev->copy_async(d_scales, scales.data(), scales.size() * sizeof(float), copy_kind::host_to_device, s);
  dev->copy_async(d_sum, start.data(), n * sizeof(float), copy_kind::host_to_device, s);
  stream_view launched_on;
  launch_kernel(
      *dev, s, [] { ADD_FAILURE() << "the host task ran on the CUDA device"; },
      [&](stream_view on) {
        launched_on = on;
        kernels::cuda::dequantize_accumulate({{d_codes, codes.size()}, {d_scales, scales.size()}, {}}, config,
                                             {d_sum, n}, on);
      });
  std::vector<float> got(n);
  dev->copy_async(got.data(), d_sum, n * sizeof(float), copy_kind::device_to_host, s);
  dev->synchronize(s);
  dev->deallocate(base, bytes, s);
  EXPECT_EQ(launched_on, s);
  EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace zoe
