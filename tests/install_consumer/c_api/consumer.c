/* A C99 program that trains through the installed C API (zoe/zoe.h, libzoe_c.so), as a user's
 * training code would, built with find_package(zoe COMPONENTS c) and with pkg-config (zoe-c): one
 * module of one parameter on the host device, an engine from a JSON string with every state in
 * device memory, one micro-batch (forward, backward with a gradient of ones) and one Adam step.
 * It checks what it gets back: the fetched device copy holds the parameter's value, and Adam's first
 * step moves every element by the learning rate against the gradient's sign. Prints OK or names the
 * call that failed with zoe_last_error(). */
#include <stdio.h>
#include <string.h>
#include <zoe/zoe.h>

enum { ROWS = 4, COLS = 8, NUMEL = ROWS * COLS };

static const double lr = 0.01;

/* Names the failed call and its message, and jumps to the cleanup. */
#define CHECK(call)                                                                                     \
  do {                                                                                                  \
    zoe_status status_ = (call);                                                                        \
    if (status_ != ZOE_SUCCESS) {                                                                       \
      fprintf(stderr, "c consumer: %s: %s: %s\n", #call, zoe_status_string(status_), zoe_last_error()); \
      goto done;                                                                                        \
    }                                                                                                   \
  } while (0)
#define EXPECT(condition, ...)         \
  do {                                 \
    if (!(condition)) {                \
      fprintf(stderr, "c consumer: "); \
      fprintf(stderr, __VA_ARGS__);    \
      fprintf(stderr, "\n");           \
      goto done;                       \
    }                                  \
  } while (0)

static double distance(double a, double b) { return a > b ? a - b : b - a; }

int main(void) {
  int ok = 0;
  zoe_device* device = NULL;
  zoe_stream* stream = NULL;
  zoe_model* model = NULL;
  zoe_engine* engine = NULL;
  zoe_device_options device_options = ZOE_DEVICE_OPTIONS_INIT;
  zoe_parameter_desc weight = ZOE_PARAMETER_DESC_INIT;
  zoe_engine_desc engine_desc = ZOE_ENGINE_DESC_INIT;
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  const uint64_t shape[2] = {ROWS, COLS};
  zoe_module_id layer = 0;
  zoe_parameter_id weight_id = 0;
  float before[NUMEL];
  float after[NUMEL];
  void* address = NULL;
  void* gradient = NULL;
  float* values = NULL;
  size_t i = 0;

  device_options.kind = ZOE_DEVICE_HOST;
  device_options.budget_bytes = 64u << 20;
  CHECK(zoe_device_create(&device_options, &device));
  CHECK(zoe_stream_create(device, &stream));

  CHECK(zoe_model_create(&model));
  CHECK(zoe_model_add_module(model, "layer0", &layer));
  weight.name = "layer0.weight";
  weight.ndim = 2;
  weight.shape = shape;
  weight.dtype = ZOE_FP32;
  weight.init = ZOE_INIT_UNIFORM;
  weight.scale = 0.5f;
  weight.seed = 7;
  CHECK(zoe_model_add_parameter(model, layer, &weight, &weight_id));

  /* Stage 3 with no offload block: every state stays in device memory. No clipping, so the step
   * sees the gradient as written. */
  engine_desc.config_json =
      "{\"zero_optimization\": {\"stage\": 3}, \"gradient_clipping\": 0,"
      " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.01}}}";
  engine_desc.model = model;
  engine_desc.device = device;
  CHECK(zoe_engine_create(&engine_desc, &engine));
  CHECK(zoe_model_destroy(model));
  model = NULL;
  CHECK(zoe_read_state(engine, weight_id, ZOE_STATE_PARAMETER, before, NUMEL));

  CHECK(zoe_begin_micro_batch(engine));
  CHECK(zoe_fetch(engine, layer, ZOE_PASS_FORWARD, stream));
  CHECK(zoe_parameter_address(engine, weight_id, &address));
  /* The host device's memory is host memory: once the stream is done, read it directly. */
  CHECK(zoe_stream_synchronize(stream));
  EXPECT(memcmp(address, before, sizeof before) == 0, "the fetched weight differs from its fp32 master");
  CHECK(zoe_release(engine, layer, stream));

  CHECK(zoe_fetch(engine, layer, ZOE_PASS_BACKWARD, stream));
  CHECK(zoe_module_gradients(engine, layer, stream, &gradient, 1));
  CHECK(zoe_stream_synchronize(stream));
  values = (float*)gradient;
  for (i = 0; i < NUMEL; ++i) {
    values[i] = 1.0f;
  }
  CHECK(zoe_reduce_gradients(engine, layer, stream));
  CHECK(zoe_release(engine, layer, stream));
  CHECK(zoe_end_micro_batch(engine));

  CHECK(zoe_step(engine, lr, &result));
  EXPECT(!result.skipped, "the step was skipped (overflow) with finite gradients");
  EXPECT(result.optimizer_steps == 1, "optimizer_steps is %lld after one step", (long long)result.optimizer_steps);
  CHECK(zoe_read_state(engine, weight_id, ZOE_STATE_PARAMETER, after, NUMEL));
  /* Adam's first step, bias-corrected: m/sqrt(v) = g/|g| = 1, so every element drops by lr. */
  for (i = 0; i < NUMEL; ++i) {
    EXPECT(distance((double)before[i] - (double)after[i], lr) < 1e-5,
           "element %u moved from %.7f to %.7f, not by lr %g", (unsigned)i, (double)before[i], (double)after[i], lr);
  }
  ok = 1;

done:
  if (engine != NULL && zoe_engine_destroy(engine) != ZOE_SUCCESS) {
    fprintf(stderr, "c consumer: zoe_engine_destroy: %s\n", zoe_last_error());
    ok = 0;
  }
  if (model != NULL) {
    zoe_model_destroy(model);
  }
  if (stream != NULL && zoe_stream_destroy(stream) != ZOE_SUCCESS) {
    fprintf(stderr, "c consumer: zoe_stream_destroy: %s\n", zoe_last_error());
    ok = 0;
  }
  if (device != NULL && zoe_device_destroy(device) != ZOE_SUCCESS) {
    fprintf(stderr, "c consumer: zoe_device_destroy: %s\n", zoe_last_error());
    ok = 0;
  }
  if (ok) {
    printf("zoe C consumer (zoe %s): one step through the C API: OK\n", zoe_version());
  }
  return ok ? 0 : 1;
}
