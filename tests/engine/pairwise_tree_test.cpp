// engine/comm: the pairwise tree of zoe's cross-rank sums (pairwise_tree.hpp) has the shape its
// definition gives (stride doubling, odd ones carried up) for powers of two and for 3, 5, 6 and 7
// terms, a sum split into aligned power-of-two runs adds up to the same bits as the whole, and the
// mpi backend's reduction (tree_order_reduce.hpp) adds fp32 and fp16 blocks of 3 and 5 ranks in that
// tree, written out as explicit expressions.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tree_order_reduce.hpp"
#include "zoe/engine/comm/pairwise_tree.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::engine {
namespace {

// The tree as text: term i is "i", a sum is "(left+right)".
std::string shape(std::size_t n) {
  return pairwise_tree_sum<std::string>(
      n, [](std::size_t i) { return std::to_string(i); },
      [](std::string& left, std::string&& right) { left = "(" + left + "+" + right + ")"; });
}

TEST(PairwiseTree, ShapeIsStrideDoublingWithOddOnesCarriedUp) {
  EXPECT_EQ(shape(1), "0");
  EXPECT_EQ(shape(2), "(0+1)");
  EXPECT_EQ(shape(3), "((0+1)+2)");
  EXPECT_EQ(shape(4), "((0+1)+(2+3))");
  EXPECT_EQ(shape(5), "(((0+1)+(2+3))+4)");
  EXPECT_EQ(shape(6), "(((0+1)+(2+3))+(4+5))");
  EXPECT_EQ(shape(7), "(((0+1)+(2+3))+((4+5)+6))");
  EXPECT_EQ(shape(8), "(((0+1)+(2+3))+((4+5)+(6+7)))");
}

// Values whose sums round differently in different trees.
float term(std::size_t i) {
  return 1.0F + static_cast<float>(i * 2654435761U % 1000003U) * 1e-7F * static_cast<float>(1 + i % 5);
}

float tree_of(std::size_t first, std::size_t n) {
  return pairwise_tree_sum<float>(
      n, [first](std::size_t i) { return term(first + i); }, [](float& left, float&& right) { left += right; });
}

TEST(PairwiseTree, AlignedPowerOfTwoRunsSumToTheWholeBitForBit) {
  // 16 terms: one run of 16, 2 of 8, 4 of 4, 8 of 2: each run's tree sum, then the tree over the runs.
  const float whole = tree_of(0, 16);
  for (std::size_t runs : {2U, 4U, 8U, 16U}) {
    const std::size_t each = 16 / runs;
    const float split = pairwise_tree_sum<float>(
        runs, [each](std::size_t r) { return tree_of(r * each, each); },
        [](float& left, float&& right) { left += right; });
    EXPECT_EQ(split, whole) << runs << " runs";
  }
  // The chain it replaced would not do: the test's values are ones where grouping matters.
  float chain = 0.0F;
  for (std::size_t i = 0; i < 16; ++i) chain += term(i);
  EXPECT_NE(chain, whole);
}

TEST(TreeOrderReduce, ThreeAndFiveRanksOfFp32AddInTheTree) {
  const std::size_t count = 64;
  std::vector<std::vector<float>> r(5, std::vector<float>(count));
  for (std::size_t q = 0; q < 5; ++q) {
    for (std::size_t i = 0; i < count; ++i) r[q][i] = term(q * 131 + i * 17) * (q % 2 == 0 ? 1.0F : -0.999F);
  }
  const std::vector<const void*> blocks{r[0].data(), r[1].data(), r[2].data(), r[3].data(), r[4].data()};
  std::vector<float> three(count);
  std::vector<float> five(count);
  std::vector<float> five_mean(count);
  detail::reduce_in_tree_order(std::span(blocks).first(3), three.data(), count, kernels::dtype::fp32, reduce_op::sum);
  detail::reduce_in_tree_order(blocks, five.data(), count, kernels::dtype::fp32, reduce_op::sum);
  detail::reduce_in_tree_order(blocks, five_mean.data(), count, kernels::dtype::fp32, reduce_op::mean);
  for (std::size_t i = 0; i < count; ++i) {
    const float want3 = (r[0][i] + r[1][i]) + r[2][i];
    const float want5 = ((r[0][i] + r[1][i]) + (r[2][i] + r[3][i])) + r[4][i];
    EXPECT_EQ(three[i], want3) << i;
    EXPECT_EQ(five[i], want5) << i;
    EXPECT_EQ(five_mean[i], want5 / 5.0F) << i;
  }
}

TEST(TreeOrderReduce, FiveRanksOfFp16AccumulateInFp32AndRoundOnce) {
  const std::size_t count = 32;
  std::vector<std::vector<std::uint16_t>> r(5, std::vector<std::uint16_t>(count));
  std::vector<std::vector<float>> wide(5, std::vector<float>(count));
  for (std::size_t q = 0; q < 5; ++q) {
    for (std::size_t i = 0; i < count; ++i) {
      r[q][i] = kernels::fp16_from_float(term(q * 37 + i * 5) * static_cast<float>(q + 1));
      wide[q][i] = kernels::float_from_fp16(r[q][i]);
    }
  }
  const std::vector<const void*> blocks{r[0].data(), r[1].data(), r[2].data(), r[3].data(), r[4].data()};
  std::vector<std::uint16_t> out(count);
  detail::reduce_in_tree_order(blocks, out.data(), count, kernels::dtype::fp16, reduce_op::sum);
  for (std::size_t i = 0; i < count; ++i) {
    const float want = ((wide[0][i] + wide[1][i]) + (wide[2][i] + wide[3][i])) + wide[4][i];
    EXPECT_EQ(out[i], kernels::fp16_from_float(want)) << i;
  }
}

}  // namespace
}  // namespace zoe::engine
