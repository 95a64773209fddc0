/* mlp_math.h: the demo's elementwise arithmetic, written once for the host path, the reference
 * trainer and the CUDA kernels (compute_cuda.cu includes it with ZOE_MLP_HD = __host__ __device__).
 * Everything here is exact or correctly rounded single operations, so the host path and the
 * reference give the same bits; the CUDA build turns off fused multiply-adds for the same reason. */
#ifndef ZOE_DEMO_MLP_MATH_H
#define ZOE_DEMO_MLP_MATH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ZOE_MLP_HD __host__ __device__
#else
#define ZOE_MLP_HD
#endif

/* splitmix64's finalizer: a well-mixed 64-bit value from any 64-bit input. */
static inline ZOE_MLP_HD uint64_t mlp_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* Input element (row, col) of step `step`: uniform in [-1, 1) with 24 random bits (exact in a
 * float). `row` counts over the global batch, so how the batch is split into micro-batches does
 * not change the data, and a resumed run sees the same data for the same step. */
static inline ZOE_MLP_HD float mlp_input(uint64_t seed, uint64_t step, uint64_t row, uint64_t col, uint64_t hidden) {
  const uint64_t h = mlp_mix(mlp_mix(seed) ^ mlp_mix(step * 0x2545F4914F6CDD1Dull + row * hidden + col));
  return (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

/* The target the model learns: a fixed smooth (quadratic) function of two neighbouring inputs. */
static inline ZOE_MLP_HD float mlp_target(uint64_t seed, uint64_t step, uint64_t row, uint64_t col, uint64_t hidden) {
  const float a = mlp_input(seed, step, row, col, hidden);
  const float b = mlp_input(seed, step, row, (col + 1) % hidden, hidden);
  const float ab = a * b;
  const float a4 = 0.25f * a;
  return 0.5f * ab + a4;
}

/* A layer's output element: z + bias, then ReLU on every layer but the last. */
static inline ZOE_MLP_HD float mlp_bias_act(float z, float bias, int relu) {
  const float y = z + bias;
  return (relu && !(y > 0.0f)) ? 0.0f : y;
}

/* ReLU's derivative, with the layer's output y = relu(z): the gradient passes where y > 0. */
static inline ZOE_MLP_HD float mlp_relu_grad(float grad, float y) { return y > 0.0f ? grad : 0.0f; }

/* MSE: loss = sum((y - t)^2) / n over the micro-batch's n = rows * hidden elements; its gradient
 * times the loss scale is coef * (y - t) with coef = mlp_mse_coef(n, loss_scale). */
static inline ZOE_MLP_HD float mlp_mse_coef(uint64_t n, double loss_scale) {
  return (float)(2.0 * loss_scale / (double)n);
}
static inline ZOE_MLP_HD float mlp_mse_diff(float y, float t) { return y - t; }
static inline ZOE_MLP_HD float mlp_mse_grad(float diff, float coef) { return coef * diff; }

/* Two partial gradients added (leaf_tree.h's adds, on the host and in the CUDA kernel alike). */
static inline ZOE_MLP_HD float mlp_add(float a, float b) { return a + b; }

/* The bias gradient of column `col`: the column sum of dz (rows x hidden, row-major), added row by
 * row in order (the CUDA kernel gives one thread a column and adds in the same order). */
static inline ZOE_MLP_HD float mlp_bias_grad(const float* dz, size_t rows, size_t hidden, size_t col) {
  float s = 0.0f;
  for (size_t r = 0; r < rows; ++r) s += dz[r * hidden + col];
  return s;
}

#endif /* ZOE_DEMO_MLP_MATH_H */
