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

/* The host backend: the ops and its scratch, grown as needed and kept. */
typedef struct host_compute {
  mlp_compute base; /* first: a host_compute* is an mlp_compute* */
  void* scratch;    /* mlp_tree_slots slots of hidden * hidden + hidden floats: a leaf's dW, then its db */
  size_t scratch_floats;
  void* sq; /* the loss's doubles: each element's squared difference, summed by mlp_tree_sum_rows */
  size_t sq_count;
} host_compute;

/* *p holds at least `count` elements of `size` bytes (its old contents lost); 0, or -1 with a message. */
static int host_grow(void** p, size_t* have, size_t count, size_t size, const char* what) {
  if (count <= *have) return 0;
  free(*p);
  *p = malloc(count * size);
  *have = *p != NULL ? count : 0;
  if (*p != NULL) return 0;
  fprintf(stderr, "zoe-train-mlp: out of memory for %zu elements of %s\n", count, what);
  return -1;
}

/* out = in op(W) for `rows` rows, one GEMM a leaf, so that every split of the batch runs GEMMs of the
 * same shape (leaf_tree.h): the forward's y = x W^T (op Trans) and the backward's dx = dz W (op NoTrans). */
static void host_rows_gemm(enum CBLAS_TRANSPOSE op, const float* w, const float* in, float* out, size_t rows,
                           size_t hidden) {
  const int n = (int)hidden;
  for (size_t leaf = 0; leaf < mlp_tree_leaves(rows); ++leaf) {
    size_t r0 = 0;
    const size_t m = mlp_leaf_rows(rows, leaf, &r0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, op, (int)m, n, n, 1.0f, in + r0 * hidden, n, w, n, 0.0f, out + r0 * hidden,
                n);
  }
}

static int host_inputs(mlp_compute* c, float* x, uint64_t seed, uint64_t step, uint64_t row0, size_t rows,
                       size_t hidden) {
  (void)c;
  mlp_data_inputs(x, seed, step, row0, rows, hidden);
  return 0;
}

static int host_forward(mlp_compute* c, const float* x, const float* w, const float* b, float* y, size_t rows,
                        size_t hidden, int relu) {
  (void)c;
  host_rows_gemm(CblasTrans, w, x, y, rows, hidden);
  for (size_t r = 0; r < rows; ++r) {
    float* row = y + r * hidden;
    for (size_t j = 0; j < hidden; ++j) row[j] = mlp_bias_act(row[j], b[j], relu);
  }
  return 0;
}

static int host_loss(mlp_compute* c, const float* y, float* dy, uint64_t seed, uint64_t step, uint64_t row0,
                     size_t rows, size_t hidden, float coef, double* sum_sq) {
  host_compute* k = (host_compute*)c;
  const size_t n = rows * hidden;
  if (host_grow(&k->sq, &k->sq_count, n, sizeof(double), "the loss's squares") != 0) return -1;
  double* sq = k->sq;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < hidden; ++j) {
      const size_t i = r * hidden + j;
      const float d = mlp_mse_diff(y[i], mlp_target(seed, step, row0 + r, j, hidden));
      sq[i] = (double)d * (double)d;
      dy[i] = mlp_mse_grad(d, coef);
    }
  }
  *sum_sq = mlp_tree_sum_rows(sq, rows, hidden);
  return 0;
}

/* One backward's leaf tree (leaf_tree.h): the context is an mlp_grad_slots. */
static int host_grads_leaf(void* ctx, size_t leaf, size_t slot) {
  const mlp_grad_slots* g = ctx;
  const size_t h = g->hidden;
  size_t r0 = 0;
  const size_t m = mlp_leaf_rows(g->rows, leaf, &r0);
  const float* dz = g->dz + r0 * h;
  float* dw = mlp_grad_slot_w(g, slot);
  float* db = mlp_grad_slot_b(g, slot);
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
  const mlp_grad_slots* g = ctx;
  const size_t h = g->hidden;
  float* lw = mlp_grad_slot_w(g, left);
  const float* rw = mlp_grad_slot_w(g, right);
  for (size_t i = 0; i < h * h; ++i) lw[i] = mlp_add(lw[i], rw[i]);
  float* lb = mlp_grad_slot_b(g, left);
  const float* rb = mlp_grad_slot_b(g, right);
  for (size_t j = 0; j < h; ++j) lb[j] = mlp_add(lb[j], rb[j]);
  return 0;
}

static int host_backward(mlp_compute* c, const float* x, const float* w, const float* dz, float* dw, float* db,
                         float* dx, size_t rows, size_t hidden) {
  static const mlp_tree_ops grad_tree = {host_grads_leaf, host_grads_add};
  host_compute* k = (host_compute*)c;
  const size_t leaves = mlp_tree_leaves(rows);
  const size_t floats = mlp_grad_scratch_floats(rows, hidden);
  if (host_grow(&k->scratch, &k->scratch_floats, floats, sizeof(float), "the gradient tree") != 0) return -1;
  if (leaves > 0) {
    mlp_grad_slots g = {x, dz, rows, dw, db, (float*)k->scratch, hidden};
    if (mlp_tree_sum(leaves, &grad_tree, &g) != 0) return -1;
  }
  if (dx != NULL) host_rows_gemm(CblasNoTrans, w, dz, dx, rows, hidden);
  return 0;
}

static int host_relu_grad(mlp_compute* c, float* d, const float* y, size_t n) {
  (void)c;
  for (size_t i = 0; i < n; ++i) d[i] = mlp_relu_grad(d[i], y[i]);
  return 0;
}

static void host_destroy(mlp_compute* c) {
  host_compute* k = (host_compute*)c;
  if (k != NULL) {
    free(k->scratch);
    free(k->sq);
  }
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
