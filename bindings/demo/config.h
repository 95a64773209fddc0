/* config.h: the built-in DeepSpeed-style configuration, the device budget it needs, and the one
 * key the program itself reads from a configuration (gradient_accumulation_steps). */
#ifndef ZOE_DEMO_CONFIG_H
#define ZOE_DEMO_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/* The built-in configuration's optimizer (AdamW) and clipping; the reference trainer uses them. */
#define ZOE_MLP_BETA1 0.9
#define ZOE_MLP_BETA2 0.999
#define ZOE_MLP_EPS 1e-8
#define ZOE_MLP_WEIGHT_DECAY 0.01
#define ZOE_MLP_GRADIENT_CLIPPING 1.0

/* The built-in configuration (malloc'd; the caller frees it): stage 3, fp32, parameters and
 * optimizer states on nvme at `swap_dir`, one layer fetched ahead, two gathered at most, small
 * pinned buffers, aio.block_size 1 MiB, biases gathered for good (weights offloaded), the activations of a micro-batch
 * in pinned host memory, `micro_batches` micro-batches a step. */
char* mlp_builtin_config(const char* swap_dir, size_t hidden, size_t layers, size_t micro_batches, size_t micro_rows,
                         double lr, uint64_t budget);

/* The default device budget for the built-in configuration: the gathered-parameter arena (two
 * layers' weights and every bias), two gradient buckets of one layer, the program's four
 * activation buffers, the loaded and prefetched activations, and a margin for rounding. */
uint64_t mlp_default_budget(size_t hidden, size_t layers, size_t micro_rows);

/* gradient_accumulation_steps of a configuration's JSON text (its top-level key; 1 when absent).
 * Returns 0 and prints a message naming the key when the value is not a positive integer. */
size_t mlp_config_accumulation(const char* json);

/* The whole file at `path` (malloc'd, NUL-terminated), or NULL with a message naming the path. */
char* mlp_read_file(const char* path);

#endif /* ZOE_DEMO_CONFIG_H */
