/* data.h: the synthetic regression task. The inputs and targets of step s depend only on
 * (seed, s, row, column) (mlp_math.h), so a resumed run, the reference and any micro-batch split
 * see the same data. */
#ifndef ZOE_DEMO_DATA_H
#define ZOE_DEMO_DATA_H

#include <stddef.h>
#include <stdint.h>

/* The rows of the global batch that micro-batch `micro` of `count` takes: [*row0, *row0 + rows). */
size_t mlp_micro_batch_rows(size_t batch, size_t count, size_t micro, uint64_t* row0);

/* x = the inputs of step `step`, rows [row0, row0 + rows), in host memory. */
void mlp_data_inputs(float* x, uint64_t seed, uint64_t step, uint64_t row0, size_t rows, size_t hidden);

#endif /* ZOE_DEMO_DATA_H */
