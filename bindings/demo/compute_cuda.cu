// compute_cuda.cu: the demo's elementwise kernels on a CUDA device; the arithmetic is mlp_math.h's,
// shared with the host path. Built with -fmad=false so no multiply-add is fused. Launched from
// compute_cuda.c through the C functions at the end.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "mlp_math.h"

namespace {

constexpr int threads = 256;

unsigned blocks_for(std::size_t n) { return static_cast<unsigned>((n + threads - 1) / threads); }

__global__ void inputs_kernel(float* x, uint64_t seed, uint64_t step, uint64_t row0, std::size_t rows,
                              std::size_t hidden) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * hidden) return;
  x[i] = mlp_input(seed, step, row0 + i / hidden, i % hidden, hidden);
}

__global__ void bias_act_kernel(float* y, const float* b, std::size_t rows, std::size_t hidden, int relu) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * hidden) return;
  y[i] = mlp_bias_act(y[i], b[i % hidden], relu);
}

// dy = the scaled MSE gradient; sq = each element's squared difference (summed on the host in order).
__global__ void loss_kernel(const float* y, float* dy, double* sq, uint64_t seed, uint64_t step, uint64_t row0,
                            std::size_t rows, std::size_t hidden, float coef) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * hidden) return;
  const float d = mlp_mse_diff(y[i], mlp_target(seed, step, row0 + i / hidden, i % hidden, hidden));
  sq[i] = static_cast<double>(d) * static_cast<double>(d);
  dy[i] = mlp_mse_grad(d, coef);
}

__global__ void bias_grad_kernel(const float* dz, float* db, std::size_t rows, std::size_t hidden) {
  const std::size_t j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (j >= hidden) return;
  db[j] = mlp_bias_grad(dz, rows, hidden, j);
}

__global__ void relu_grad_kernel(float* d, const float* y, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  d[i] = mlp_relu_grad(d[i], y[i]);
}

// left = left + right (leaf_tree.h's adds).
__global__ void add_kernel(float* left, const float* right, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  left[i] = mlp_add(left[i], right[i]);
}

int launched() { return cudaGetLastError() == cudaSuccess ? 0 : -1; }

}  // namespace

extern "C" {

int mlp_cuda_inputs(void* stream, float* x, uint64_t seed, uint64_t step, uint64_t row0, size_t rows, size_t hidden) {
  inputs_kernel<<<blocks_for(rows * hidden), threads, 0, static_cast<cudaStream_t>(stream)>>>(x, seed, step, row0, rows,
                                                                                              hidden);
  return launched();
}

int mlp_cuda_bias_act(void* stream, float* y, const float* b, size_t rows, size_t hidden, int relu) {
  bias_act_kernel<<<blocks_for(rows * hidden), threads, 0, static_cast<cudaStream_t>(stream)>>>(y, b, rows, hidden,
                                                                                                relu);
  return launched();
}

int mlp_cuda_loss(void* stream, const float* y, float* dy, double* sq, uint64_t seed, uint64_t step, uint64_t row0,
                  size_t rows, size_t hidden, float coef) {
  loss_kernel<<<blocks_for(rows * hidden), threads, 0, static_cast<cudaStream_t>(stream)>>>(y, dy, sq, seed, step, row0,
                                                                                            rows, hidden, coef);
  return launched();
}

int mlp_cuda_bias_grad(void* stream, const float* dz, float* db, size_t rows, size_t hidden) {
  bias_grad_kernel<<<blocks_for(hidden), threads, 0, static_cast<cudaStream_t>(stream)>>>(dz, db, rows, hidden);
  return launched();
}

int mlp_cuda_relu_grad(void* stream, float* d, const float* y, size_t n) {
  relu_grad_kernel<<<blocks_for(n), threads, 0, static_cast<cudaStream_t>(stream)>>>(d, y, n);
  return launched();
}

int mlp_cuda_add(void* stream, float* left, const float* right, size_t n) {
  add_kernel<<<blocks_for(n), threads, 0, static_cast<cudaStream_t>(stream)>>>(left, right, n);
  return launched();
}

}  // extern "C"
