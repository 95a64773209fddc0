/* compute_host.c: the layer arithmetic on host memory with OpenBLAS's CBLAS; the elementwise parts
 * come from mlp_math.h. Used by the host device's path and by the reference trainer, so both do
 * exactly the same operations in the same order. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

#include "compute.h"
#include "data.h"
#include "leaf_tree.h"
#include "mlp_math.h"

static int host_inputs(mlp_compute* c, float* x, uint64_t seed, uint64_t step, uint64_t row0, size_t rows,
                       size_t hidden) {
  (void)c;
  mlp_data_inputs(x, seed, step, row0, rows, hidden);
  return 0;
}

static int host_forward(mlp_compute* c, const float* x, const float* w, const float* b, float* y, size_t rows,
                        size_t hidden, int relu) {
  (void)c;
  const int n = (int)hidden;
  /* One GEMM a leaf, so that every split of the batch runs GEMMs of the same shape (leaf_tree.h). */
  for (size_t leaf = 0; leaf < mlp_tree_leaves(rows); ++leaf) {
    size_t r0 = 0;
    const size_t m = mlp_leaf_rows(rows, leaf, &r0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, n, n, 1.0f, x + r0 * hidden, n, w, n, 0.0f,
                y + r0 * hidden, n);
  }
  for (size_t r = 0; r < rows; ++r) {
    float* row = y + r * hidden;
    for (size_t j = 0; j < hidden; ++j) row[j] = mlp_bias_act(row[j], b[j], relu);
  }
  return 0;
}

/* One loss's leaves: each leaf's squared differences added in order in double (its dy written on
 * the way), the leaves' sums added in the leaf tree (leaf_tree.h), as the gradients are. */
typedef struct host_loss_leaves {
  const float* y;
  float* dy;
  uint64_t seed;
  uint64_t step;
  uint64_t row0;
  size_t rows;
  size_t hidden;
  float coef;
} host_loss_leaves;

static double host_loss_leaf(void* ctx, size_t leaf) {
  const host_loss_leaves* l = ctx;
  size_t first = 0;
  const size_t rows = mlp_leaf_rows(l->rows, leaf, &first);
  const size_t end = first + rows;
  double s = 0.0;
  for (size_t r = first; r < end; ++r) {
    for (size_t j = 0; j < l->hidden; ++j) {
      const size_t i = r * l->hidden + j;
      const float d = mlp_mse_diff(l->y[i], mlp_target(l->seed, l->step, l->row0 + r, j, l->hidden));
      s += (double)d * (double)d;
      l->dy[i] = mlp_mse_grad(d, l->coef);
    }
  }
  return s;
}

static int host_loss(mlp_compute* c, const float* y, float* dy, uint64_t seed, uint64_t step, uint64_t row0,
                     size_t rows, size_t hidden, float coef, double* sum_sq) {
  (void)c;
  host_loss_leaves l = {y, dy, seed, step, row0, rows, hidden, coef};
  *sum_sq = mlp_tree_sum_doubles(mlp_tree_leaves(rows), host_loss_leaf, &l);
  return 0;
}

/* The host backend: the ops and the leaf tree's scratch (compute.h's backward). */
typedef struct host_compute {
  mlp_compute base; /* first: a host_compute* is an mlp_compute* */
  float* scratch;   /* mlp_tree_slots slots of hidden * hidden + hidden floats: a leaf's dW, then its db */
  size_t scratch_floats;
} host_compute;

/* One backward's leaf tree: dW and db over the leaves of dz's rows (leaf_tree.h). */
typedef struct host_grads {
  const float* x;
  const float* dz;
  float* dw;
  float* db;
  float* scratch;
  size_t rows;
  size_t hidden;
} host_grads;

static float* host_slot_w(host_grads* g, size_t slot) {
  return slot == MLP_TREE_OUT ? g->dw : g->scratch + slot * (g->hidden * g->hidden + g->hidden);
}

static float* host_slot_b(host_grads* g, size_t slot) {
  return slot == MLP_TREE_OUT ? g->db : host_slot_w(g, slot) + g->hidden * g->hidden;
}

static int host_grads_leaf(void* ctx, size_t leaf, size_t slot) {
  host_grads* g = ctx;
  const size_t h = g->hidden;
  size_t r0 = 0;
  const size_t m = mlp_leaf_rows(g->rows, leaf, &r0);
  const float* dz = g->dz + r0 * h;
  float* dw = host_slot_w(g, slot);
  float* db = host_slot_b(g, slot);
  const int n = (int)h;
  /* dW[out][in] = sum over the leaf's rows of dz[r][out] * x[r][in]. */
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, n, (int)m, 1.0f, dz, n, g->x + r0 * h, n, 0.0f, dw, n);
  /* mlp_bias_grad's sums, each column added row by row in the same order, but walked row-major. */
  for (size_t j = 0; j < h; ++j) db[j] = 0.0f;
  for (size_t r = 0; r < m; ++r) {
    for (size_t j = 0; j < h; ++j) db[j] += dz[r * h + j];
  }
  return 0;
}

static int host_grads_add(void* ctx, size_t left, size_t right) {
  host_grads* g = ctx;
  const size_t hh = g->hidden * g->hidden;
  float* lw = host_slot_w(g, left);
  const float* rw = host_slot_w(g, right);
  for (size_t i = 0; i < hh; ++i) lw[i] = mlp_add(lw[i], rw[i]);
  float* lb = host_slot_b(g, left);
  const float* rb = host_slot_b(g, right);
  for (size_t j = 0; j < g->hidden; ++j) lb[j] = mlp_add(lb[j], rb[j]);
  return 0;
}

static int host_backward(mlp_compute* c, const float* x, const float* w, const float* dz, float* dw, float* db,
                         float* dx, size_t rows, size_t hidden) {
  static const mlp_tree_ops grad_tree = {host_grads_leaf, host_grads_add};
  host_compute* k = (host_compute*)c;
  const int n = (int)hidden;
  const size_t leaves = mlp_tree_leaves(rows);
  const size_t floats = mlp_tree_slots(leaves) * (hidden * hidden + hidden);
  if (floats > k->scratch_floats) {
    free(k->scratch);
    k->scratch = malloc(floats * sizeof(float));
    k->scratch_floats = k->scratch != NULL ? floats : 0;
    if (k->scratch == NULL) {
      fprintf(stderr, "zoe-train-mlp: out of memory for the gradient tree's %zu floats\n", floats);
      return -1;
    }
  }
  if (leaves > 0) {
    host_grads g = {x, dz, dw, db, k->scratch, rows, hidden};
    if (mlp_tree_sum(leaves, &grad_tree, &g) != 0) return -1;
  }
  if (dx == NULL) return 0;
  for (size_t leaf = 0; leaf < leaves; ++leaf) {
    size_t r0 = 0;
    const size_t m = mlp_leaf_rows(rows, leaf, &r0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, n, n, 1.0f, dz + r0 * hidden, n, w, n, 0.0f,
                dx + r0 * hidden, n);
  }
  return 0;
}

static int host_relu_grad(mlp_compute* c, float* d, const float* y, size_t n) {
  (void)c;
  for (size_t i = 0; i < n; ++i) d[i] = mlp_relu_grad(d[i], y[i]);
  return 0;
}

static void host_destroy(mlp_compute* c) {
  host_compute* k = (host_compute*)c;
  if (k != NULL) free(k->scratch);
  free(k);
}

static const mlp_compute_ops host_ops = {
    "host (OpenBLAS CBLAS)", 1, host_inputs, host_forward, host_loss, host_backward, host_relu_grad, host_destroy};

mlp_compute* mlp_compute_host_create(void) {
  host_compute* k = calloc(1, sizeof *k);
  if (k == NULL) return NULL;
  k->base.ops = &host_ops;
  return &k->base;
}
