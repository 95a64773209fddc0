/* trainer.h: training with zoe: the engine, the step of forward and backward over the pointers zoe
 * hands out, and the time of the same compute with everything resident. */
#ifndef ZOE_DEMO_TRAINER_H
#define ZOE_DEMO_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "compute.h"
#include "options.h"
#include "zoe/zoe.h"

typedef struct mlp_trainer {
  size_t hidden;
  size_t layers;
  size_t batch;
  size_t micro_batches;
  size_t rows; /* per micro-batch and rank: batch / (micro_batches x world size) */
  uint64_t seed;
  zoe_ranks ranks; /* the engine's */
  zoe_device* device;
  zoe_stream* stream;
  zoe_engine* engine;
  mlp_compute* compute;
  float* buffers[4]; /* device memory: the layer input/output pair and the two gradient buffers */
  size_t buffer_bytes;
  zoe_activation_id* saved; /* each layer's input, saved in forward through zoe ... */
  float** kept;             /* ... or kept by the program in host memory (NULL: zoe keeps them) */
} mlp_trainer;

/* Opens the device (kind from o->device, budget `budget`), the stream and the compute backend,
 * registers the model and makes the engine from `config_json` with `overrides` (a JSON merge
 * patch, or NULL) merged over it: collective on several ranks. Then this rank's share of the batch:
 * the engine's world size times micro_batches must divide o->batch. With `keep_activations` the
 * program keeps each layer's input in host memory of its own (a device-to-host copy in forward,
 * back in backward) instead of zoe's activation store, for a configuration that gives the store no
 * room. 0; 2 for a batch the ranks cannot share (the message names both); -1 with a message on
 * stderr for anything else. mlp_trainer_close undoes whatever was made either way. */
int mlp_trainer_open(mlp_trainer* t, const mlp_options* o, const char* config_json, const char* overrides,
                     size_t micro_batches, uint64_t budget, int keep_activations);
/* One training step (all micro-batches, then zoe_step with `lr`): *sum_sq is the squared errors of
 * this rank's rows summed (each micro-batch's as compute.h's loss adds them, the micro-batches in
 * order); the step's loss is the ranks' sums, added by zoe_all_reduce_sum, over batch * hidden: no
 * division before the ranks' sums are added, so a power-of-two split gives one rank's bits.
 * 0, or -1 with a message. */
int mlp_trainer_step(mlp_trainer* t, long step, double lr, double* sum_sq, zoe_step_result* result);
/* Destroys the engine (not the device): after it, device memory is free for mlp_trainer_compute_s. */
int mlp_trainer_close_engine(mlp_trainer* t);
/* Seconds of forward and backward of one step with everything resident: one layer's weights and
 * every activation kept in device memory, the same work over all layers, no zoe calls. -1 when
 * the memory cannot be had. Call after mlp_trainer_close_engine. */
double mlp_trainer_compute_s(mlp_trainer* t);
void mlp_trainer_close(mlp_trainer* t);

/* Prints "zoe-train-mlp: <what>: <status>: <zoe_last_error()>" ("zoe-train-mlp[rank r]: ..." once
 * mlp_set_rank has named a rank of several) and returns -1 unless s succeeded. */
int mlp_check(zoe_status s, const char* what);
/* Names this process's rank in mlp_check's messages when world_size > 1. */
void mlp_set_rank(unsigned rank, unsigned world_size);

#endif /* ZOE_DEMO_TRAINER_H */
