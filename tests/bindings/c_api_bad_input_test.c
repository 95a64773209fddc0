/* The C API from C (compiled as C99, so this also proves zoe.h is C): every bad input of issue 12
 * returns its status and a last error naming the problem, and a tiny training run works end to
 * end (offload to NVMe in a scratch folder, loss falling, checkpoint round trip).
 *
 * One case per run: `c_api_bad_input_test CASE` (CTest registers each case); `--list` prints them.
 * Exit status 0: passed; 1: failed (the reason on stderr). Every case frees what it made, so the
 * run is clean under ASan's leak checker, error paths included. */
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zoe/zoe.h"

/* ---- checks ---------------------------------------------------------------------------------- */

static int check_status(zoe_status got, zoe_status want, const char* words, const char* call, int line) {
  const char* message = zoe_last_error();
  if (got != want) {
    fprintf(stderr, "line %d: %s returned %s (%d), expected %s; last error: %s\n", line, call, zoe_status_string(got),
            (int)got, zoe_status_string(want), message);
    return 0;
  }
  if (want != ZOE_SUCCESS && words != NULL && strstr(message, words) == NULL) {
    fprintf(stderr, "line %d: %s: the last error \"%s\" does not contain \"%s\"\n", line, call, message, words);
    return 0;
  }
  return 1;
}

/* `call` returns `status`, and on failure the last error contains `words` (NULL: any). */
#define ZOE_EXPECT_STATUS(call, status, words)                                \
  do {                                                                        \
    if (!check_status((call), (status), (words), #call, __LINE__)) goto fail; \
  } while (0)
#define ZOE_EXPECT_OK(call) ZOE_EXPECT_STATUS(call, ZOE_SUCCESS, NULL)
#define ZOE_EXPECT_USAGE(call, words) ZOE_EXPECT_STATUS(call, ZOE_ERROR_USAGE, words)
#define ZOE_EXPECT_TRUE(cond)                                     \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "line %d: expected %s\n", __LINE__, #cond); \
      goto fail;                                                  \
    }                                                             \
  } while (0)

/* ---- a scratch folder on a real disk ----------------------------------------------------------- */

static int remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* A new folder under $ZOE_TEST_DIR, else /var/tmp (a real disk: /tmp may be tmpfs, which refuses
 * O_DIRECT). 0 when it cannot be made. */
static int make_scratch(char* path, size_t capacity) {
  const char* parent = getenv("ZOE_TEST_DIR");
  if (parent == NULL || parent[0] == '\0') parent = "/var/tmp";
  if ((size_t)snprintf(path, capacity, "%s/zoe-capi-XXXXXX", parent) >= capacity) return 0;
  if (mkdtemp(path) == NULL) {
    fprintf(stderr, "mkdtemp under %s failed\n", parent);
    return 0;
  }
  return 1;
}

static void remove_tree(const char* path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- a small model and its engine ---------------------------------------------------------------- */

enum { in_size = 8, hidden_size = 4, sample_count = 6 };

/* Two modules: layer0 holds W (hidden_size x in_size), layer1 holds v (hidden_size); y = v . (W x). */
typedef struct rig {
  char dir[512];
  zoe_device* device;
  zoe_stream* stream;
  zoe_model* model;
  zoe_engine* engine;
  zoe_module_id layer0, layer1;
  zoe_parameter_id w, v;
} rig;

static int add_parameter(zoe_model* model, zoe_module_id module, const char* name, size_t ndim, const uint64_t* shape,
                         uint64_t seed, zoe_parameter_id* id) {
  zoe_parameter_desc d = ZOE_PARAMETER_DESC_INIT;
  d.name = name;
  d.ndim = ndim;
  d.shape = shape;
  d.dtype = ZOE_FP32;
  d.init = ZOE_INIT_NORMAL;
  d.scale = 0.5f;
  d.seed = seed;
  return check_status(zoe_model_add_parameter(model, module, &d, id), ZOE_SUCCESS, NULL, "zoe_model_add_parameter",
                      __LINE__);
}

static int build_model(rig* r) {
  static const uint64_t w_shape[2] = {hidden_size, in_size};
  static const uint64_t v_shape[1] = {hidden_size};
  if (!check_status(zoe_model_create(&r->model), ZOE_SUCCESS, NULL, "zoe_model_create", __LINE__)) return 0;
  if (!check_status(zoe_model_add_module(r->model, "layer0", &r->layer0), ZOE_SUCCESS, NULL, "add layer0", __LINE__))
    return 0;
  if (!check_status(zoe_model_add_module(r->model, "layer1", &r->layer1), ZOE_SUCCESS, NULL, "add layer1", __LINE__))
    return 0;
  return add_parameter(r->model, r->layer0, "layer0.w", 2, w_shape, 1, &r->w) &&
         add_parameter(r->model, r->layer1, "layer1.v", 1, v_shape, 2, &r->v);
}

/* Stage 3 with the working copies and the optimizer states on NVMe in the rig's folder; small aio
 * blocks and few small swap buffers, so the run takes little memory and time; a pinned share for
 * activations that holds one of activation_round_trip's two, so the other goes to NVMe. */
static int config_json(const rig* r, char* out, size_t capacity) {
  const int n = snprintf(out, capacity,
                         "{\"zero_optimization\": {\"stage\": 3, \"sub_group_size\": 3000,"
                         " \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"%s\", \"buffer_count\": 2,"
                         " \"buffer_size\": 65536, \"max_in_cpu\": 0},"
                         " \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\"}},"
                         " \"aio\": {\"block_size\": 65536},"
                         " \"gradient_clipping\": 0,"
                         " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.01}},"
                         " \"zoe\": {\"device\": {\"kind\": \"host\", \"budget_bytes\": 268435456},"
                         " \"activations\": {\"host_bytes\": 16384, \"nvme_bytes\": 262144,"
                         " \"prefetch_bytes\": 16384}}}",
                         r->dir, r->dir);
  return n > 0 && (size_t)n < capacity;
}

/* with_device: the rig opens its own device and stream; else the engine opens the config's. */
static int rig_open(rig* r, int with_device) {
  char config[2048];
  zoe_engine_desc desc = ZOE_ENGINE_DESC_INIT;
  memset(r, 0, sizeof *r);
  if (!make_scratch(r->dir, sizeof r->dir)) return 0;
  if (!build_model(r) || !config_json(r, config, sizeof config)) return 0;
  if (with_device) {
    zoe_device_options o = ZOE_DEVICE_OPTIONS_INIT;
    o.kind = ZOE_DEVICE_HOST;
    o.budget_bytes = 256u << 20;
    if (!check_status(zoe_device_create(&o, &r->device), ZOE_SUCCESS, NULL, "zoe_device_create", __LINE__)) return 0;
    if (!check_status(zoe_stream_create(r->device, &r->stream), ZOE_SUCCESS, NULL, "zoe_stream_create", __LINE__))
      return 0;
  }
  desc.config_json = config;
  desc.model = r->model;
  desc.device = r->device;
  return check_status(zoe_engine_create(&desc, &r->engine), ZOE_SUCCESS, NULL, "zoe_engine_create", __LINE__);
}

/* Destroys what rig_open made (whatever got made) and removes the folder. */
static int rig_close(rig* r) {
  int ok = 1;
  if (r->engine != NULL) ok &= zoe_engine_destroy(r->engine) == ZOE_SUCCESS;
  if (r->stream != NULL) ok &= zoe_stream_destroy(r->stream) == ZOE_SUCCESS;
  if (r->device != NULL) ok &= zoe_device_destroy(r->device) == ZOE_SUCCESS;
  if (r->model != NULL) ok &= zoe_model_destroy(r->model) == ZOE_SUCCESS;
  if (r->dir[0] != '\0') remove_tree(r->dir);
  if (!ok) fprintf(stderr, "closing the rig failed: %s\n", zoe_last_error());
  return ok;
}

/* ---- the training task ------------------------------------------------------------------------ */

static float input(int sample, int i) { return (float)sin(0.7 * sample + 1.3 * i); }
static float target(int sample) { return (float)cos(0.5 * sample); }

/* One step of sample_count samples: forward through both modules, backward in reverse, gradients of the
 * mean squared error handed in; returns the loss before the step through *loss. On the host
 * device the parameter pointers are host memory: compute there once the stream is synchronized. */
static int train_step(rig* r, double lr, double* loss, zoe_step_result* result) {
  float h[sample_count][hidden_size], err[sample_count];
  float *w, *v, *gw, *gv;
  void* address;
  void* grads[1];
  double scale, total = 0;
  int s, j, i;
  ZOE_EXPECT_OK(zoe_loss_scale(r->engine, &scale));
  ZOE_EXPECT_OK(zoe_begin_micro_batch(r->engine));
  /* forward */
  ZOE_EXPECT_OK(zoe_fetch(r->engine, r->layer0, ZOE_PASS_FORWARD, r->stream));
  ZOE_EXPECT_OK(zoe_parameter_address(r->engine, r->w, &address));
  ZOE_EXPECT_OK(zoe_stream_synchronize(r->stream));
  w = (float*)address;
  for (s = 0; s < sample_count; ++s) {
    for (j = 0; j < hidden_size; ++j) {
      h[s][j] = 0;
      for (i = 0; i < in_size; ++i) h[s][j] += w[j * in_size + i] * input(s, i);
    }
  }
  ZOE_EXPECT_OK(zoe_release(r->engine, r->layer0, r->stream));
  ZOE_EXPECT_OK(zoe_fetch(r->engine, r->layer1, ZOE_PASS_FORWARD, r->stream));
  ZOE_EXPECT_OK(zoe_parameter_address(r->engine, r->v, &address));
  ZOE_EXPECT_OK(zoe_stream_synchronize(r->stream));
  v = (float*)address;
  for (s = 0; s < sample_count; ++s) {
    float y = 0;
    for (j = 0; j < hidden_size; ++j) y += v[j] * h[s][j];
    err[s] = y - target(s);
    total += (double)err[s] * err[s];
  }
  ZOE_EXPECT_OK(zoe_release(r->engine, r->layer1, r->stream));
  /* backward: d(loss)/dy = 2 err / sample_count */
  ZOE_EXPECT_OK(zoe_fetch(r->engine, r->layer1, ZOE_PASS_BACKWARD, r->stream));
  ZOE_EXPECT_OK(zoe_parameter_address(r->engine, r->v, &address));
  ZOE_EXPECT_OK(zoe_module_gradients(r->engine, r->layer1, r->stream, grads, 1));
  ZOE_EXPECT_OK(zoe_stream_synchronize(r->stream));
  v = (float*)address;
  gv = (float*)grads[0];
  for (j = 0; j < hidden_size; ++j) {
    gv[j] = 0;
    for (s = 0; s < sample_count; ++s) gv[j] += (float)(scale * 2 * err[s] / sample_count) * h[s][j];
  }
  {
    float dh[sample_count][hidden_size];
    for (s = 0; s < sample_count; ++s) {
      for (j = 0; j < hidden_size; ++j) dh[s][j] = (float)(scale * 2 * err[s] / sample_count) * v[j];
    }
    ZOE_EXPECT_OK(zoe_reduce_gradients(r->engine, r->layer1, r->stream));
    ZOE_EXPECT_OK(zoe_release(r->engine, r->layer1, r->stream));
    ZOE_EXPECT_OK(zoe_fetch(r->engine, r->layer0, ZOE_PASS_BACKWARD, r->stream));
    ZOE_EXPECT_OK(zoe_module_gradients(r->engine, r->layer0, r->stream, grads, 1));
    ZOE_EXPECT_OK(zoe_stream_synchronize(r->stream));
    gw = (float*)grads[0];
    for (j = 0; j < hidden_size; ++j) {
      for (i = 0; i < in_size; ++i) {
        gw[j * in_size + i] = 0;
        for (s = 0; s < sample_count; ++s) gw[j * in_size + i] += dh[s][j] * input(s, i);
      }
    }
  }
  ZOE_EXPECT_OK(zoe_reduce_gradients(r->engine, r->layer0, r->stream));
  ZOE_EXPECT_OK(zoe_release(r->engine, r->layer0, r->stream));
  ZOE_EXPECT_OK(zoe_end_micro_batch(r->engine));
  ZOE_EXPECT_OK(zoe_step(r->engine, lr, result));
  *loss = total / sample_count;
  return 1;
fail:
  return 0;
}

/* ---- the cases ------------------------------------------------------------------------------- */

static int status_names(void) {
  ZOE_EXPECT_TRUE(strcmp(zoe_status_string(ZOE_SUCCESS), "success") == 0);
  ZOE_EXPECT_TRUE(strcmp(zoe_status_string(ZOE_ERROR_USAGE), "usage") == 0);
  ZOE_EXPECT_TRUE(strcmp(zoe_status_string(ZOE_ERROR_TIMEOUT), "timeout") == 0);
  ZOE_EXPECT_TRUE(strcmp(zoe_status_string((zoe_status)42), "unknown") == 0);
  ZOE_EXPECT_TRUE(strcmp(zoe_last_error(), "") == 0);
  ZOE_EXPECT_TRUE(strlen(zoe_version()) >= 5);
  return 1;
fail:
  return 0;
}

static int null_handles(void) {
  zoe_device* device = NULL;
  zoe_stream* stream = NULL;
  zoe_model* model = NULL;
  zoe_engine* engine = NULL;
  zoe_module_id module;
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  zoe_device_kind kind;
  double scale;
  void* p;
  float value;
  size_t length;
  ZOE_EXPECT_USAGE(zoe_device_destroy(NULL), "device is NULL");
  ZOE_EXPECT_USAGE(zoe_device_get_kind(NULL, &kind), "device is NULL");
  ZOE_EXPECT_USAGE(zoe_stream_create(NULL, &stream), "device is NULL");
  ZOE_EXPECT_USAGE(zoe_stream_destroy(NULL), "stream is NULL");
  ZOE_EXPECT_USAGE(zoe_stream_synchronize(NULL), "stream is NULL");
  ZOE_EXPECT_USAGE(zoe_device_allocate(NULL, 16, NULL, &p), "device is NULL");
  ZOE_EXPECT_USAGE(zoe_model_destroy(NULL), "model is NULL");
  ZOE_EXPECT_USAGE(zoe_model_add_module(NULL, "m", &module), "model is NULL");
  ZOE_EXPECT_USAGE(zoe_engine_destroy(NULL), "engine is NULL");
  ZOE_EXPECT_USAGE(zoe_begin_micro_batch(NULL), "engine is NULL");
  ZOE_EXPECT_USAGE(zoe_fetch(NULL, 0, ZOE_PASS_FORWARD, NULL), "engine is NULL");
  ZOE_EXPECT_USAGE(zoe_release(NULL, 0, NULL), "engine is NULL");
  ZOE_EXPECT_USAGE(zoe_step(NULL, 1e-3, &result), "engine is NULL");
  ZOE_EXPECT_USAGE(zoe_loss_scale(NULL, &scale), "engine is NULL");
  ZOE_EXPECT_USAGE(zoe_read_state(NULL, 0, ZOE_STATE_PARAMETER, &value, 1), "engine is NULL");
  ZOE_EXPECT_USAGE(zoe_statistics(NULL, NULL, 0, &length), "engine is NULL");
  ZOE_EXPECT_USAGE(zoe_activation_free(NULL, 0, NULL), "engine is NULL");
  /* NULL out-parameters and arguments */
  ZOE_EXPECT_USAGE(zoe_model_create(NULL), "model (the out-parameter) is NULL");
  ZOE_EXPECT_OK(zoe_model_create(&model));
  ZOE_EXPECT_USAGE(zoe_model_add_module(model, NULL, &module), "name is NULL");
  ZOE_EXPECT_USAGE(zoe_model_add_module(model, "m", NULL), "module (the out-parameter) is NULL");
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, 0, NULL, NULL), "zoe_parameter_desc pointer is NULL");
  ZOE_EXPECT_USAGE(zoe_device_create(NULL, &device), "zoe_device_options pointer is NULL");
  ZOE_EXPECT_USAGE(zoe_engine_create(NULL, &engine), "zoe_engine_desc pointer is NULL");
  ZOE_EXPECT_OK(zoe_model_destroy(model));
  ZOE_EXPECT_TRUE(device == NULL && engine == NULL && stream == NULL);
  return 1;
fail:
  return 0;
}

static int destroyed_handles(void) {
  rig r;
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  zoe_model* model;
  zoe_module_id module;
  zoe_device* device;
  zoe_stream* stream;
  zoe_device_options o = ZOE_DEVICE_OPTIONS_INIT;
  void* p;
  int fake = 0;
  memset(&r, 0, sizeof r);
  o.kind = ZOE_DEVICE_HOST;
  o.budget_bytes = 1u << 20;
  /* a model */
  ZOE_EXPECT_OK(zoe_model_create(&model));
  ZOE_EXPECT_OK(zoe_model_destroy(model));
  ZOE_EXPECT_USAGE(zoe_model_add_module(model, "m", &module), "is not a live zoe_model (destroyed or never created)");
  ZOE_EXPECT_USAGE(zoe_model_destroy(model), "is not a live zoe_model");
  /* a stream, then its device */
  ZOE_EXPECT_OK(zoe_device_create(&o, &device));
  ZOE_EXPECT_OK(zoe_stream_create(device, &stream));
  ZOE_EXPECT_OK(zoe_stream_destroy(stream));
  ZOE_EXPECT_USAGE(zoe_stream_synchronize(stream), "is not a live zoe_stream");
  ZOE_EXPECT_USAGE(zoe_device_allocate(device, 64, stream, &p), "is not a live zoe_stream");
  ZOE_EXPECT_USAGE(zoe_stream_destroy(stream), "is not a live zoe_stream");
  ZOE_EXPECT_OK(zoe_device_destroy(device));
  ZOE_EXPECT_USAGE(zoe_stream_create(device, &stream), "is not a live zoe_device");
  ZOE_EXPECT_USAGE(zoe_device_destroy(device), "is not a live zoe_device");
  /* a handle zoe never made */
  ZOE_EXPECT_USAGE(zoe_begin_micro_batch((zoe_engine*)&fake), "is not a live zoe_engine (destroyed or never created)");
  /* an engine */
  if (!rig_open(&r, 1)) goto fail;
  ZOE_EXPECT_OK(zoe_engine_destroy(r.engine));
  {
    zoe_engine* gone = r.engine;
    r.engine = NULL;
    ZOE_EXPECT_USAGE(zoe_fetch(gone, r.layer0, ZOE_PASS_FORWARD, r.stream), "is not a live zoe_engine");
    ZOE_EXPECT_USAGE(zoe_step(gone, 1e-3, &result), "is not a live zoe_engine");
    ZOE_EXPECT_USAGE(zoe_engine_destroy(gone), "is not a live zoe_engine");
  }
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

static int device_in_use(void) {
  rig r;
  zoe_device* owned;
  zoe_stream* stream;
  if (!rig_open(&r, 1)) goto fail;
  /* the rig's device has its stream and the engine */
  ZOE_EXPECT_USAGE(zoe_device_destroy(r.device), "is still used by 2 streams and engines");
  if (!rig_close(&r)) return 0;
  /* an engine that opened its own device: that device is the engine's to close */
  if (!rig_open(&r, 0)) goto fail;
  ZOE_EXPECT_OK(zoe_engine_device(r.engine, &owned));
  ZOE_EXPECT_USAGE(zoe_device_destroy(owned), "was opened by engine");
  ZOE_EXPECT_OK(zoe_stream_create(owned, &stream));
  ZOE_EXPECT_USAGE(zoe_engine_destroy(r.engine), "still has 1 streams");
  ZOE_EXPECT_OK(zoe_stream_destroy(stream));
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

static int wrong_stream_device(void) {
  rig r;
  zoe_device* other;
  zoe_stream* foreign;
  zoe_device_options o = ZOE_DEVICE_OPTIONS_INIT;
  o.kind = ZOE_DEVICE_HOST;
  o.budget_bytes = 1u << 20;
  if (!rig_open(&r, 1)) goto fail;
  ZOE_EXPECT_OK(zoe_device_create(&o, &other));
  ZOE_EXPECT_OK(zoe_stream_create(other, &foreign));
  ZOE_EXPECT_OK(zoe_begin_micro_batch(r.engine));
  ZOE_EXPECT_USAGE(zoe_fetch(r.engine, r.layer0, ZOE_PASS_FORWARD, foreign), "belongs to device");
  ZOE_EXPECT_OK(zoe_end_micro_batch(r.engine));
  ZOE_EXPECT_OK(zoe_stream_destroy(foreign));
  ZOE_EXPECT_OK(zoe_device_destroy(other));
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

static int struct_sizes(void) {
  rig r;
  zoe_device_options o = ZOE_DEVICE_OPTIONS_INIT;
  zoe_parameter_desc d = ZOE_PARAMETER_DESC_INIT;
  zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  zoe_stage_times times = ZOE_STAGE_TIMES_INIT;
  zoe_device* device = NULL;
  zoe_engine* engine = NULL;
  zoe_parameter_id id;
  static const uint64_t shape[1] = {4};
  if (!rig_open(&r, 1)) goto fail;
  o.struct_size = 0;
  ZOE_EXPECT_USAGE(zoe_device_create(&o, &device), "zoe_device_options.struct_size is 0");
  d.struct_size = 0;
  d.name = "p";
  d.ndim = 1;
  d.shape = shape;
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(r.model, r.layer0, &d, &id), "zoe_parameter_desc.struct_size is 0");
  d.struct_size = offsetof(zoe_parameter_desc, seed) + 4; /* part of the seed missing: a struct cut short */
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(r.model, r.layer0, &d, &id), "zoe_parameter_desc.struct_size");
  e.struct_size = 0;
  e.config_json = "{}";
  e.model = r.model;
  ZOE_EXPECT_USAGE(zoe_engine_create(&e, &engine), "zoe_engine_desc.struct_size is 0");
  result.struct_size = 0;
  ZOE_EXPECT_USAGE(zoe_step(r.engine, 1e-3, &result), "zoe_step_result.struct_size is 0");
  times.struct_size = 0;
  ZOE_EXPECT_USAGE(zoe_measure_stages(r.engine, &times), "zoe_stage_times.struct_size is 0");
  ZOE_EXPECT_TRUE(device == NULL && engine == NULL);
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

static int bad_parameters(void) {
  zoe_model* model;
  zoe_module_id module, again;
  zoe_parameter_id id;
  zoe_parameter_desc d = ZOE_PARAMETER_DESC_INIT;
  static const uint64_t shape[2] = {3, 4};
  static const uint64_t zero_extent[2] = {3, 0};
  ZOE_EXPECT_OK(zoe_model_create(&model));
  ZOE_EXPECT_OK(zoe_model_add_module(model, "block", &module));
  ZOE_EXPECT_USAGE(zoe_model_add_module(model, "block", &again), "module name 'block' is already in the model");
  d.ndim = 2;
  d.shape = shape;
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, module, &d, &id), "zoe_parameter_desc.name is NULL");
  d.name = "block.w";
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, 7, &d, &id), "module 7 is not a module of this model");
  d.shape = zero_extent;
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, module, &d, &id), "parameter 'block.w': extent 1 of its shape is 0");
  d.shape = NULL;
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, module, &d, &id), "parameter 'block.w': shape is NULL");
  d.shape = shape;
  d.dtype = (zoe_dtype)9;
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, module, &d, &id), "parameter 'block.w': dtype 9 is not a zoe_dtype");
  d.dtype = ZOE_BF16;
  d.init = (zoe_init)11;
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, module, &d, &id), "parameter 'block.w': init 11 is not a zoe_init");
  d.init = ZOE_INIT_DATA;
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, module, &d, &id), "ZOE_INIT_DATA with data NULL");
  d.init = ZOE_INIT_UNIFORM;
  d.scale = -1.0f;
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, module, &d, &id), "scale -1 is not a finite number >= 0");
  d.scale = 0.1f;
  ZOE_EXPECT_OK(zoe_model_add_parameter(model, module, &d, &id));
  ZOE_EXPECT_TRUE(id == 0);
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, module, &d, &id), "parameter name 'block.w' is already in the model");
  ZOE_EXPECT_OK(zoe_model_destroy(model));
  return 1;
fail:
  zoe_model_destroy(model);
  return 0;
}

static int initializers(void) {
  float whole[64], part[16], again[64];
  double sum = 0;
  int i;
  ZOE_EXPECT_USAGE(zoe_initializer_fill(ZOE_INIT_DATA, 1.0f, 1, 0, whole, 64), "ZOE_INIT_DATA");
  ZOE_EXPECT_USAGE(zoe_initializer_fill((zoe_init)5, 1.0f, 1, 0, whole, 64), "init 5 is not a seeded initializer");
  ZOE_EXPECT_USAGE(zoe_initializer_fill(ZOE_INIT_NORMAL, 1.0f, 1, 0, NULL, 64), "values is NULL");
  ZOE_EXPECT_USAGE(zoe_initializer_fill(ZOE_INIT_NORMAL, NAN, 1, 0, whole, 64), "is not a finite number");
  /* element i depends only on (init, scale, seed, i): a piece equals the same piece of the whole */
  ZOE_EXPECT_OK(zoe_initializer_fill(ZOE_INIT_UNIFORM, 0.25f, 7, 0, whole, 64));
  ZOE_EXPECT_OK(zoe_initializer_fill(ZOE_INIT_UNIFORM, 0.25f, 7, 40, part, 16));
  ZOE_EXPECT_TRUE(memcmp(whole + 40, part, sizeof part) == 0);
  for (i = 0; i < 64; ++i) ZOE_EXPECT_TRUE(whole[i] >= -0.25f && whole[i] < 0.25f);
  ZOE_EXPECT_OK(zoe_initializer_fill(ZOE_INIT_UNIFORM, 0.25f, 8, 0, again, 64));
  ZOE_EXPECT_TRUE(memcmp(whole, again, sizeof whole) != 0);
  ZOE_EXPECT_OK(zoe_initializer_fill(ZOE_INIT_NORMAL, 2.0f, 7, 0, whole, 64));
  ZOE_EXPECT_OK(zoe_initializer_fill(ZOE_INIT_NORMAL, 2.0f, 7, 48, part, 16));
  ZOE_EXPECT_TRUE(memcmp(whole + 48, part, sizeof part) == 0);
  for (i = 0; i < 64; ++i) sum += whole[i];
  ZOE_EXPECT_TRUE(fabs(sum / 64) < 1.0); /* mean 0, standard error 2/8 */
  ZOE_EXPECT_OK(zoe_initializer_fill(ZOE_INIT_ZEROS, 0.0f, 0, 0, whole, 64));
  for (i = 0; i < 64; ++i) ZOE_EXPECT_TRUE(whole[i] == 0.0f);
  return 1;
fail:
  return 0;
}

static int bad_configs(void) {
  rig r;
  char path[600];
  zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
  zoe_engine* engine = NULL;
  if (!rig_open(&r, 1)) goto fail;
  e.model = r.model;
  e.device = r.device;
  ZOE_EXPECT_USAGE(zoe_engine_create(&e, &engine), "give exactly one of config_json and config_path (neither is set");
  e.config_json = "{}";
  e.config_path = "/nonexistent.json";
  ZOE_EXPECT_USAGE(zoe_engine_create(&e, &engine), "(both are set");
  e.config_json = NULL;
  snprintf(path, sizeof path, "%s/missing.json", r.dir);
  e.config_path = path;
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG, "missing.json");
  e.config_path = NULL;
  e.config_json = "{\"zero_optimization\": {\"stage\": 7}}";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG, "zero_optimization.stage");
  e.config_json = "{\"zero_optimization\": ";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG, NULL);
  /* An error about the user's configuration names the key, never a source file of zoe's build
   * (this one is found while planning the footprint, past the reader). */
  e.config_json = "{\"zoe\": {\"activations\": {\"nvme_bytes\": 4096}}}";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG, "zoe.activations.nvme_bytes");
  ZOE_EXPECT_TRUE(strstr(zoe_last_error(), ".cpp") == NULL);
  ZOE_EXPECT_TRUE(engine == NULL);
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

/* the calls out of order of one micro-batch, each refused naming what is wrong */
static int out_of_order(void) {
  rig r;
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  void* grads[2];
  void* address;
  float values[hidden_size * in_size];
  if (!rig_open(&r, 1)) goto fail;
  ZOE_EXPECT_USAGE(zoe_step(r.engine, 1e-3, &result), "no gradient was reduced in this step");
  ZOE_EXPECT_USAGE(zoe_fetch(r.engine, r.layer0, ZOE_PASS_BACKWARD, r.stream), "no micro-batch is open");
  ZOE_EXPECT_USAGE(zoe_end_micro_batch(r.engine), "no micro-batch is open");
  ZOE_EXPECT_OK(zoe_begin_micro_batch(r.engine));
  ZOE_EXPECT_USAGE(zoe_begin_micro_batch(r.engine), "a micro-batch is open: end it with zoe_end_micro_batch first");
  ZOE_EXPECT_USAGE(zoe_fetch(r.engine, 99, ZOE_PASS_FORWARD, r.stream), "module 99 is not a module of this engine");
  ZOE_EXPECT_USAGE(zoe_fetch(r.engine, r.layer0, (zoe_pass)3, r.stream), "pass 3 is not a zoe_pass");
  ZOE_EXPECT_USAGE(zoe_release(r.engine, r.layer1, r.stream), "module 'layer1' is not fetched");
  ZOE_EXPECT_USAGE(zoe_parameter_address(r.engine, r.w, &address),
                   "parameter 'layer0.w': its module 'layer0' is not fetched");
  ZOE_EXPECT_USAGE(zoe_parameter_address(r.engine, 17, &address), "parameter 17 is not a parameter of this engine");
  ZOE_EXPECT_OK(zoe_fetch(r.engine, r.layer0, ZOE_PASS_FORWARD, r.stream));
  ZOE_EXPECT_USAGE(zoe_fetch(r.engine, r.layer0, ZOE_PASS_BACKWARD, r.stream), "module 'layer0' is already fetched");
  ZOE_EXPECT_USAGE(zoe_module_gradients(r.engine, r.layer0, r.stream, grads, 1),
                   "module 'layer0' is not fetched for backward");
  ZOE_EXPECT_USAGE(zoe_end_micro_batch(r.engine), "module 'layer0' is still fetched");
  ZOE_EXPECT_USAGE(zoe_read_state(r.engine, r.w, ZOE_STATE_PARAMETER, values, hidden_size * in_size),
                   "a micro-batch is open");
  ZOE_EXPECT_OK(zoe_release(r.engine, r.layer0, r.stream));
  ZOE_EXPECT_OK(zoe_fetch(r.engine, r.layer1, ZOE_PASS_BACKWARD, r.stream));
  ZOE_EXPECT_USAGE(zoe_module_gradients(r.engine, r.layer1, r.stream, grads, 2),
                   "module 'layer1' has 1 parameters, so it has as many gradient buffers; count is 2");
  ZOE_EXPECT_USAGE(zoe_reduce_gradients(r.engine, r.layer1, r.stream),
                   "the gradients of module 'layer1' were not acquired");
  ZOE_EXPECT_OK(zoe_release(r.engine, r.layer1, r.stream));
  /* released without its gradients: the micro-batch cannot end until they are handed in */
  ZOE_EXPECT_USAGE(zoe_end_micro_batch(r.engine),
                   "module 'layer1' was fetched for backward and its gradients were not reduced");
  ZOE_EXPECT_OK(zoe_fetch(r.engine, r.layer1, ZOE_PASS_BACKWARD, r.stream));
  ZOE_EXPECT_OK(zoe_module_gradients(r.engine, r.layer1, r.stream, grads, 1));
  ZOE_EXPECT_USAGE(zoe_module_gradients(r.engine, r.layer1, r.stream, grads, 1),
                   "the gradients of module 'layer1' were already acquired");
  ZOE_EXPECT_USAGE(zoe_release(r.engine, r.layer1, r.stream), "module 'layer1' has gradients acquired and not reduced");
  ZOE_EXPECT_OK(zoe_reduce_gradients(r.engine, r.layer1, r.stream));
  ZOE_EXPECT_USAGE(zoe_reduce_gradients(r.engine, r.layer1, r.stream), "were already reduced");
  ZOE_EXPECT_OK(zoe_release(r.engine, r.layer1, r.stream));
  ZOE_EXPECT_USAGE(zoe_fetch(r.engine, r.layer1, ZOE_PASS_BACKWARD, r.stream), "were already handed in");
  ZOE_EXPECT_OK(zoe_end_micro_batch(r.engine));
  ZOE_EXPECT_USAGE(zoe_begin_micro_batch(r.engine), "call step() first");
  /* The Adam kernel computes in float: a learning rate beyond float's range (or NaN) is refused
   * naming it, before anything changes. */
  ZOE_EXPECT_USAGE(zoe_step(r.engine, 1e39, &result), "lr 1e+39 is not");
  ZOE_EXPECT_USAGE(zoe_step(r.engine, NAN, &result), "lr nan is not");
  ZOE_EXPECT_USAGE(zoe_step(r.engine, -1.0, &result), "lr -1 is not");
  ZOE_EXPECT_TRUE(strstr(zoe_last_error(), ".cpp") == NULL);
  ZOE_EXPECT_OK(zoe_step(r.engine, 1e-3, &result));
  ZOE_EXPECT_TRUE(result.skipped == 0 && result.optimizer_steps == 1);
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

static int wrong_sizes_and_states(void) {
  rig r;
  float values[hidden_size * in_size];
  uint64_t numel;
  if (!rig_open(&r, 1)) goto fail;
  ZOE_EXPECT_OK(zoe_parameter_numel(r.engine, r.w, &numel));
  ZOE_EXPECT_TRUE(numel == hidden_size * in_size);
  ZOE_EXPECT_USAGE(zoe_parameter_numel(r.engine, 5, &numel),
                   "parameter 5 is not a parameter of this engine (it has 2)");
  ZOE_EXPECT_USAGE(zoe_read_state(r.engine, r.w, ZOE_STATE_PARAMETER, values, 3),
                   "parameter 'layer0.w' has 32 elements; count is 3");
  ZOE_EXPECT_USAGE(zoe_read_state(r.engine, r.w, (zoe_state)8, values, hidden_size * in_size),
                   "state 8 is not a zoe_state");
  ZOE_EXPECT_USAGE(zoe_read_state(r.engine, r.w, ZOE_STATE_PARAMETER, NULL, hidden_size * in_size), "values is NULL");
  ZOE_EXPECT_OK(zoe_read_state(r.engine, r.w, ZOE_STATE_PARAMETER, values, hidden_size * in_size));
  {
    /* the seeded initial value, as zoe_initializer_fill gives it */
    float expected[hidden_size * in_size];
    ZOE_EXPECT_OK(zoe_initializer_fill(ZOE_INIT_NORMAL, 0.5f, 1, 0, expected, hidden_size * in_size));
    ZOE_EXPECT_TRUE(memcmp(values, expected, sizeof values) == 0);
  }
  {
    zoe_device_options o = ZOE_DEVICE_OPTIONS_INIT;
    zoe_device* device = NULL;
    void* p = NULL;
    o.kind = (zoe_device_kind)9;
    ZOE_EXPECT_STATUS(zoe_device_create(&o, &device), ZOE_ERROR_CONFIG, "kind 9 is not a zoe_device_kind");
    ZOE_EXPECT_USAGE(zoe_copy_async(r.device, values, values, 4, (zoe_copy_kind)5, r.stream), "copy kind 5");
    ZOE_EXPECT_USAGE(zoe_device_allocate(r.device, 0, r.stream, &p), "0 bytes");
    ZOE_EXPECT_STATUS(zoe_device_allocate(r.device, (size_t)1 << 40, r.stream, &p), ZOE_ERROR_MEMORY, NULL);
    ZOE_EXPECT_TRUE(device == NULL && p == NULL);
  }
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

static int activations_out_of_order(void) {
  rig r;
  zoe_activation_id a;
  void* p;
  void* buffer = NULL;
  if (!rig_open(&r, 1)) goto fail;
  ZOE_EXPECT_OK(zoe_device_allocate(r.device, 256, r.stream, &buffer));
  /* a wrong size or a pointer the device did not hand out is refused, and frees nothing */
  ZOE_EXPECT_USAGE(zoe_device_free(r.device, buffer, 128, r.stream), "allocated with 256 bytes, not 128");
  ZOE_EXPECT_USAGE(zoe_device_free(r.device, (char*)buffer + 64, 192, r.stream), "was not allocated");
  ZOE_EXPECT_USAGE(zoe_activation_save(r.engine, buffer, 256, r.stream, &a), "no micro-batch is open");
  ZOE_EXPECT_OK(zoe_begin_micro_batch(r.engine));
  ZOE_EXPECT_USAGE(zoe_activation_save(r.engine, NULL, 256, r.stream, &a), "pointer is NULL");
  ZOE_EXPECT_USAGE(zoe_activation_save(r.engine, buffer, 0, r.stream, &a), "0 bytes");
  ZOE_EXPECT_USAGE(zoe_activation_load(r.engine, 12345, r.stream, &p), "12345");
  ZOE_EXPECT_USAGE(zoe_activation_free(r.engine, 12345, r.stream), "12345");
  ZOE_EXPECT_OK(zoe_end_micro_batch(r.engine));
  ZOE_EXPECT_OK(zoe_device_free(r.device, buffer, 256, r.stream));
  ZOE_EXPECT_USAGE(zoe_device_free(r.device, buffer, 256, r.stream), "or was freed already");
  return rig_close(&r);
fail:
  if (buffer != NULL) zoe_device_free(r.device, buffer, 256, r.stream);
  rig_close(&r);
  return 0;
}

/* two activations saved in forward come back intact in backward (in reverse order), after their
 * device buffers were overwritten */
static int activation_round_trip(void) {
  rig r;
  enum { activation_bytes = 3 * 4096 + 100 };
  static unsigned char pattern[2][activation_bytes], back[activation_bytes];
  void* buffer = NULL;
  void* loaded;
  zoe_activation_id ids[2];
  int a, i;
  memset(&r, 0, sizeof r);
  if (!rig_open(&r, 1)) goto fail;
  ZOE_EXPECT_OK(zoe_device_allocate(r.device, activation_bytes, r.stream, &buffer));
  ZOE_EXPECT_OK(zoe_begin_micro_batch(r.engine));
  for (a = 0; a < 2; ++a) {
    for (i = 0; i < activation_bytes; ++i) pattern[a][i] = (unsigned char)(i * (a + 3) + a);
    ZOE_EXPECT_OK(zoe_copy_async(r.device, buffer, pattern[a], activation_bytes, ZOE_COPY_HOST_TO_DEVICE, r.stream));
    ZOE_EXPECT_OK(zoe_activation_save(r.engine, buffer, activation_bytes, r.stream, &ids[a]));
  }
  ZOE_EXPECT_TRUE(ids[0] != ids[1]);
  memset(back, 0, sizeof back);
  ZOE_EXPECT_OK(zoe_copy_async(r.device, buffer, back, activation_bytes, ZOE_COPY_HOST_TO_DEVICE, r.stream));
  for (a = 1; a >= 0; --a) {
    ZOE_EXPECT_OK(zoe_activation_load(r.engine, ids[a], r.stream, &loaded));
    ZOE_EXPECT_USAGE(zoe_activation_load(r.engine, ids[a], r.stream, &loaded), NULL); /* already loaded */
    ZOE_EXPECT_OK(zoe_copy_async(r.device, back, loaded, activation_bytes, ZOE_COPY_DEVICE_TO_HOST, r.stream));
    ZOE_EXPECT_OK(zoe_stream_synchronize(r.stream));
    ZOE_EXPECT_TRUE(memcmp(back, pattern[a], activation_bytes) == 0);
    ZOE_EXPECT_OK(zoe_activation_free(r.engine, ids[a], r.stream));
  }
  ZOE_EXPECT_USAGE(zoe_activation_load(r.engine, ids[0], r.stream, &loaded), NULL); /* freed */
  ZOE_EXPECT_OK(zoe_end_micro_batch(r.engine));
  ZOE_EXPECT_OK(zoe_device_free(r.device, buffer, activation_bytes, r.stream));
  return rig_close(&r);
fail:
  if (buffer != NULL) zoe_device_free(r.device, buffer, activation_bytes, r.stream);
  rig_close(&r);
  return 0;
}

/* sizes near SIZE_MAX, and shapes whose element or byte counts overflow, are refused naming the
 * size: never rounded up past 64 bits to a small number (an activation of SIZE_MAX bytes took a
 * 0-byte slot of the pinned share and overflowed it) */
static int oversized_sizes(void) {
  static const size_t huge[2] = {SIZE_MAX, SIZE_MAX - 100};
  static const uint64_t elements_overflow[2] = {(uint64_t)1 << 32, (uint64_t)1 << 32};
  static const uint64_t bytes_overflow[1] = {(uint64_t)1 << 62}; /* 2^62 fp32 elements: 2^64 bytes */
  rig r;
  zoe_model* model = NULL;
  zoe_engine* engine = NULL;
  zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
  zoe_parameter_desc d = ZOE_PARAMETER_DESC_INIT;
  zoe_module_id module;
  zoe_parameter_id id;
  zoe_activation_id a = 0;
  char size_words[64];
  float values[64];
  void* buffer = NULL;
  void* p = NULL;
  int k;
  memset(&r, 0, sizeof r);
  if (!rig_open(&r, 1)) goto fail;
  ZOE_EXPECT_OK(zoe_device_allocate(r.device, 4096, r.stream, &buffer));
  ZOE_EXPECT_OK(zoe_begin_micro_batch(r.engine));
  for (k = 0; k < 2; ++k) {
    snprintf(size_words, sizeof size_words, "(%llu bytes)", (unsigned long long)huge[k]);
    ZOE_EXPECT_STATUS(zoe_activation_save(r.engine, buffer, huge[k], r.stream, &a), ZOE_ERROR_MEMORY, size_words);
    ZOE_EXPECT_STATUS(zoe_device_allocate(r.device, huge[k], r.stream, &p), ZOE_ERROR_MEMORY, "cannot allocate");
    snprintf(size_words, sizeof size_words, "copy of %llu bytes", (unsigned long long)huge[k]);
    ZOE_EXPECT_USAGE(zoe_copy_async(r.device, values, buffer, huge[k], ZOE_COPY_DEVICE_TO_HOST, r.stream), size_words);
  }
  ZOE_EXPECT_TRUE(a == 0 && p == NULL);
  /* nothing was taken: an activation that fits is still saved and comes back */
  ZOE_EXPECT_OK(zoe_activation_save(r.engine, buffer, 4096, r.stream, &a));
  ZOE_EXPECT_OK(zoe_activation_load(r.engine, a, r.stream, &p));
  ZOE_EXPECT_OK(zoe_activation_free(r.engine, a, r.stream));
  ZOE_EXPECT_OK(zoe_end_micro_batch(r.engine));
  /* element indices past 2^64 do not exist */
  ZOE_EXPECT_USAGE(zoe_initializer_fill(ZOE_INIT_UNIFORM, 1.0f, 1, UINT64_MAX - 10, values, 64),
                   "elements [18446744073709551605, +64)");
  ZOE_EXPECT_OK(zoe_initializer_fill(ZOE_INIT_UNIFORM, 1.0f, 1, UINT64_MAX - 64, values, 64));
  /* shapes */
  ZOE_EXPECT_OK(zoe_model_create(&model));
  ZOE_EXPECT_OK(zoe_model_add_module(model, "block", &module));
  d.name = "block.huge";
  d.ndim = 2;
  d.shape = elements_overflow;
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, module, &d, &id), "'block.huge': its element count overflows");
  d.ndim = SIZE_MAX;
  ZOE_EXPECT_USAGE(zoe_model_add_parameter(model, module, &d, &id), "ndim 18446744073709551615");
  d.ndim = 1;
  d.shape = bytes_overflow;
  ZOE_EXPECT_OK(zoe_model_add_parameter(model, module, &d, &id));
  e.config_json = "{}";
  e.model = model;
  e.device = r.device;
  ZOE_EXPECT_USAGE(zoe_engine_create(&e, &engine), "block.huge");
  ZOE_EXPECT_TRUE(engine == NULL);
  ZOE_EXPECT_OK(zoe_model_destroy(model));
  ZOE_EXPECT_OK(zoe_device_free(r.device, buffer, 4096, r.stream));
  return rig_close(&r);
fail:
  if (model != NULL) zoe_model_destroy(model);
  if (buffer != NULL) zoe_device_free(r.device, buffer, 4096, r.stream);
  rig_close(&r);
  return 0;
}

/* fetch, address, gradients and release are thread-safe for different modules: each module's
 * forward and backward run on a thread of its own, on a stream of its own */
typedef struct module_worker {
  rig* r;
  zoe_module_id module;
  zoe_parameter_id parameter;
  size_t numel;
  zoe_pass pass;
  zoe_stream* stream;
  int ok;
} module_worker;

static void* run_module(void* arg) {
  module_worker* w = (module_worker*)arg;
  void* address;
  void* grads[1];
  size_t i;
  w->ok = 0;
  ZOE_EXPECT_OK(zoe_fetch(w->r->engine, w->module, w->pass, w->stream));
  ZOE_EXPECT_OK(zoe_parameter_address(w->r->engine, w->parameter, &address));
  if (w->pass == ZOE_PASS_BACKWARD) {
    ZOE_EXPECT_OK(zoe_module_gradients(w->r->engine, w->module, w->stream, grads, 1));
    ZOE_EXPECT_OK(zoe_stream_synchronize(w->stream));
    for (i = 0; i < w->numel; ++i) ((float*)grads[0])[i] = 0.01f * (float)(i % 7) - 0.03f;
    ZOE_EXPECT_OK(zoe_reduce_gradients(w->r->engine, w->module, w->stream));
  }
  ZOE_EXPECT_OK(zoe_release(w->r->engine, w->module, w->stream));
  w->ok = 1;
fail:
  return NULL;
}

static int threads_on_different_modules(void) {
  rig r;
  module_worker workers[2];
  pthread_t threads[2];
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  int step, pass, t, started;
  memset(&r, 0, sizeof r);
  memset(workers, 0, sizeof workers);
  if (!rig_open(&r, 1)) goto fail;
  for (t = 0; t < 2; ++t) {
    workers[t].r = &r;
    workers[t].module = t == 0 ? r.layer0 : r.layer1;
    workers[t].parameter = t == 0 ? r.w : r.v;
    workers[t].numel = t == 0 ? hidden_size * in_size : hidden_size;
    ZOE_EXPECT_OK(zoe_stream_create(r.device, &workers[t].stream));
  }
  for (step = 0; step < 3; ++step) {
    ZOE_EXPECT_OK(zoe_begin_micro_batch(r.engine));
    for (pass = 0; pass < 2; ++pass) {
      started = 0;
      for (t = 0; t < 2; ++t) {
        workers[t].pass = pass == 0 ? ZOE_PASS_FORWARD : ZOE_PASS_BACKWARD;
        if (pthread_create(&threads[t], NULL, run_module, &workers[t]) == 0) ++started;
      }
      for (t = 0; t < started; ++t) pthread_join(threads[t], NULL);
      ZOE_EXPECT_TRUE(started == 2 && workers[0].ok && workers[1].ok);
    }
    ZOE_EXPECT_OK(zoe_end_micro_batch(r.engine));
    ZOE_EXPECT_OK(zoe_step(r.engine, 1e-3, &result));
    ZOE_EXPECT_TRUE(result.optimizer_steps == step + 1);
  }
  for (t = 0; t < 2; ++t) ZOE_EXPECT_OK(zoe_stream_destroy(workers[t].stream));
  return rig_close(&r);
fail:
  for (t = 0; t < 2; ++t) {
    if (workers[t].stream != NULL) zoe_stream_destroy(workers[t].stream);
  }
  rig_close(&r);
  return 0;
}

/* an engine destroyed in the middle of a micro-batch (a module fetched, gradients acquired, an
 * activation saved) frees everything; the gradient buffers' zero-fill, still queued on the
 * caller's stream, completes before their memory goes (under load this crashed ~3% of runs) */
static int destroy_mid_micro_batch(void) {
  rig r;
  void* grads[1];
  void* buffer = NULL;
  zoe_activation_id a;
  memset(&r, 0, sizeof r);
  if (!rig_open(&r, 1)) goto fail;
  ZOE_EXPECT_OK(zoe_device_allocate(r.device, 4096, r.stream, &buffer));
  ZOE_EXPECT_OK(zoe_begin_micro_batch(r.engine));
  ZOE_EXPECT_OK(zoe_fetch(r.engine, r.layer0, ZOE_PASS_FORWARD, r.stream));
  ZOE_EXPECT_OK(zoe_activation_save(r.engine, buffer, 4096, r.stream, &a));
  ZOE_EXPECT_OK(zoe_fetch(r.engine, r.layer1, ZOE_PASS_BACKWARD, r.stream));
  ZOE_EXPECT_OK(zoe_module_gradients(r.engine, r.layer1, r.stream, grads, 1));
  ZOE_EXPECT_OK(zoe_device_free(r.device, buffer, 4096, r.stream));
  buffer = NULL;
  return rig_close(&r);
fail:
  if (buffer != NULL) zoe_device_free(r.device, buffer, 4096, r.stream);
  rig_close(&r);
  return 0;
}

static int training_loss_falls(void) {
  rig r;
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  float before[hidden_size * in_size], after[hidden_size * in_size], moment[hidden_size * in_size];
  double first = 0, loss = 0;
  uint64_t current, peak, budget;
  zoe_stage_times times = ZOE_STAGE_TIMES_INIT;
  int step;
  if (!rig_open(&r, 1)) goto fail;
  ZOE_EXPECT_USAGE(zoe_measure_stages(r.engine, &times), "step");
  ZOE_EXPECT_OK(zoe_read_state(r.engine, r.w, ZOE_STATE_PARAMETER, before, hidden_size * in_size));
  for (step = 0; step < 8; ++step) {
    if (!train_step(&r, 0.05, &loss, &result)) goto fail;
    if (step == 0) first = loss;
    ZOE_EXPECT_TRUE(result.skipped == 0 && result.optimizer_steps == step + 1 && result.loss_scale == 1.0);
    ZOE_EXPECT_TRUE(isfinite(result.grad_norm) && result.grad_norm > 0);
  }
  fprintf(stderr, "loss %g -> %g\n", first, loss);
  ZOE_EXPECT_TRUE(loss < 0.5 * first);
  ZOE_EXPECT_OK(zoe_read_state(r.engine, r.w, ZOE_STATE_PARAMETER, after, hidden_size * in_size));
  ZOE_EXPECT_TRUE(memcmp(before, after, sizeof before) != 0);
  ZOE_EXPECT_OK(zoe_read_state(r.engine, r.w, ZOE_STATE_EXP_AVG_SQ, moment, hidden_size * in_size));
  ZOE_EXPECT_TRUE(moment[0] > 0);
  ZOE_EXPECT_OK(zoe_device_memory(r.device, &current, &peak, &budget));
  ZOE_EXPECT_TRUE(peak > 0 && peak <= budget && budget == 256u << 20);
  ZOE_EXPECT_OK(zoe_measure_stages(r.engine, &times));
  ZOE_EXPECT_TRUE(times.param_io_s > 0 && times.adam_s > 0 && times.optimizer_io_s > 0);
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

static int checkpoint_round_trip(void) {
  rig r;
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  float saved[hidden_size * in_size], moved[hidden_size * in_size], loaded[hidden_size * in_size];
  float saved_v[hidden_size], loaded_v[hidden_size];
  char root[600];
  double loss;
  if (!rig_open(&r, 1)) goto fail;
  snprintf(root, sizeof root, "%s/checkpoints", r.dir);
  if (!train_step(&r, 0.05, &loss, &result)) goto fail;
  ZOE_EXPECT_USAGE(zoe_checkpoint_save(r.engine, NULL, NULL), "directory is NULL");
  ZOE_EXPECT_OK(zoe_checkpoint_save(r.engine, root, "first"));
  ZOE_EXPECT_OK(zoe_read_state(r.engine, r.w, ZOE_STATE_EXP_AVG, saved, hidden_size * in_size));
  ZOE_EXPECT_OK(zoe_read_state(r.engine, r.v, ZOE_STATE_PARAMETER, saved_v, hidden_size));
  if (!train_step(&r, 0.05, &loss, &result)) goto fail;
  ZOE_EXPECT_OK(zoe_read_state(r.engine, r.w, ZOE_STATE_EXP_AVG, moved, hidden_size * in_size));
  ZOE_EXPECT_TRUE(memcmp(saved, moved, sizeof saved) != 0);
  ZOE_EXPECT_STATUS(zoe_checkpoint_load(r.engine, root, "no-such-tag"), ZOE_ERROR_CORRUPT, "no-such-tag");
  ZOE_EXPECT_OK(zoe_checkpoint_load(r.engine, root, NULL)); /* latest: "first" */
  ZOE_EXPECT_OK(zoe_read_state(r.engine, r.w, ZOE_STATE_EXP_AVG, loaded, hidden_size * in_size));
  ZOE_EXPECT_OK(zoe_read_state(r.engine, r.v, ZOE_STATE_PARAMETER, loaded_v, hidden_size));
  ZOE_EXPECT_TRUE(memcmp(saved, loaded, sizeof saved) == 0);
  ZOE_EXPECT_TRUE(memcmp(saved_v, loaded_v, sizeof saved_v) == 0);
  /* the load starts a new step: nothing handed in yet */
  ZOE_EXPECT_USAGE(zoe_step(r.engine, 1e-3, &result), "no gradient was reduced in this step");
  if (!train_step(&r, 0.05, &loss, &result)) goto fail;
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

static int statistics_length(void) {
  rig r;
  size_t length = 0, again = 0;
  char small[4] = {'x', 'x', 'x', 'x'};
  char* text = NULL;
  if (!rig_open(&r, 1)) goto fail;
  ZOE_EXPECT_USAGE(zoe_statistics(r.engine, NULL, 0, NULL), "length (the out-parameter) is NULL");
  ZOE_EXPECT_OK(zoe_statistics(r.engine, NULL, 0, &length));
  ZOE_EXPECT_TRUE(length > 2);
  ZOE_EXPECT_OK(zoe_statistics(r.engine, small, sizeof small, &again));
  ZOE_EXPECT_TRUE(again == length && small[0] == 'x'); /* too short: nothing written */
  text = malloc(length + 1);
  ZOE_EXPECT_TRUE(text != NULL);
  ZOE_EXPECT_OK(zoe_statistics(r.engine, text, length + 1, &again));
  ZOE_EXPECT_TRUE(again == length && strlen(text) == length && text[0] == '{' && text[length - 1] == '}');
  free(text);
  return rig_close(&r);
fail:
  free(text);
  rig_close(&r);
  return 0;
}

/* ---- ranks ----------------------------------------------------------------------------------- */

/* The launcher's variables zoe_launcher_ranks reads, cleared (and restored by restore_launcher). */
static const char* const launcher_names[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                             "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE"};
enum { launcher_name_count = sizeof launcher_names / sizeof launcher_names[0] };

static void clear_launcher(char saved[][64]) {
  size_t i;
  for (i = 0; i < launcher_name_count; ++i) {
    const char* v = getenv(launcher_names[i]);
    saved[i][0] = '\0';
    if (v != NULL) snprintf(saved[i], 64, "=%s", v); /* "=" marks a variable that was set */
    unsetenv(launcher_names[i]);
  }
}

static void restore_launcher(char saved[][64]) {
  size_t i;
  for (i = 0; i < launcher_name_count; ++i) {
    if (saved[i][0] == '=') {
      setenv(launcher_names[i], saved[i] + 1, 1);
    } else {
      unsetenv(launcher_names[i]);
    }
  }
}

/* zoe_launcher_ranks: rank 0 of 1 without a launcher, Open MPI's and PMI's variables read, bad
 * values refused naming the variable. */
static int launcher_environment(void) {
  char saved[launcher_name_count][64];
  zoe_ranks k = ZOE_RANKS_INIT;
  clear_launcher(saved);
  ZOE_EXPECT_USAGE(zoe_launcher_ranks(NULL), "zoe_ranks pointer is NULL");
  ZOE_EXPECT_OK(zoe_launcher_ranks(&k));
  ZOE_EXPECT_TRUE(k.rank == 0 && k.world_size == 1 && k.ranks_per_node == 1 && k.node == 0 && k.nodes == 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  ZOE_EXPECT_OK(zoe_launcher_ranks(&k));
  ZOE_EXPECT_TRUE(k.rank == 3 && k.world_size == 4 && k.ranks_per_node == 2 && k.node == 1 && k.local_rank == 1 &&
                  k.nodes == 2);
  setenv("OMPI_COMM_WORLD_RANK", "4", 1);
  ZOE_EXPECT_USAGE(zoe_launcher_ranks(&k), "must be below the size");
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "four", 1);
  ZOE_EXPECT_USAGE(zoe_launcher_ranks(&k), "OMPI_COMM_WORLD_SIZE is 'four'");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  setenv("PMI_SIZE", "3", 1);
  setenv("PMI_RANK", "2", 1);
  ZOE_EXPECT_OK(zoe_launcher_ranks(&k));
  ZOE_EXPECT_TRUE(k.rank == 2 && k.world_size == 3 && k.ranks_per_node == 3 && k.nodes == 1);
  setenv("PMI_RANK", "-1", 1);
  ZOE_EXPECT_USAGE(zoe_launcher_ranks(&k), "PMI_RANK");
  k.struct_size = 0;
  ZOE_EXPECT_USAGE(zoe_launcher_ranks(&k), "zoe_ranks.struct_size is 0");
  restore_launcher(saved);
  return 1;
fail:
  restore_launcher(saved);
  return 0;
}

/* The ranks calls on one rank: rank 0 of 1, a sum that leaves the values, traffic that counts
 * the collectives and sends nothing; and their bad input. */
static int ranks_at_one_rank(void) {
  rig r;
  zoe_ranks k = ZOE_RANKS_INIT;
  zoe_comm_traffic before = ZOE_COMM_TRAFFIC_INIT;
  zoe_comm_traffic after = ZOE_COMM_TRAFFIC_INIT;
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  double values[3] = {1.5, -2.0, 1e300};
  double loss = 0;
  if (!rig_open(&r, 1)) goto fail;
  ZOE_EXPECT_USAGE(zoe_engine_ranks(NULL, &k), "engine is NULL");
  ZOE_EXPECT_USAGE(zoe_engine_ranks(r.engine, NULL), "zoe_ranks pointer is NULL");
  k.struct_size = sizeof k - sizeof k.nodes; /* built against a header without the last field */
  ZOE_EXPECT_USAGE(zoe_engine_ranks(r.engine, &k), "zoe_ranks.struct_size");
  k.struct_size = sizeof k;
  ZOE_EXPECT_OK(zoe_engine_ranks(r.engine, &k));
  ZOE_EXPECT_TRUE(k.rank == 0 && k.world_size == 1 && k.ranks_per_node == 1 && k.node == 0 && k.local_rank == 0 &&
                  k.nodes == 1);

  ZOE_EXPECT_USAGE(zoe_all_reduce_sum(NULL, values, 3), "engine is NULL");
  ZOE_EXPECT_USAGE(zoe_all_reduce_sum(r.engine, NULL, 3), "values is NULL");
  ZOE_EXPECT_OK(zoe_all_reduce_sum(r.engine, NULL, 0));
  ZOE_EXPECT_OK(zoe_all_reduce_sum(r.engine, values, 3));
  ZOE_EXPECT_TRUE(values[0] == 1.5 && values[1] == -2.0 && values[2] == 1e300);

  ZOE_EXPECT_USAGE(zoe_engine_traffic(NULL, &before), "engine is NULL");
  ZOE_EXPECT_USAGE(zoe_engine_traffic(r.engine, NULL), "zoe_comm_traffic pointer is NULL");
  before.struct_size = 0;
  ZOE_EXPECT_USAGE(zoe_engine_traffic(r.engine, &before), "zoe_comm_traffic.struct_size is 0");
  before.struct_size = sizeof before;
  ZOE_EXPECT_OK(zoe_engine_traffic(r.engine, &before));
  if (!train_step(&r, 1e-2, &loss, &result)) goto fail;
  ZOE_EXPECT_OK(zoe_engine_traffic(r.engine, &after));
  /* A step gathers and reduces: collectives counted, no byte sent at world size 1. */
  ZOE_EXPECT_TRUE(after.collectives > before.collectives);
  ZOE_EXPECT_TRUE(after.intra_node_bytes == 0 && after.inter_node_bytes == 0);
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

/* {"a": {"a": ... 1 ...}}, `depth` objects deep; NULL when out of memory. */
static char* nested_document(size_t depth) {
  static const char open[] = "{\"a\": ";
  const size_t open_length = sizeof open - 1;
  char* text = (char*)malloc(depth * (open_length + 1) + 2);
  char* p = text;
  size_t i;
  if (text == NULL) return NULL;
  for (i = 0; i < depth; ++i, p += open_length) memcpy(p, open, open_length);
  *p++ = '1';
  for (i = 0; i < depth; ++i) *p++ = '}';
  *p = '\0';
  return text;
}

/* zoe_engine_desc.config_overrides: merged over config_json and config_path as a merge patch,
 * checked like the configuration itself. */
static int config_overrides(void) {
  rig r;
  char config[2048];
  char path[600];
  char* deep = NULL;
  FILE* f = NULL;
  zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
  zoe_engine* engine = NULL;
  if (!rig_open(&r, 1)) goto fail;
  if (!config_json(&r, config, sizeof config)) goto fail;
  e.model = r.model;
  e.device = r.device;
  e.config_json = config;
  e.config_overrides = "{\"zero_optimization\": {\"stage\": 7}}";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG, "zero_optimization.stage");
  e.config_overrides = "[1, 2]";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG,
                    "zoe_engine_desc.config_overrides: the top level: expected an object");
  e.config_overrides = "{\"zero_optimization\": ";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG, "config_overrides");
  /* Each document is read as strictly as a configuration alone: a key given twice is an error, and
   * one in the overrides, like a syntax error there, names the overrides and the place in them. */
  e.config_overrides = "{\"gradient_clipping\": 0.5, \"gradient_clipping\": 1}";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG,
                    "zoe_engine_desc.config_overrides: gradient_clipping: duplicate key");
  e.config_overrides = "{\n  \"zero_optimization\": }";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG, "zoe_engine_desc.config_overrides:2:24:");
  e.config_json = "{\"gradient_clipping\": 0.5, \"gradient_clipping\": 1}";
  e.config_overrides = "{}";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG, "<config>: gradient_clipping: duplicate key");
  /* A configuration nested far deeper than any real one is refused before anything recurses
   * through it (copying or printing it would overflow the stack). */
  deep = nested_document(200000);
  ZOE_EXPECT_TRUE(deep != NULL);
  e.config_json = deep;
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG, "nested deeper than 64 levels");
  free(deep);
  deep = NULL;
  e.config_json = config;
  ZOE_EXPECT_TRUE(engine == NULL);
  /* A valid patch makes an engine. */
  e.config_overrides = "{\"gradient_clipping\": 0.5, \"zero_optimization\": {\"sub_group_size\": 2000}}";
  ZOE_EXPECT_OK(zoe_engine_create(&e, &engine));
  ZOE_EXPECT_OK(zoe_engine_destroy(engine));
  engine = NULL;
  /* The same over a file. */
  snprintf(path, sizeof path, "%s/config.json", r.dir);
  f = fopen(path, "w");
  ZOE_EXPECT_TRUE(f != NULL);
  fputs(config, f);
  fclose(f);
  f = NULL;
  e.config_json = NULL;
  e.config_path = path;
  e.config_overrides = "{\"zero_optimization\": {\"stage\": 7}}";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG, "zero_optimization.stage");
  e.config_overrides = "{\"zero_optimization\": {\"sub_group_size\": 2000}}";
  ZOE_EXPECT_OK(zoe_engine_create(&e, &engine));
  ZOE_EXPECT_OK(zoe_engine_destroy(engine));
  engine = NULL;
  /* A struct from before the field: config_overrides is not read. */
  e.struct_size = offsetof(zoe_engine_desc, config_overrides);
  e.config_overrides = "not read";
  ZOE_EXPECT_OK(zoe_engine_create(&e, &engine));
  ZOE_EXPECT_OK(zoe_engine_destroy(engine));
  return rig_close(&r);
fail:
  free(deep);
  if (engine != NULL) zoe_engine_destroy(engine);
  rig_close(&r);
  return 0;
}

/* ---- the footprint plan ----------------------------------------------------------------------- */

/* A host device of `budget` bytes and an engine of the rig's model and configuration on it: the
 * status of zoe_engine_create; what was made is destroyed again. */
static zoe_status engine_on_budget(const rig* r, const char* config, uint64_t budget) {
  zoe_device_options o = ZOE_DEVICE_OPTIONS_INIT;
  zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
  zoe_device* device = NULL;
  zoe_engine* engine = NULL;
  zoe_status made;
  o.kind = ZOE_DEVICE_HOST;
  o.budget_bytes = budget;
  if (zoe_device_create(&o, &device) != ZOE_SUCCESS) return ZOE_ERROR_INTERNAL;
  e.config_json = config;
  e.model = r->model;
  e.device = device;
  made = zoe_engine_create(&e, &engine);
  if (made == ZOE_SUCCESS && zoe_engine_destroy(engine) != ZOE_SUCCESS) made = ZOE_ERROR_INTERNAL;
  if (zoe_device_destroy(device) != ZOE_SUCCESS) made = ZOE_ERROR_INTERNAL;
  return made;
}

/* zoe_footprint_plan gives what zoe_engine_create asks for: an engine starts on a device budget of
 * exactly its device_bytes and is refused one byte below it; the other figures are the
 * configuration's (states and buffers on NVMe, the activations' shares), and hpZ's secondary shards
 * add device bytes on 2 ranks. */
static int footprint_plan(void) {
  rig r;
  char config[2048];
  zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
  zoe_footprint one = ZOE_FOOTPRINT_INIT;
  zoe_footprint two = ZOE_FOOTPRINT_INIT;
  zoe_footprint hpz = ZOE_FOOTPRINT_INIT;
  if (!rig_open(&r, 0)) goto fail;
  if (!config_json(&r, config, sizeof config)) goto fail;
  e.config_json = config;
  e.model = r.model;
  ZOE_EXPECT_OK(zoe_footprint_plan(&e, 1, &one));
  ZOE_EXPECT_TRUE(one.device_bytes > 0 && one.pinned_bytes > 0 && one.disk_bytes > 0);
  ZOE_EXPECT_TRUE(one.activation_host_bytes == 16384 && one.activation_nvme_bytes >= 262144 &&
                  one.activation_prefetch_bytes == 16384);
  /* The activations' shares are in the totals: the host share pinned, the prefetch share on the
   * device, the NVMe share in the swap store. */
  ZOE_EXPECT_TRUE(one.pinned_bytes >= one.activation_host_bytes && one.device_bytes >= one.activation_prefetch_bytes &&
                  one.disk_bytes >= one.activation_nvme_bytes);
  ZOE_EXPECT_STATUS(engine_on_budget(&r, config, one.device_bytes - 1), ZOE_ERROR_CONFIG, "device memory");
  ZOE_EXPECT_OK(engine_on_budget(&r, config, one.device_bytes));

  ZOE_EXPECT_OK(zoe_footprint_plan(&e, 2, &two));
  e.config_overrides = "{\"zero_optimization\": {\"zero_hpz_partition_size\": 2}}";
  ZOE_EXPECT_OK(zoe_footprint_plan(&e, 2, &hpz));
  ZOE_EXPECT_TRUE(hpz.device_bytes > two.device_bytes);
  ZOE_EXPECT_TRUE(hpz.disk_bytes == two.disk_bytes && hpz.pinned_bytes == two.pinned_bytes);
  /* The same configuration from a file plans alike (config_path, and no overrides: the struct ends
   * before the field). */
  e.config_overrides = "not read";
  e.struct_size = offsetof(zoe_engine_desc, config_overrides);
  ZOE_EXPECT_OK(zoe_footprint_plan(&e, 2, &hpz));
  ZOE_EXPECT_TRUE(hpz.device_bytes == two.device_bytes && hpz.disk_bytes == two.disk_bytes);
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

/* Every bad input is refused naming it, and the footprint is left as it was. */
static int footprint_plan_bad_input(void) {
  rig r;
  char config[2048];
  zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
  zoe_footprint f = ZOE_FOOTPRINT_INIT;
  zoe_model* gone = NULL;
  if (!rig_open(&r, 0)) goto fail;
  if (!config_json(&r, config, sizeof config)) goto fail;
  f.device_bytes = 7;
  f.disk_bytes = 7;
  e.config_json = config;
  e.model = r.model;
  ZOE_EXPECT_USAGE(zoe_footprint_plan(NULL, 1, &f), "zoe_engine_desc");
  ZOE_EXPECT_USAGE(zoe_footprint_plan(&e, 1, NULL), "zoe_footprint");
  f.struct_size = offsetof(zoe_footprint, activation_prefetch_bytes); /* an older, shorter struct */
  ZOE_EXPECT_USAGE(zoe_footprint_plan(&e, 1, &f), "zoe_footprint.struct_size");
  f.struct_size = sizeof f;
  ZOE_EXPECT_USAGE(zoe_footprint_plan(&e, 0, &f), "world_size is 0");
  e.model = NULL;
  ZOE_EXPECT_USAGE(zoe_footprint_plan(&e, 1, &f), "zoe_engine_desc.model");
  ZOE_EXPECT_OK(zoe_model_create(&gone));
  ZOE_EXPECT_OK(zoe_model_destroy(gone));
  e.model = gone;
  ZOE_EXPECT_USAGE(zoe_footprint_plan(&e, 1, &f), "zoe_engine_desc.model");
  e.model = r.model;
  e.config_json = NULL;
  ZOE_EXPECT_USAGE(zoe_footprint_plan(&e, 1, &f), "give exactly one of config_json and config_path");
  e.config_json = "{\"zero_optimization\": {\"stage\": 7}}";
  ZOE_EXPECT_STATUS(zoe_footprint_plan(&e, 1, &f), ZOE_ERROR_CONFIG, "zero_optimization.stage");
  /* Stage 0 replicates every state, so on several ranks nothing is gathered and an hpZ partition
     has no meaning: refused naming the key (stage 0 itself plans on 2 ranks, below). */
  e.config_json = "{\"zero_optimization\": {\"stage\": 0, \"zero_hpz_partition_size\": 2}}";
  ZOE_EXPECT_STATUS(zoe_footprint_plan(&e, 2, &f), ZOE_ERROR_CONFIG, "zero_hpz_partition_size");
  e.config_json = "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\"}}}";
  ZOE_EXPECT_STATUS(zoe_footprint_plan(&e, 1, &f), ZOE_ERROR_CONFIG, "nvme_path");
  ZOE_EXPECT_TRUE(f.device_bytes == 7 && f.disk_bytes == 7);
  e.config_json = "{\"zero_optimization\": {\"stage\": 0}}";
  ZOE_EXPECT_OK(zoe_footprint_plan(&e, 1, &f));
  ZOE_EXPECT_OK(zoe_footprint_plan(&e, 2, &f));
  ZOE_EXPECT_TRUE(f.disk_bytes == 0 && f.activation_host_bytes == 0 && f.activation_nvme_bytes == 0);
  return rig_close(&r);
fail:
  rig_close(&r);
  return 0;
}

/* ---- the batch sizes -------------------------------------------------------------------------- */

/* DeepSpeed's batch arithmetic: the key not written is derived for the world size
 * (zoe_engine_batch_sizes gives the three), and a triple that does not multiply out, or a derived
 * 0, is refused naming the keys and their values, by zoe_engine_create and zoe_footprint_plan alike. */
static int batch_sizes(void) {
  rig r;
  char config[2048];
  zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
  zoe_engine* engine = NULL;
  zoe_batch_sizes b = ZOE_BATCH_SIZES_INIT;
  zoe_footprint f = ZOE_FOOTPRINT_INIT;
  int i;
  if (!rig_open(&r, 1)) goto fail;
  if (!config_json(&r, config, sizeof config)) goto fail;
  /* Neither batch size written: the steps as written (here the default), the sizes unknown. */
  b.train_batch_size = 7;
  ZOE_EXPECT_OK(zoe_engine_batch_sizes(r.engine, &b));
  ZOE_EXPECT_TRUE(b.train_batch_size == 0 && b.train_micro_batch_size_per_gpu == 0 &&
                  b.gradient_accumulation_steps == 1);
  ZOE_EXPECT_USAGE(zoe_engine_batch_sizes(NULL, &b), "engine");
  ZOE_EXPECT_USAGE(zoe_engine_batch_sizes(r.engine, NULL), "zoe_batch_sizes");
  b.struct_size = offsetof(zoe_batch_sizes, gradient_accumulation_steps);
  ZOE_EXPECT_USAGE(zoe_engine_batch_sizes(r.engine, &b), "zoe_batch_sizes.struct_size");
  b.struct_size = sizeof b;
  e.model = r.model;
  e.device = r.device;
  e.config_json = config;
  e.config_overrides = "{\"train_batch_size\": 12, \"train_micro_batch_size_per_gpu\": 3}";
  ZOE_EXPECT_OK(zoe_engine_create(&e, &engine));
  ZOE_EXPECT_OK(zoe_engine_batch_sizes(engine, &b));
  ZOE_EXPECT_TRUE(b.train_batch_size == 12 && b.train_micro_batch_size_per_gpu == 3 &&
                  b.gradient_accumulation_steps == 4);
  /* The engine runs the derived steps: four micro-batches, and a fifth before the step is refused. */
  for (i = 0; i < 4; ++i) {
    ZOE_EXPECT_OK(zoe_begin_micro_batch(engine));
    ZOE_EXPECT_OK(zoe_end_micro_batch(engine));
  }
  ZOE_EXPECT_USAGE(zoe_begin_micro_batch(engine), "4 micro-batches");
  ZOE_EXPECT_OK(zoe_engine_destroy(engine));
  engine = NULL;
  e.config_overrides =
      "{\"train_batch_size\": 12, \"train_micro_batch_size_per_gpu\": 3, \"gradient_accumulation_steps\": 2}";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG,
                    "train_batch_size 12 is not train_micro_batch_size_per_gpu 3 x gradient_accumulation_steps 2 x "
                    "world size 1 = 6");
  e.config_overrides = "{\"train_batch_size\": 4, \"train_micro_batch_size_per_gpu\": 5}";
  ZOE_EXPECT_STATUS(zoe_engine_create(&e, &engine), ZOE_ERROR_CONFIG, "gradient_accumulation_steps 0 must both be > 0");
  ZOE_EXPECT_TRUE(engine == NULL);
  /* The plan derives for the world size it is given: 12 / 3 / 2 = 2 steps on 2 ranks, while on 3
   * ranks 12 / 3 / 3 rounds down to 1 and 3 x 1 x 3 is not 12. */
  e.config_overrides = "{\"train_batch_size\": 12, \"train_micro_batch_size_per_gpu\": 3}";
  ZOE_EXPECT_OK(zoe_footprint_plan(&e, 2, &f));
  ZOE_EXPECT_STATUS(zoe_footprint_plan(&e, 3, &f), ZOE_ERROR_CONFIG,
                    "world size 3 = 9 (gradient_accumulation_steps derived");
  return rig_close(&r);
fail:
  if (engine != NULL) zoe_engine_destroy(engine);
  rig_close(&r);
  return 0;
}

/* ---- the driver ------------------------------------------------------------------------------ */

typedef struct test_case {
  const char* name;
  int (*run)(void);
} test_case;

static const test_case cases[] = {
    {"status_names", status_names},
    {"null_handles", null_handles},
    {"destroyed_handles", destroyed_handles},
    {"device_in_use", device_in_use},
    {"wrong_stream_device", wrong_stream_device},
    {"struct_sizes", struct_sizes},
    {"bad_parameters", bad_parameters},
    {"initializers", initializers},
    {"bad_configs", bad_configs},
    {"out_of_order", out_of_order},
    {"wrong_sizes_and_states", wrong_sizes_and_states},
    {"activations_out_of_order", activations_out_of_order},
    {"activation_round_trip", activation_round_trip},
    {"oversized_sizes", oversized_sizes},
    {"threads_on_different_modules", threads_on_different_modules},
    {"destroy_mid_micro_batch", destroy_mid_micro_batch},
    {"training_loss_falls", training_loss_falls},
    {"checkpoint_round_trip", checkpoint_round_trip},
    {"statistics_length", statistics_length},
    {"launcher_environment", launcher_environment},
    {"ranks_at_one_rank", ranks_at_one_rank},
    {"config_overrides", config_overrides},
    {"footprint_plan", footprint_plan},
    {"footprint_plan_bad_input", footprint_plan_bad_input},
    {"batch_sizes", batch_sizes},
};

int main(int argc, char** argv) {
  size_t i;
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) printf("%s\n", cases[i].name);
    return 0;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: %s CASE | --list\n", argv[0]);
    return 2;
  }
  for (i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    if (strcmp(argv[1], cases[i].name) == 0) return cases[i].run() ? 0 : 1;
  }
  fprintf(stderr, "no case named %s (--list lists them)\n", argv[1]);
  return 2;
}
