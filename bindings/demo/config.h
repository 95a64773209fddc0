/* config.h: the built-in DeepSpeed-style configuration, what zoe's footprint plan asks for a
 * configuration (the device budget, and whether zoe has room for the activations), and the one key
 * the program itself reads from a configuration (gradient_accumulation_steps). */
#ifndef ZOE_DEMO_CONFIG_H
#define ZOE_DEMO_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "options.h"
#include "zoe/zoe.h"

/* The built-in configuration's optimizer (AdamW) and clipping; the reference trainer uses them. */
#define ZOE_MLP_BETA1 0.9
#define ZOE_MLP_BETA2 0.999
#define ZOE_MLP_EPS 1e-8
#define ZOE_MLP_WEIGHT_DECAY 0.01
#define ZOE_MLP_GRADIENT_CLIPPING 1.0

/* The built-in configuration (malloc'd; the caller frees it): stage 3, fp32, parameters and
 * optimizer states on nvme at `swap_dir`, one layer fetched ahead, two gathered at most, small
 * pinned buffers, aio.block_size 1 MiB, biases gathered for good (weights offloaded), the
 * activations of a micro-batch in pinned host memory, `micro_batches` micro-batches a step. No
 * device budget: the program opens the device itself, with mlp_device_budget's. */
char* mlp_builtin_config(const char* swap_dir, size_t hidden, size_t layers, size_t micro_batches, size_t micro_rows,
                         double lr);

/* zoe's footprint plan (zoe_footprint_plan) of the engine the program will make: o's model under
 * `config_json` with `overrides` (NULL: none) on `world_size` ranks. 0, or -1 with a message naming
 * the configuration's problem (the plan refuses what the engine would). */
int mlp_plan(const mlp_options* o, const char* config_json, const char* overrides, unsigned world_size,
             zoe_footprint* plan);

/* The default device budget: what zoe's plan asks for on the device, plus the program's own: its
 * four buffers of a micro-batch of `micro_rows` rows, the activation a load brings back, and a
 * margin for the devices' rounding. */
uint64_t mlp_device_budget(const zoe_footprint* plan, size_t hidden, size_t micro_rows);

/* 1 when the configuration gives zoe's activation store no room (zoe.activations.host_bytes and
 * nvme_bytes both 0, as in any DeepSpeed file): the program keeps the activations itself. */
int mlp_keeps_activations(const zoe_footprint* plan);

/* gradient_accumulation_steps of a configuration's JSON text (its top-level key; 1 when absent).
 * Returns 0 and prints a message naming the key when the value is not a positive integer. */
size_t mlp_config_accumulation(const char* json);

/* The whole file at `path` (malloc'd, NUL-terminated), or NULL with a message naming the path. */
char* mlp_read_file(const char* path);

#endif /* ZOE_DEMO_CONFIG_H */
