/* leaf_tree.c: the pairwise tree over a batch's row leaves (leaf_tree.h). */
#include "leaf_tree.h"

#include <stdint.h>

/* One pending run per level of a size_t leaf index. */
#define ZOE_MLP_TREE_LEVELS (sizeof(size_t) * 8)

size_t mlp_tree_leaves(size_t rows) { return (rows + ZOE_MLP_LEAF_ROWS - 1) / ZOE_MLP_LEAF_ROWS; }

size_t mlp_leaf_rows(size_t rows, size_t leaf, size_t* first) {
  *first = leaf * ZOE_MLP_LEAF_ROWS;
  return rows - *first < ZOE_MLP_LEAF_ROWS ? rows - *first : ZOE_MLP_LEAF_ROWS;
}

size_t mlp_tree_slots(size_t leaves) {
  size_t bits = 0;
  for (size_t v = leaves > 0 ? leaves - 1 : 0; v != 0; v >>= 1) ++bits;
  return bits;
}

int mlp_tree_sum(size_t leaves, const mlp_tree_ops* ops, void* ctx) {
  size_t run[ZOE_MLP_TREE_LEVELS];                  /* run[k]: the slot of the pending run of 2^k leaves */
  unsigned char pending[ZOE_MLP_TREE_LEVELS] = {0}; /* run[k] is set */
  size_t spare[ZOE_MLP_TREE_LEVELS];                /* free scratch slots */
  size_t spares = mlp_tree_slots(leaves);
  for (size_t s = 0; s < spares; ++s) spare[s] = spares - 1 - s;
  for (size_t i = 0; i < leaves; ++i) {
    /* Leaf 0 heads every run it is in, so its slot is the output. A free slot always exists: the
     * pending runs without leaf 0 are at most bit_width(leaves - 1) - 1 when a leaf is computed. */
    size_t slot = i == 0 ? ZOE_MLP_TREE_OUT : spare[--spares];
    int rc = ops->leaf(ctx, i, slot);
    if (rc != 0) return rc;
    size_t k = 0;
    for (; ((i >> k) & 1U) != 0; ++k) {
      rc = ops->add(ctx, run[k], slot);
      if (rc != 0) return rc;
      spare[spares++] = slot;
      slot = run[k];
      pending[k] = 0;
    }
    run[k] = slot;
    pending[k] = 1;
  }
  int have_tail = 0;
  size_t tail = 0;
  for (size_t k = 0; k < ZOE_MLP_TREE_LEVELS; ++k) {
    if (!pending[k]) continue;
    if (have_tail) {
      const int rc = ops->add(ctx, run[k], tail);
      if (rc != 0) return rc;
    }
    tail = run[k];
    have_tail = 1;
  }
  return 0;
}

size_t mlp_grad_scratch_floats(size_t rows, size_t hidden) {
  return mlp_tree_slots(mlp_tree_leaves(rows)) * (hidden * hidden + hidden);
}

float* mlp_grad_slot_w(const mlp_grad_slots* s, size_t slot) {
  return slot == ZOE_MLP_TREE_OUT ? s->dw : s->scratch + slot * (s->hidden * s->hidden + s->hidden);
}

float* mlp_grad_slot_b(const mlp_grad_slots* s, size_t slot) {
  return slot == ZOE_MLP_TREE_OUT ? s->db : mlp_grad_slot_w(s, slot) + s->hidden * s->hidden;
}

/* mlp_tree_sum_rows: the slots are doubles in here. */
typedef struct rows_tree {
  const double* values;
  size_t rows;
  size_t hidden;
  double out;
  double slot[ZOE_MLP_TREE_LEVELS];
} rows_tree;

static double* rows_slot(rows_tree* t, size_t slot) { return slot == ZOE_MLP_TREE_OUT ? &t->out : &t->slot[slot]; }

static int rows_leaf(void* ctx, size_t leaf, size_t slot) {
  rows_tree* t = ctx;
  size_t first = 0;
  const size_t count = mlp_leaf_rows(t->rows, leaf, &first) * t->hidden;
  const double* v = t->values + first * t->hidden;
  double s = 0.0;
  for (size_t i = 0; i < count; ++i) s += v[i];
  *rows_slot(t, slot) = s;
  return 0;
}

static int rows_add(void* ctx, size_t left, size_t right) {
  rows_tree* t = ctx;
  *rows_slot(t, left) += *rows_slot(t, right);
  return 0;
}

double mlp_tree_sum_rows(const double* values, size_t rows, size_t hidden) {
  static const mlp_tree_ops ops = {rows_leaf, rows_add};
  rows_tree t;
  t.values = values;
  t.rows = rows;
  t.hidden = hidden;
  t.out = 0.0;
  const size_t leaves = mlp_tree_leaves(rows);
  if (leaves > 0) (void)mlp_tree_sum(leaves, &ops, &t);
  return t.out;
}
