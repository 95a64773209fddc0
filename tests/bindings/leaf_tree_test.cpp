// zoe-train-mlp's leaf tree (bindings/demo/leaf_tree.c, C): the tree it builds over a batch's row
// leaves is the stride-doubling tree written out for 3 and 5 leaves, the same tree as the engine's
// pairwise_tree_sum (what the ranks' reduction uses) for every count up to 70, within the scratch
// slots it asks for; and the loss's row sums add each leaf in order, the leaves in that tree.
#include <cstddef>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "zoe/engine/comm/pairwise_tree.hpp"

extern "C" {
#include "leaf_tree.h"
}

namespace {

// Slots of text: a leaf is its number, an add "(left+right)"; counts the slots it is handed.
struct text_slots {
  std::vector<std::string> slot;
  std::string out;
  bool outside = false;  // a slot at or past mlp_tree_slots was used
  std::string& at(std::size_t s) {
    if (s == ZOE_MLP_TREE_OUT) return out;
    if (s >= slot.size()) {
      outside = true;
      slot.resize(s + 1);
    }
    return slot[s];
  }
};

int text_leaf(void* ctx, std::size_t leaf, std::size_t slot) {
  static_cast<text_slots*>(ctx)->at(slot) = std::to_string(leaf);
  return 0;
}

int text_add(void* ctx, std::size_t left, std::size_t right) {
  auto* t = static_cast<text_slots*>(ctx);
  const std::string r = t->at(right);
  std::string& l = t->at(left);
  l = "(" + l + "+" + r + ")";
  return 0;
}

std::string demo_shape(std::size_t leaves) {
  const mlp_tree_ops ops = {text_leaf, text_add};
  text_slots t;
  t.slot.resize(mlp_tree_slots(leaves));
  EXPECT_EQ(mlp_tree_sum(leaves, &ops, &t), 0);
  EXPECT_FALSE(t.outside) << leaves << " leaves used more than mlp_tree_slots' " << mlp_tree_slots(leaves);
  return t.out;
}

std::string engine_shape(std::size_t n) {
  return zoe::engine::pairwise_tree_sum<std::string>(
      n, [](std::size_t i) { return std::to_string(i); },
      [](std::string& left, std::string&& right) { left = "(" + left + "+" + right + ")"; });
}

TEST(LeafTree, ThreeAndFiveLeavesAddInTheWrittenOutTree) {
  EXPECT_EQ(demo_shape(1), "0");
  EXPECT_EQ(demo_shape(3), "((0+1)+2)");
  EXPECT_EQ(demo_shape(5), "(((0+1)+(2+3))+4)");
  EXPECT_EQ(demo_shape(8), "(((0+1)+(2+3))+((4+5)+(6+7)))");
}

TEST(LeafTree, SameTreeAsTheEngineReductionWithinItsScratch) {
  for (std::size_t n = 1; n <= 70; ++n) EXPECT_EQ(demo_shape(n), engine_shape(n)) << n << " leaves";
}

TEST(LeafTree, LeavesOfTheBatchRows) {
  std::size_t first = 0;
  EXPECT_EQ(mlp_tree_leaves(0), 0U);
  EXPECT_EQ(mlp_tree_leaves(ZOE_MLP_LEAF_ROWS), 1U);
  EXPECT_EQ(mlp_tree_leaves(ZOE_MLP_LEAF_ROWS * 2 + 1), 3U);
  EXPECT_EQ(mlp_leaf_rows(ZOE_MLP_LEAF_ROWS * 2 + 1, 2, &first), 1U);
  EXPECT_EQ(first, ZOE_MLP_LEAF_ROWS * 2U);
}

TEST(LeafTree, RowSumsAddEachLeafInOrderAndTheLeavesInTheTree) {
  // 5 leaves of 2 columns (the last leaf one row): values whose sums depend on the grouping.
  const std::size_t hidden = 2;
  const std::size_t rows = 4 * ZOE_MLP_LEAF_ROWS + 1;
  std::vector<double> v(rows * hidden);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (i % 7 == 0 ? 1e16 : 1.0) + static_cast<double>(i % 3) * 0.1;
  std::vector<double> leaf(5, 0.0);
  for (std::size_t l = 0; l < 5; ++l) {
    for (std::size_t i = l * ZOE_MLP_LEAF_ROWS * hidden; i < std::min(rows, (l + 1) * ZOE_MLP_LEAF_ROWS) * hidden;
         ++i) {
      leaf[l] += v[i];
    }
  }
  const double want = ((leaf[0] + leaf[1]) + (leaf[2] + leaf[3])) + leaf[4];
  EXPECT_EQ(mlp_tree_sum_rows(v.data(), rows, hidden), want);
  EXPECT_EQ(mlp_tree_sum_rows(v.data(), 0, hidden), 0.0);
}

}  // namespace
