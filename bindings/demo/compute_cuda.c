/* compute_cuda.c: the layer arithmetic on a CUDA device: the GEMMs with cuBLAS, the elementwise
 * parts with compute_cuda.cu's kernels (mlp_math.h's arithmetic), all queued on the zoe stream's
 * native CUDA stream. cuBLAS is column-major: a row-major matrix is its transpose there, so each
 * row-major product below is written as the transposed column-major one. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "compute.h"
#include "leaf_tree.h"

int mlp_cuda_inputs(void* stream, float* x, uint64_t seed, uint64_t step, uint64_t row0, size_t rows, size_t hidden);
int mlp_cuda_bias_act(void* stream, float* y, const float* b, size_t rows, size_t hidden, int relu);
int mlp_cuda_loss(void* stream, const float* y, float* dy, double* sq, uint64_t seed, uint64_t step, uint64_t row0,
                  size_t rows, size_t hidden, float coef);
int mlp_cuda_bias_grad(void* stream, const float* dz, float* db, size_t rows, size_t hidden);
int mlp_cuda_relu_grad(void* stream, float* d, const float* y, size_t n);
int mlp_cuda_add(void* stream, float* left, const float* right, size_t n);

typedef struct cuda_compute {
  mlp_compute base; /* first: a cuda_compute* is an mlp_compute* */
  cudaStream_t stream;
  cublasHandle_t blas;
  double* sq_device; /* the loss's squared differences, summed on the host in order */
  double* sq_host;
  size_t sq_count;
  float* tree_device; /* the gradient tree's scratch: mlp_tree_slots slots of a leaf's dW, then its db */
  size_t tree_floats;
} cuda_compute;

static cuda_compute* as_cuda(mlp_compute* c) { return (cuda_compute*)c; }

static int blas_ok(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  fprintf(stderr, "zoe-train-mlp: cuBLAS %s failed with status %d\n", what, (int)s);
  return -1;
}

static int cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "zoe-train-mlp: CUDA %s failed: %s\n", what, cudaGetErrorString(e));
  return -1;
}

static int cuda_inputs(mlp_compute* c, float* x, uint64_t seed, uint64_t step, uint64_t row0, size_t rows,
                       size_t hidden) {
  return mlp_cuda_inputs(as_cuda(c)->stream, x, seed, step, row0, rows, hidden);
}

/* out^T = op(W) in^T for `rows` rows, one GEMM a leaf, so that every split of the batch runs GEMMs
 * of the same shape (leaf_tree.h): the forward's y = x W^T (op T) and the backward's dx = dz W (op N). */
static int cuda_rows_gemm(cuda_compute* k, cublasOperation_t op, const float* w, const float* in, float* out,
                          size_t rows, size_t hidden, const char* what) {
  const int n = (int)hidden;
  const float one = 1.0f;
  const float zero = 0.0f;
  for (size_t leaf = 0; leaf < mlp_tree_leaves(rows); ++leaf) {
    size_t r0 = 0;
    const size_t m = mlp_leaf_rows(rows, leaf, &r0);
    if (blas_ok(cublasSgemm(k->blas, op, CUBLAS_OP_N, n, (int)m, n, &one, w, n, in + r0 * hidden, n, &zero,
                            out + r0 * hidden, n),
                what) != 0) {
      return -1;
    }
  }
  return 0;
}

static int cuda_forward(mlp_compute* c, const float* x, const float* w, const float* b, float* y, size_t rows,
                        size_t hidden, int relu) {
  cuda_compute* k = as_cuda(c);
  if (cuda_rows_gemm(k, CUBLAS_OP_T, w, x, y, rows, hidden, "forward sgemm") != 0) return -1;
  return mlp_cuda_bias_act(k->stream, y, b, rows, hidden, relu);
}

static int cuda_loss(mlp_compute* c, const float* y, float* dy, uint64_t seed, uint64_t step, uint64_t row0,
                     size_t rows, size_t hidden, float coef, double* sum_sq) {
  cuda_compute* k = as_cuda(c);
  const size_t n = rows * hidden;
  if (k->sq_count < n) {
    cudaFree(k->sq_device);
    free(k->sq_host);
    k->sq_device = NULL;
    k->sq_host = malloc(n * sizeof(double));
    k->sq_count = 0;
    if (k->sq_host == NULL || cuda_ok(cudaMalloc((void**)&k->sq_device, n * sizeof(double)), "cudaMalloc") != 0) {
      return -1;
    }
    k->sq_count = n;
  }
  if (mlp_cuda_loss(k->stream, y, dy, k->sq_device, seed, step, row0, rows, hidden, coef) != 0) return -1;
  if (cuda_ok(cudaMemcpyAsync(k->sq_host, k->sq_device, n * sizeof(double), cudaMemcpyDeviceToHost, k->stream),
              "loss copy") != 0 ||
      cuda_ok(cudaStreamSynchronize(k->stream), "loss synchronize") != 0) {
    return -1;
  }
  *sum_sq = mlp_tree_sum_rows(k->sq_host, rows, hidden);
  return 0;
}

/* One backward's leaf tree: dW and db over the leaves of dz's rows (leaf_tree.h), queued on the stream. */
typedef struct cuda_grads {
  cuda_compute* k;
  mlp_grad_slots slots;
} cuda_grads;

static int cuda_grads_leaf(void* ctx, size_t leaf, size_t slot) {
  cuda_grads* g = ctx;
  const size_t h = g->slots.hidden;
  size_t r0 = 0;
  const size_t m = mlp_leaf_rows(g->slots.rows, leaf, &r0);
  const int n = (int)h;
  const float one = 1.0f;
  const float zero = 0.0f;
  /* dW^T = x^T dz over the leaf's rows. */
  if (blas_ok(cublasSgemm(g->k->blas, CUBLAS_OP_N, CUBLAS_OP_T, n, n, (int)m, &one, g->slots.x + r0 * h, n,
                          g->slots.dz + r0 * h, n, &zero, mlp_grad_slot_w(&g->slots, slot), n),
              "weight-gradient sgemm") != 0) {
    return -1;
  }
  return mlp_cuda_bias_grad(g->k->stream, g->slots.dz + r0 * h, mlp_grad_slot_b(&g->slots, slot), m, h);
}

static int cuda_grads_add(void* ctx, size_t left, size_t right) {
  cuda_grads* g = ctx;
  if (mlp_cuda_add(g->k->stream, mlp_grad_slot_w(&g->slots, left), mlp_grad_slot_w(&g->slots, right),
                   g->slots.hidden * g->slots.hidden) != 0) {
    return -1;
  }
  return mlp_cuda_add(g->k->stream, mlp_grad_slot_b(&g->slots, left), mlp_grad_slot_b(&g->slots, right),
                      g->slots.hidden);
}

static int cuda_backward(mlp_compute* c, const float* x, const float* w, const float* dz, float* dw, float* db,
                         float* dx, size_t rows, size_t hidden) {
  static const mlp_tree_ops grad_tree = {cuda_grads_leaf, cuda_grads_add};
  cuda_compute* k = as_cuda(c);
  const size_t leaves = mlp_tree_leaves(rows);
  const size_t floats = mlp_grad_scratch_floats(rows, hidden);
  if (floats > k->tree_floats) {
    /* Queued work may still read the old scratch. */
    if (cuda_ok(cudaStreamSynchronize(k->stream), "tree scratch synchronize") != 0) return -1;
    cudaFree(k->tree_device);
    k->tree_device = NULL;
    k->tree_floats = 0;
    if (cuda_ok(cudaMalloc((void**)&k->tree_device, floats * sizeof(float)), "cudaMalloc") != 0) return -1;
    k->tree_floats = floats;
  }
  if (leaves > 0) {
    cuda_grads g = {k, {x, dz, rows, dw, db, k->tree_device, hidden}};
    if (mlp_tree_sum(leaves, &grad_tree, &g) != 0) return -1;
  }
  if (dx == NULL) return 0;
  /* dx^T = W^T dz^T. */
  return cuda_rows_gemm(k, CUBLAS_OP_N, w, dz, dx, rows, hidden, "input-gradient sgemm");
}

static int cuda_relu_grad(mlp_compute* c, float* d, const float* y, size_t n) {
  return mlp_cuda_relu_grad(as_cuda(c)->stream, d, y, n);
}

static void cuda_destroy(mlp_compute* c) {
  cuda_compute* k = as_cuda(c);
  if (k == NULL) return;
  cublasDestroy(k->blas);
  cudaFree(k->sq_device);
  cudaFree(k->tree_device);
  free(k->sq_host);
  free(k);
}

static const mlp_compute_ops cuda_ops = {
    "cuda (cuBLAS)", 0, cuda_inputs, cuda_forward, cuda_loss, cuda_backward, cuda_relu_grad, cuda_destroy};

mlp_compute* mlp_compute_cuda_create(void* native_stream) {
  cuda_compute* k = calloc(1, sizeof *k);
  if (k == NULL) return NULL;
  k->base.ops = &cuda_ops;
  k->stream = (cudaStream_t)native_stream;
  if (blas_ok(cublasCreate(&k->blas), "create") != 0) {
    free(k);
    return NULL;
  }
  /* Exact fp32 products, as on the host: no TF32 tensor-core rounding. */
  if (blas_ok(cublasSetMathMode(k->blas, CUBLAS_PEDANTIC_MATH), "set math mode") != 0 ||
      blas_ok(cublasSetStream(k->blas, k->stream), "set stream") != 0) {
    cuda_destroy(&k->base);
    return NULL;
  }
  return &k->base;
}
