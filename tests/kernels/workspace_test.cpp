// Workspaces: the CPU entry points take the workspace the CUDA launchers take, check it the same
// way, and give the same results with it as without.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "zoe/core/error.hpp"
#include "zoe/kernels/cast.hpp"
#include "zoe/kernels/cuda.hpp"
#include "zoe/kernels/quantize.hpp"

namespace zoe::kernels {
namespace {

TEST(workspace, SizesCoverWhatEachPathKeepsInIt) {
  EXPECT_EQ(sum_of_squares_workspace(0), 0U);
  EXPECT_EQ(sum_of_squares_workspace(1), sizeof(double));
  EXPECT_EQ(sum_of_squares_workspace(std::size_t{1} << 16), sizeof(double));
  EXPECT_EQ(sum_of_squares_workspace((std::size_t{1} << 16) + 1), 2 * sizeof(double));
  EXPECT_EQ(cuda::sum_of_squares_workspace(3 << 16), 3 * sizeof(double));
  EXPECT_EQ(cuda::reduce_requantize_workspace(1000), 1000 * sizeof(float));
  EXPECT_EQ(cuda::reduce_dequantize_workspace(32, 1000), 0U) << "32 inputs fit one launch";
  EXPECT_EQ(cuda::reduce_dequantize_workspace(33, 1000), 1000 * sizeof(float));
  EXPECT_EQ(reduce_requantize_workspace(1000), 0U) << "the CPU reduces a block at a time";
}

TEST(workspace, SumOfSquaresGivesTheSameBitsWithALentWorkspaceAndRefusesASmallOne) {
  std::vector<float> x(200'000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 977) * 0.001f - 0.3f;
  const const_tensor_view v = view(std::span<const float>(x));
  std::vector<double> partials(sum_of_squares_workspace(x.size()) / sizeof(double));
  const std::span<std::byte> lent = std::as_writable_bytes(std::span<double>(partials));
  EXPECT_EQ(sum_of_squares(v, lent), sum_of_squares(v));
  EXPECT_THROW((void)sum_of_squares(v, lent.first(lent.size() - 1)), usage_error);
  EXPECT_THROW((void)sum_of_squares(v, lent.subspan(4, lent.size() - 8)), usage_error) << "misaligned";
}

TEST(workspace, TheReductionsTakeTheWorkspaceParameterOnTheCpuToo) {
  const quant_config config{8, 64, true};
  std::vector<float> values(128, 0.5f);
  std::vector<std::byte> codes(config.code_bytes(values.size()));
  std::vector<float> scales(config.blocks(values.size()));
  const quantized_span q{codes, scales, {}};
  quantize(view(std::span<const float>(values)), config, q);
  const std::array<const_quantized_span, 2> inputs{const_quantized_span(q), const_quantized_span(q)};
  std::vector<float> reduced(values.size());
  reduce_dequantize(inputs, config, 0.5f, view(std::span<float>(reduced)), {});
  EXPECT_EQ(reduced, values);
  std::vector<std::byte> out_codes(codes.size());
  std::vector<float> out_scales(scales.size());
  reduce_requantize(inputs, config, values.size(), 0.5f, config, {out_codes, out_scales, {}}, {});
  EXPECT_EQ(out_codes, codes);
  EXPECT_EQ(out_scales, scales);
}

}  // namespace
}  // namespace zoe::kernels
