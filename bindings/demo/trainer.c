/* trainer.c: one training step through zoe, as zoe.h's header comment lays it out. On the host
 * device the compute runs on the calling thread over host memory, so the stream is synchronized
 * before the program reads or writes memory that zoe fills in stream order (a fetch, a loaded
 * activation, the zero-filled gradient buffers); on a CUDA device everything queues on the stream. */
#include "trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "mlp_math.h"
#include "model.h"
#include "report.h"

/* "zoe-train-mlp" or "zoe-train-mlp[rank r]": which of several ranks failed. */
static char program_name[48] = "zoe-train-mlp";

void mlp_set_rank(unsigned rank, unsigned world_size) {
  if (world_size > 1) snprintf(program_name, sizeof program_name, "zoe-train-mlp[rank %u]", rank);
}

int mlp_check(zoe_status s, const char* what) {
  if (s == ZOE_SUCCESS) return 0;
  fprintf(stderr, "%s: %s: %s: %s\n", program_name, what, zoe_status_string(s), zoe_last_error());
  return -1;
}

#define ZOE_MLP_CHECK(call)                       \
  do {                                            \
    if (mlp_check((call), #call) != 0) return -1; \
  } while (0)

#define ZOE_MLP_COMPUTE(call)                                                            \
  do {                                                                                   \
    if ((call) != 0) {                                                                   \
      fprintf(stderr, "zoe-train-mlp: %s failed on %s\n", #call, t->compute->ops->name); \
      return -1;                                                                         \
    }                                                                                    \
  } while (0)

/* On the host device: wait for the work zoe queued before touching memory. */
static int settle(mlp_trainer* t) {
  if (!t->compute->ops->synchronous) return 0;
  return mlp_check(zoe_stream_synchronize(t->stream), "zoe_stream_synchronize");
}

int mlp_trainer_open(mlp_trainer* t, const mlp_options* o, const char* config_json, const char* overrides,
                     size_t micro_batches, uint64_t budget, int keep_activations) {
  memset(t, 0, sizeof *t);
  t->hidden = o->hidden;
  t->layers = o->layers;
  t->batch = o->batch;
  t->micro_batches = micro_batches;
  t->seed = o->seed;
  const zoe_ranks one = ZOE_RANKS_INIT;
  t->ranks = one;
  zoe_device_options dopt = ZOE_DEVICE_OPTIONS_INIT;
  dopt.kind = strcmp(o->device, "host") == 0   ? ZOE_DEVICE_HOST
              : strcmp(o->device, "cuda") == 0 ? ZOE_DEVICE_CUDA
                                               : ZOE_DEVICE_AUTO;
  dopt.budget_bytes = budget;
  ZOE_MLP_CHECK(zoe_device_create(&dopt, &t->device));
  ZOE_MLP_CHECK(zoe_stream_create(t->device, &t->stream));
  zoe_device_kind kind = ZOE_DEVICE_HOST;
  ZOE_MLP_CHECK(zoe_device_get_kind(t->device, &kind));
  if (kind == ZOE_DEVICE_CUDA) {
    void* native = NULL;
    ZOE_MLP_CHECK(zoe_stream_native(t->stream, &native));
    t->compute = mlp_compute_cuda_create(native);
  } else {
    t->compute = mlp_compute_host_create();
  }
  if (t->compute == NULL) return -1;

  zoe_model* model = NULL;
  ZOE_MLP_CHECK(mlp_model_build(o->hidden, o->layers, o->seed, &model));
  zoe_engine_desc desc = ZOE_ENGINE_DESC_INIT;
  desc.config_json = config_json;
  desc.config_overrides = overrides;
  desc.model = model;
  desc.device = t->device;
  const zoe_status made = zoe_engine_create(&desc, &t->engine);
  zoe_model_destroy(model);
  if (mlp_check(made, "zoe_engine_create") != 0) return -1;
  ZOE_MLP_CHECK(zoe_engine_ranks(t->engine, &t->ranks));
  mlp_set_rank(t->ranks.rank, t->ranks.world_size);
  /* Every rank takes the same share of every micro-batch. */
  if (o->batch % (micro_batches * t->ranks.world_size) != 0) {
    fprintf(stderr,
            "zoe-train-mlp: --batch %zu: not a multiple of gradient_accumulation_steps %zu times the world size %u "
            "(every rank takes an equal share of every micro-batch)\n",
            o->batch, micro_batches, t->ranks.world_size);
    return 2;
  }
  t->rows = o->batch / (micro_batches * t->ranks.world_size);

  t->buffer_bytes = t->rows * t->hidden * sizeof(float);
  for (int i = 0; i < 4; ++i) {
    void* p = NULL;
    ZOE_MLP_CHECK(zoe_device_allocate(t->device, t->buffer_bytes, t->stream, &p));
    t->buffers[i] = p;
  }
  t->saved = calloc(t->layers, sizeof *t->saved);
  if (t->saved == NULL) {
    fprintf(stderr, "zoe-train-mlp: out of memory\n");
    return -1;
  }
  if (keep_activations) {
    t->kept = calloc(t->layers, sizeof *t->kept);
    for (size_t l = 0; t->kept != NULL && l < t->layers; ++l) {
      if ((t->kept[l] = malloc(t->buffer_bytes)) == NULL) {
        fprintf(stderr, "zoe-train-mlp: out of memory for layer %zu's activation (%zu bytes)\n", l, t->buffer_bytes);
        return -1;
      }
    }
    if (t->kept == NULL) {
      fprintf(stderr, "zoe-train-mlp: out of memory\n");
      return -1;
    }
  }
  return 0;
}

/* Keeps layer l's input `x` until backward: in zoe's activation store, or in the program's host
 * copy (in order with the stream, as zoe's save is: the next layer's settle waits for it before
 * the buffer is written again). */
static int keep_activation(mlp_trainer* t, size_t l, const float* x) {
  if (t->kept == NULL) {
    return mlp_check(zoe_activation_save(t->engine, x, t->buffer_bytes, t->stream, &t->saved[l]),
                     "zoe_activation_save");
  }
  return mlp_check(zoe_copy_async(t->device, t->kept[l], x, t->buffer_bytes, ZOE_COPY_DEVICE_TO_HOST, t->stream),
                   "zoe_copy_async (keeping an activation)");
}

/* Layer l's input back in device memory: zoe's load, or the program's copy into `free_buffer`
 * (one of the forward pair, unused in backward). */
static int bring_back_activation(mlp_trainer* t, size_t l, float* free_buffer, void** x) {
  if (t->kept == NULL) {
    return mlp_check(zoe_activation_load(t->engine, t->saved[l], t->stream, x), "zoe_activation_load");
  }
  *x = free_buffer;
  return mlp_check(
      zoe_copy_async(t->device, free_buffer, t->kept[l], t->buffer_bytes, ZOE_COPY_HOST_TO_DEVICE, t->stream),
      "zoe_copy_async (bringing back an activation)");
}

/* Forward and backward of micro-batch `micro` of step `step`; adds its squared errors to *sq_total. */
static int micro_batch(mlp_trainer* t, long step, size_t micro, double* sq_total) {
  const size_t h = t->hidden;
  const size_t n = t->rows * h;
  uint64_t row0 = 0;
  mlp_micro_batch_rows(t->batch, t->micro_batches, micro, &row0);
  /* This rank's rows of the micro-batch: the gradient of their mean loss, averaged over the ranks
   * by zoe's reduction, is the gradient of the whole micro-batch's mean loss. */
  row0 += (uint64_t)t->ranks.rank * t->rows;
  const mlp_compute_ops* ops = t->compute->ops;
  float* cur = t->buffers[0];
  float* next = t->buffers[1];
  float* grad_in = t->buffers[2];
  float* grad_out = t->buffers[3];

  ZOE_MLP_CHECK(zoe_begin_micro_batch(t->engine));
  /* The previous micro-batch's last activation save may still read buffers[0..1]. */
  if (settle(t) != 0) return -1;
  ZOE_MLP_COMPUTE(ops->inputs(t->compute, cur, t->seed, (uint64_t)step, row0, t->rows, h));
  for (size_t l = 0; l < t->layers; ++l) {
    ZOE_MLP_CHECK(zoe_fetch(t->engine, (zoe_module_id)l, ZOE_PASS_FORWARD, t->stream));
    if (settle(t) != 0) return -1;
    void* w = NULL;
    void* b = NULL;
    ZOE_MLP_CHECK(zoe_parameter_address(t->engine, mlp_weight_id(l), &w));
    ZOE_MLP_CHECK(zoe_parameter_address(t->engine, mlp_bias_id(l), &b));
    ZOE_MLP_COMPUTE(ops->forward(t->compute, cur, w, b, next, t->rows, h, l + 1 < t->layers));
    if (keep_activation(t, l, cur) != 0) return -1;
    ZOE_MLP_CHECK(zoe_release(t->engine, (zoe_module_id)l, t->stream));
    float* swap = cur;
    cur = next;
    next = swap;
  }
  double loss_scale = 1.0;
  ZOE_MLP_CHECK(zoe_loss_scale(t->engine, &loss_scale));
  double sum_sq = 0.0;
  ZOE_MLP_COMPUTE(ops->loss(t->compute, cur, grad_in, t->seed, (uint64_t)step, row0, t->rows, h,
                            mlp_mse_coef((uint64_t)n, loss_scale), &sum_sq));
  *sq_total += sum_sq;

  for (size_t l = t->layers; l-- > 0;) {
    ZOE_MLP_CHECK(zoe_fetch(t->engine, (zoe_module_id)l, ZOE_PASS_BACKWARD, t->stream));
    void* x = NULL;
    if (bring_back_activation(t, l, t->buffers[0], &x) != 0) return -1;
    void* grads[2] = {NULL, NULL};
    ZOE_MLP_CHECK(zoe_module_gradients(t->engine, (zoe_module_id)l, t->stream, grads, 2));
    if (settle(t) != 0) return -1;
    void* w = NULL;
    ZOE_MLP_CHECK(zoe_parameter_address(t->engine, mlp_weight_id(l), &w));
    ZOE_MLP_COMPUTE(ops->backward(t->compute, x, w, grad_in, grads[0], grads[1], l > 0 ? grad_out : NULL, t->rows, h));
    ZOE_MLP_CHECK(zoe_reduce_gradients(t->engine, (zoe_module_id)l, t->stream));
    if (l > 0) {
      /* x = relu(the previous layer's z): its derivative turns d/dx into d/dz of layer l - 1. */
      ZOE_MLP_COMPUTE(ops->relu_grad(t->compute, grad_out, x, n));
      float* swap = grad_in;
      grad_in = grad_out;
      grad_out = swap;
    }
    if (t->kept == NULL) ZOE_MLP_CHECK(zoe_activation_free(t->engine, t->saved[l], t->stream));
    ZOE_MLP_CHECK(zoe_release(t->engine, (zoe_module_id)l, t->stream));
  }
  ZOE_MLP_CHECK(zoe_end_micro_batch(t->engine));
  return 0;
}

int mlp_trainer_step(mlp_trainer* t, long step, double lr, double* sum_sq, zoe_step_result* result) {
  double sum = 0.0;
  for (size_t m = 0; m < t->micro_batches; ++m) {
    if (micro_batch(t, step, m, &sum) != 0) return -1;
  }
  zoe_step_result r = ZOE_STEP_RESULT_INIT;
  ZOE_MLP_CHECK(zoe_step(t->engine, lr, &r));
  *sum_sq = sum;
  *result = r;
  return 0;
}

int mlp_trainer_close_engine(mlp_trainer* t) {
  int rc = 0;
  for (int i = 0; i < 4; ++i) {
    if (t->buffers[i] != NULL) {
      rc |= mlp_check(zoe_device_free(t->device, t->buffers[i], t->buffer_bytes, t->stream), "zoe_device_free");
      t->buffers[i] = NULL;
    }
  }
  if (t->engine != NULL) {
    rc |= mlp_check(zoe_engine_destroy(t->engine), "zoe_engine_destroy");
    t->engine = NULL;
  }
  return rc;
}

/* Device memory for mlp_trainer_compute_s, freed together. */
typedef struct resident {
  void* p[64];
  size_t bytes[64];
  int count;
} resident;

static float* resident_alloc(mlp_trainer* t, resident* r, size_t bytes) {
  void* p = NULL;
  if (r->count == 64 || zoe_device_allocate(t->device, bytes, t->stream, &p) != ZOE_SUCCESS) return NULL;
  r->p[r->count] = p;
  r->bytes[r->count++] = bytes;
  return p;
}

double mlp_trainer_compute_s(mlp_trainer* t) {
  const size_t h = t->hidden;
  const size_t n = t->rows * h;
  const mlp_compute_ops* ops = t->compute->ops;
  resident r;
  memset(&r, 0, sizeof r);
  double seconds = -1.0;
  float* w = resident_alloc(t, &r, h * h * sizeof(float));
  float* b = resident_alloc(t, &r, h * sizeof(float));
  float* dw = resident_alloc(t, &r, h * h * sizeof(float));
  float* db = resident_alloc(t, &r, h * sizeof(float));
  float* grad_in = resident_alloc(t, &r, n * sizeof(float));
  float* grad_out = resident_alloc(t, &r, n * sizeof(float));
  /* Every layer's activation stays in device memory: the inputs of layers 0..L-1 and the output.
   * Fewer than all when the budget refuses (they are reused round-robin: the work is the same). */
  float* acts[62];
  size_t nacts = 0;
  while (nacts < 62 && nacts <= t->layers) {
    float* a = resident_alloc(t, &r, n * sizeof(float));
    if (a == NULL) break;
    acts[nacts++] = a;
  }
  float* host = malloc(h * h * sizeof(float));
  if (w == NULL || b == NULL || dw == NULL || db == NULL || grad_in == NULL || grad_out == NULL || nacts < 2 ||
      host == NULL) {
    fprintf(stderr, "zoe-train-mlp: compute_s: no room in device memory for one layer and its activations\n");
    goto done;
  }
  /* Layer 0's initial values, as real weights (the time does not depend on them). */
  if (mlp_model_initial(h, t->seed, 0, 0, host) != ZOE_SUCCESS ||
      zoe_copy_async(t->device, w, host, h * h * sizeof(float), ZOE_COPY_HOST_TO_DEVICE, t->stream) != ZOE_SUCCESS ||
      mlp_model_initial(h, t->seed, 0, 1, host) != ZOE_SUCCESS ||
      zoe_copy_async(t->device, b, host, h * sizeof(float), ZOE_COPY_HOST_TO_DEVICE, t->stream) != ZOE_SUCCESS ||
      zoe_stream_synchronize(t->stream) != ZOE_SUCCESS) {
    fprintf(stderr, "zoe-train-mlp: compute_s: %s\n", zoe_last_error());
    goto done;
  }
  /* Twice: the first warms up (BLAS buffers, first touches); the second is timed. */
  for (int round = 0; round < 2; ++round) {
    const double t0 = mlp_now();
    for (size_t m = 0; m < t->micro_batches; ++m) {
      uint64_t row0 = 0;
      mlp_micro_batch_rows(t->batch, t->micro_batches, m, &row0);
      int failed = ops->inputs(t->compute, acts[0], t->seed, 1, row0, t->rows, h);
      for (size_t l = 0; l < t->layers; ++l) {
        failed |= ops->forward(t->compute, acts[l % nacts], w, b, acts[(l + 1) % nacts], t->rows, h, l + 1 < t->layers);
      }
      double sum_sq = 0.0;
      failed |= ops->loss(t->compute, acts[t->layers % nacts], grad_in, t->seed, 1, row0, t->rows, h,
                          mlp_mse_coef((uint64_t)n, 1.0), &sum_sq);
      float* gi = grad_in;
      float* go = grad_out;
      for (size_t l = t->layers; l-- > 0;) {
        failed |= ops->backward(t->compute, acts[l % nacts], w, gi, dw, db, l > 0 ? go : NULL, t->rows, h);
        if (l > 0) {
          failed |= ops->relu_grad(t->compute, go, acts[l % nacts], n);
          float* s = gi;
          gi = go;
          go = s;
        }
      }
      if (failed) {
        fprintf(stderr, "zoe-train-mlp: compute_s: the compute failed on %s\n", ops->name);
        goto done;
      }
    }
    if (zoe_stream_synchronize(t->stream) != ZOE_SUCCESS) goto done;
    seconds = mlp_now() - t0;
  }
done:
  free(host);
  for (int i = r.count; i-- > 0;) zoe_device_free(t->device, r.p[i], r.bytes[i], t->stream);
  return seconds;
}

void mlp_trainer_close(mlp_trainer* t) {
  mlp_trainer_close_engine(t);
  if (t->compute != NULL) t->compute->ops->destroy(t->compute);
  t->compute = NULL;
  if (t->stream != NULL) zoe_stream_destroy(t->stream);
  t->stream = NULL;
  if (t->device != NULL) zoe_device_destroy(t->device);
  t->device = NULL;
  free(t->saved);
  t->saved = NULL;
  for (size_t l = 0; t->kept != NULL && l < t->layers; ++l) free(t->kept[l]);
  free(t->kept);
  t->kept = NULL;
}
