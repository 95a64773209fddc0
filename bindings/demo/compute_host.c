/* compute_host.c: the layer arithmetic on host memory with OpenBLAS's CBLAS; the elementwise parts
 * come from mlp_math.h. Used by the host device's path and by the reference trainer, so both do
 * exactly the same operations in the same order. */
#include <cblas.h>
#include <stdlib.h>

#include "compute.h"
#include "data.h"
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
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, n, n, 1.0f, x, n, w, n, 0.0f, y, n);
  for (size_t r = 0; r < rows; ++r) {
    float* row = y + r * hidden;
    for (size_t j = 0; j < hidden; ++j) row[j] = mlp_bias_act(row[j], b[j], relu);
  }
  return 0;
}

static int host_loss(mlp_compute* c, const float* y, float* dy, uint64_t seed, uint64_t step, uint64_t row0,
                     size_t rows, size_t hidden, float coef, double* sum_sq) {
  (void)c;
  double s = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < hidden; ++j) {
      const size_t i = r * hidden + j;
      const float d = mlp_mse_diff(y[i], mlp_target(seed, step, row0 + r, j, hidden));
      s += (double)d * (double)d;
      dy[i] = mlp_mse_grad(d, coef);
    }
  }
  *sum_sq = s;
  return 0;
}

static int host_backward(mlp_compute* c, const float* x, const float* w, const float* dz, float* dw, float* db,
                         float* dx, size_t rows, size_t hidden) {
  (void)c;
  const int n = (int)hidden;
  const int m = (int)rows;
  /* dW[out][in] = sum over rows of dz[r][out] * x[r][in]. */
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, n, m, 1.0f, dz, n, x, n, 0.0f, dw, n);
  /* mlp_bias_grad's sums, each column added row by row in the same order, but walked row-major. */
  for (size_t j = 0; j < hidden; ++j) db[j] = 0.0f;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < hidden; ++j) db[j] += dz[r * hidden + j];
  }
  if (dx != NULL) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, n, 1.0f, dz, n, w, n, 0.0f, dx, n);
  return 0;
}

static int host_relu_grad(mlp_compute* c, float* d, const float* y, size_t n) {
  (void)c;
  for (size_t i = 0; i < n; ++i) d[i] = mlp_relu_grad(d[i], y[i]);
  return 0;
}

static void host_destroy(mlp_compute* c) { free(c); }

static const mlp_compute_ops host_ops = {
    "host (OpenBLAS CBLAS)", 1, host_inputs, host_forward, host_loss, host_backward, host_relu_grad, host_destroy};

mlp_compute* mlp_compute_host_create(void) {
  mlp_compute* c = malloc(sizeof *c);
  if (c != NULL) c->ops = &host_ops;
  return c;
}
