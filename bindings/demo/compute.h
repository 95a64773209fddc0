/* compute.h: the demo's forward and backward of one layer, and the loss, on device pointers.
 * Two implementations: compute_host.c (CBLAS, synchronous, on host memory: the host device and
 * the reference trainer) and compute_cuda.c (cuBLAS and the kernels of compute_cuda.cu, queued on
 * the zoe stream's native CUDA stream). A layer is y = act(x W^T + b) with W hidden x hidden
 * (row-major, W[out][in]), x and y rows x hidden; act is ReLU except on the last layer. */
#ifndef ZOE_DEMO_COMPUTE_H
#define ZOE_DEMO_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

typedef struct mlp_compute mlp_compute;

typedef struct mlp_compute_ops {
  const char* name;
  /* 1: the functions below run on the calling thread over host memory, so the caller must
   * zoe_stream_synchronize before touching memory zoe filled in stream order; 0: they queue on
   * the stream given to the backend's create. */
  int synchronous;
  /* x = the inputs of step `step`, rows [row0, row0 + rows) of the global batch. */
  int (*inputs)(mlp_compute* c, float* x, uint64_t seed, uint64_t step, uint64_t row0, size_t rows, size_t hidden);
  /* y = act(x W^T + b). */
  int (*forward)(mlp_compute* c, const float* x, const float* w, const float* b, float* y, size_t rows, size_t hidden,
                 int relu);
  /* MSE against the targets of (seed, step, rows from row0): *sum_sq = sum((y - t)^2) (in double:
   * each leaf of ZOE_MLP_LEAF_ROWS rows added in order, the leaves in leaf_tree.h's pairwise tree),
   * dy = mlp_mse_grad(y - t, coef). Blocks until *sum_sq is known. */
  int (*loss)(mlp_compute* c, const float* y, float* dy, uint64_t seed, uint64_t step, uint64_t row0, size_t rows,
              size_t hidden, float coef, double* sum_sq);
  /* dw = dz^T x, db = column sums of dz, each summed over leaves of ZOE_MLP_LEAF_ROWS rows (one GEMM
   * and one row-order column sum a leaf) added in leaf_tree.h's pairwise tree, so the bits do not
   * depend on how the global batch is split over ranks; dx = dz W (dx NULL: not wanted). */
  int (*backward)(mlp_compute* c, const float* x, const float* w, const float* dz, float* dw, float* db, float* dx,
                  size_t rows, size_t hidden);
  /* d[i] = mlp_relu_grad(d[i], y[i]) for i < n. */
  int (*relu_grad)(mlp_compute* c, float* d, const float* y, size_t n);
  void (*destroy)(mlp_compute* c);
} mlp_compute_ops;

struct mlp_compute {
  const mlp_compute_ops* ops;
};

/* The CBLAS backend (never fails). */
mlp_compute* mlp_compute_host_create(void);
/* The cuBLAS backend on CUDA stream `native_stream` (a cudaStream_t); NULL with a message on
 * stderr when CUDA support is not built in or cuBLAS fails to start. */
mlp_compute* mlp_compute_cuda_create(void* native_stream);

#endif /* ZOE_DEMO_COMPUTE_H */
