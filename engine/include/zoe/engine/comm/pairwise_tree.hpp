#pragma once
// The one order in which zoe adds a value from each of n ranks (every cross-rank reduction of the
// mpi backend, the step's global gradient summary, zoe_all_reduce_sum): a pairwise tree in index
// order. Its point is that the tree does not depend on how a sum is split: when n is a power of two
// and the terms are cut into aligned power-of-two runs, the tree over the runs' tree sums is the tree
// over all the terms. So a global batch split over 1, 2 or 4 ranks, each rank summing its rows' leaves
// by this tree (as zoe-train-mlp does) and the ranks' sums reduced by it, gives the same bits.

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

namespace zoe::engine {

/// The sum of terms 0..n-1 (n > 0) in the pairwise tree defined by stride doubling: level by level,
/// adjacent pairs are added ((t0 + t1), (t2 + t3), ...), an odd one out at the end of a level is
/// carried up unpaired, until one value is left. So 4 terms give ((t0 + t1) + (t2 + t3)), 3 give
/// ((t0 + t1) + t2), 5 give (((t0 + t1) + (t2 + t3)) + t4), 7 give
/// (((t0 + t1) + (t2 + t3)) + ((t4 + t5) + t6)).
/// Built by a binary-counter merge, which gives exactly that tree while holding one partial per
/// level (at most bit_width(n) + 1 values at once): term i is merged with the pending runs of 1, 2,
/// 4, ... terms before it while bit 0, 1, 2, ... of i is set; the runs left at the end (one per set
/// bit of n, the largest first) are folded from the smallest up, each the right operand of the run
/// before it, which is how stride doubling carries odd ones out.
/// `term(i)` returns term i as a T; `add(T& left, T&& right)` sets left = left + right. Only the
/// tree matters to the bits (floating-point addition is commutative), but the left operand is
/// always the earlier run. Throws what term and add throw.
template <class T, class Term, class Add>
[[nodiscard]] T pairwise_tree_sum(std::size_t n, Term&& term, Add&& add) {
  std::vector<std::optional<T>> runs;  // runs[k]: the sum of the latest complete run of 2^k terms, if pending
  for (std::size_t i = 0; i < n; ++i) {
    T sum = term(i);
    std::size_t k = 0;
    for (; ((i >> k) & 1U) != 0; ++k) {
      add(*runs[k], std::move(sum));
      sum = std::move(*runs[k]);
      runs[k].reset();
    }
    if (runs.size() <= k) runs.resize(k + 1);
    runs[k] = std::move(sum);
  }
  std::optional<T> tail;
  for (std::optional<T>& run : runs) {
    if (!run) continue;
    if (tail) add(*run, std::move(*tail));
    tail = std::move(run);
  }
  return std::move(*tail);
}

}  // namespace zoe::engine
