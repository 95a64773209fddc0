/* leaf_tree.h: how the demo sums a gradient over the rows of a batch so that the bits do not depend
 * on how the global batch is split over ranks. The rows are cut into leaves of ZOE_MLP_LEAF_ROWS rows
 * counted from the call's first row (a rank's first row is a multiple of the leaf whenever its row
 * count is, so the leaves are the same rows of the global batch on every split); each leaf is summed
 * on its own (one GEMM of k = its rows, one column sum row by row), and the leaves' sums are added in
 * zoe's pairwise tree over the leaf index, the tree zoe's cross-rank reductions use
 * (zoe/engine/comm/pairwise_tree.hpp): level by level adjacent pairs, an odd one out carried up
 * unpaired, so 4 leaves give ((l0 + l1) + (l2 + l3)), 3 give ((l0 + l1) + l2), 5 give
 * (((l0 + l1) + (l2 + l3)) + l4). One rank of 4 leaves then adds exactly what 4 ranks of 1 leaf
 * add before zoe's reduction adds the ranks' sums ((r0 + r1) + (r2 + r3)): the same bits whenever the
 * rank count and the leaves per rank are powers of two (each rank's rows a multiple of the leaf).
 * Written once here and used by compute_host.c (CBLAS), compute_cuda.c (cuBLAS and a kernel) and the
 * loss's sums. The products whose rows are independent (the forward's x W^T, the backward's dz W)
 * run one GEMM per leaf too: BLAS libraries pick their kernels, and with them the order of each
 * dot product's additions, by the matrix shape, so a row's bits are only the same on every split
 * when every GEMM has the same shape. */
#ifndef ZOE_DEMO_LEAF_TREE_H
#define ZOE_DEMO_LEAF_TREE_H

#include <stddef.h>
#include <stdint.h>

/* Rows of one leaf. 128: a rank's rows must be whole leaves for the bits to match across splits
 * (issue 13's run, batch 512 on 4 ranks, gives 128 a rank), and smaller leaves cost time: each leaf
 * GEMM repacks W (forward, dx) or writes a whole hidden x hidden dW, then one add per leaf. On 1024
 * wide layers, one thread of OpenBLAS, a layer's three GEMMs over 512 rows measured 53 ms as one
 * call each, 66 ms as 4 leaves of 128, 87 ms as 8 leaves of 64. */
#define ZOE_MLP_LEAF_ROWS 128

/* The caller's output, as a slot number: leaf 0 is computed straight into it and every add whose
 * left operand holds leaf 0 lands in it, so the result needs no final copy. */
#define ZOE_MLP_TREE_OUT SIZE_MAX

/* A backend's part: slots 0 .. mlp_tree_slots(leaves) - 1 are its scratch buffers, ZOE_MLP_TREE_OUT the
 * output. Each returns 0, or nonzero to stop the sum (its own message printed). */
typedef struct mlp_tree_ops {
  /* slot = the sum of leaf `leaf`'s rows: [leaf * ZOE_MLP_LEAF_ROWS, min(rows, (leaf + 1) * ZOE_MLP_LEAF_ROWS)). */
  int (*leaf)(void* ctx, size_t leaf, size_t slot);
  /* slot `left` = slot `left` + slot `right`, element by element (mlp_math.h's mlp_add). */
  int (*add)(void* ctx, size_t left, size_t right);
} mlp_tree_ops;

/* Leaves of `rows` rows (the last one shorter when ZOE_MLP_LEAF_ROWS does not divide rows); 0 for 0. */
size_t mlp_tree_leaves(size_t rows);

/* Leaf `leaf` of `rows` rows: its first row in *first, its row count returned. */
size_t mlp_leaf_rows(size_t rows, size_t leaf, size_t* first);

/* Scratch slots mlp_tree_sum needs for `leaves` leaves: bit_width(leaves - 1), at most one partial
 * per level of the tree besides the output (0 for one leaf). */
size_t mlp_tree_slots(size_t leaves);

/* The output = the pairwise tree sum of leaves 0 .. leaves - 1 (leaves > 0), by a binary-counter
 * merge: leaf i is merged with the pending runs of 1, 2, 4, ... leaves before it while bit 0, 1,
 * 2, ... of i is set; the runs left at the end (one per set bit of `leaves`, the largest first) are
 * folded from the smallest up, each the right operand of the run before it. That is the stride-
 * doubling tree above for every leaf count, with one run pending per level. Returns 0, or the
 * first nonzero an op returned. */
int mlp_tree_sum(size_t leaves, const mlp_tree_ops* ops, void* ctx);

/* One backward's gradient tree, alike on every backend: its inputs x and dz (rows x hidden), the
 * output (dw, db), and scratch slot s at scratch + s * (hidden * hidden + hidden) floats, a leaf's
 * dW then its db. */
typedef struct mlp_grad_slots {
  const float* x;
  const float* dz;
  size_t rows;
  float* dw;
  float* db;
  float* scratch;
  size_t hidden;
} mlp_grad_slots;

/* Floats of scratch the gradient tree over `rows` rows needs: mlp_tree_slots slots of dW and db. */
size_t mlp_grad_scratch_floats(size_t rows, size_t hidden);
/* Slot `slot`'s dW (hidden x hidden) and db (hidden). */
float* mlp_grad_slot_w(const mlp_grad_slots* s, size_t slot);
float* mlp_grad_slot_b(const mlp_grad_slots* s, size_t slot);

/* The sum of `rows` x `hidden` doubles (row-major; a loss's squared differences): each leaf's
 * elements added in order from 0.0, the leaves' sums in the pairwise tree; 0.0 for no rows. */
double mlp_tree_sum_rows(const double* values, size_t rows, size_t hidden);

#endif /* ZOE_DEMO_LEAF_TREE_H */
