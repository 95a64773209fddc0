#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "zoe/core/error.hpp"
#include "zoe/kernels/cuda.hpp"

// The CUDA launchers check their arguments with the CPU entry points' checks before touching the
// device, so bad arguments throw usage_error even on a machine without a GPU; in a build without
// CUDA every launcher throws device_error instead. Host pointers are enough: nothing is launched.
namespace zoe::kernels {
namespace {

template <class Fn>
void expect_rejected(const Fn& fn) {
  if (cuda::available()) {
    EXPECT_THROW(fn(), usage_error);
  } else {
    EXPECT_THROW(fn(), device_error);
  }
}

TEST(cuda_launchers, RejectBadArgumentsBeforeAnyLaunch) {
  const quant_config config{8, 64, true};
  std::vector<std::byte> codes(128);
  std::vector<float> scales(2);
  std::vector<float> values(100);
  const quantized_span q{codes, scales, {}};
  const std::array<const_quantized_span, 1> one{const_quantized_span(q)};
  const stream_view stream;

  // No inputs.
  std::vector<std::byte> workspace(cuda::reduce_requantize_workspace(100));
  expect_rejected([&] { cuda::reduce_requantize({}, config, 100, 1.0f, config, q, workspace, stream); });
  expect_rejected(
      [&] { cuda::reduce_dequantize({}, config, 1.0f, view(std::span<float>(values)), workspace, stream); });
  // Output blocks differ from the input blocks.
  expect_rejected([&] {
    cuda::reduce_requantize(one, config, 100, 1.0f, quant_config{8, 128, true}, q, workspace, stream);
  });
  // 100 elements need 2 blocks; 200 need 4.
  std::vector<float> longer(200);
  expect_rejected([&] { cuda::dequantize_accumulate(one[0], config, longer, stream); });
  expect_rejected(
      [&] { cuda::reduce_dequantize(one, config, 1.0f, view(std::span<float>(longer)), workspace, stream); });
  // A workspace too small for the sums.
  expect_rejected([&] {
    cuda::reduce_requantize(one, config, 100, 1.0f, config, q, std::span(workspace).first(workspace.size() - 4),
                            stream);
  });
  // 2 blocks do not split over 3 ranks; input and output the same buffer.
  expect_rejected([&] { cuda::swizzle(q, config, topology{3, 1}, q, stream); });
  expect_rejected([&] { cuda::unswizzle(q, config, topology{1, 2}, q, stream); });
  // Null data, null result.
  expect_rejected(
      [&] { cuda::sum_of_squares(const_tensor_view(dtype::fp32, nullptr, 4), nullptr, workspace, stream); });
  double result = 0.0;
  expect_rejected(
      [&] { cuda::sum_of_squares(const_tensor_view(dtype::fp32, nullptr, 4), &result, workspace, stream); });
  // 100 elements added to 200.
  expect_rejected([&] { cuda::accumulate(view(std::span<const float>(values)), longer, stream); });
  // No workspace for the partials.
  expect_rejected([&] { cuda::sum_of_squares(view(std::span<const float>(values)), &result, {}, stream); });
}

}  // namespace
}  // namespace zoe::kernels
