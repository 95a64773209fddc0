/* data.c: the synthetic regression task's host side (the CUDA path generates with the same
 * mlp_math.h functions in compute_cuda.cu). */
#include "data.h"

#include "mlp_math.h"

size_t mlp_micro_batch_rows(size_t batch, size_t count, size_t micro, uint64_t* row0) {
  const size_t rows = batch / count; /* options.c checks that count divides batch */
  *row0 = (uint64_t)(micro * rows);
  return rows;
}

void mlp_data_inputs(float* x, uint64_t seed, uint64_t step, uint64_t row0, size_t rows, size_t hidden) {
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < hidden; ++j) x[r * hidden + j] = mlp_input(seed, step, row0 + r, j, hidden);
  }
}
