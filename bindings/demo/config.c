/* config.c: the built-in configuration, and the device budget from zoe's footprint plan. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "trainer.h"

/* Activations of one micro-batch that the device holds ahead of backward's loads. */
#define ZOE_MLP_PREFETCHED_ACTIVATIONS 1

char* mlp_builtin_config(const char* swap_dir, size_t hidden, size_t layers, size_t micro_batches, size_t micro_rows,
                         double lr) {
  const unsigned long long layer = (unsigned long long)mlp_layer_numel(hidden);
  const unsigned long long weight = (unsigned long long)hidden * hidden;
  const unsigned long long activation = 4ull * micro_rows * hidden;
  /* Two layers gathered at once (the one in use and the next, prefetched), beside the biases that
   * stay gathered (below stage3_param_persistence_threshold); a released layer stays gathered only
   * when it is used again at once (the last layer, from forward into backward): any longer reuse
   * distance would keep every layer of forward for backward and fill the arena. */
  /* offload_optimizer.buffer_count 2: zoe sizes each optimizer swap buffer by the largest sub-group
   * (as DeepSpeed does; a sub-group holds whole parameters, so here a whole layer, 64 MiB at
   * --hidden 4096), but streams the step through slots of one piece of a state: 2 buffers still let
   * 42 pieces be in flight at --hidden 4096, and pin 384 MiB less than 8 did (peak RSS 1.37 GiB with
   * 8, 0.99 with 2). */
  /* Rounded to whole 1024 elements. */
  const unsigned long long live = (2 * layer + (unsigned long long)layers * hidden + 1023) / 1024 * 1024;
  const char* format =
      "{\n"
      "  \"gradient_accumulation_steps\": %zu,\n"
      "  \"gradient_clipping\": %.17g,\n"
      "  \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": %.17g, \"betas\": [%.17g, %.17g], \"eps\": %.17g,\n"
      "                \"weight_decay\": %.17g}},\n"
      "  \"zero_optimization\": {\n"
      "    \"stage\": 3,\n"
      "    \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"%s\", \"buffer_count\": 8,\n"
      "                      \"buffer_size\": 1048576, \"max_in_cpu\": 0},\n"
      "    \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\", \"buffer_count\": 2,\n"
      "                          \"pipeline_read\": true, \"pipeline_write\": true},\n"
      "    \"sub_group_size\": 1048576,\n"
      "    \"stage3_prefetch_bucket_size\": %llu,\n"
      "    \"stage3_max_live_parameters\": %llu,\n"
      "    \"stage3_max_reuse_distance\": %llu,\n"
      "    \"stage3_param_persistence_threshold\": %zu,\n"
      "    \"reduce_bucket_size\": %llu\n"
      "  },\n"
      "  \"aio\": {\"block_size\": 1048576, \"queue_depth\": 8},\n"
      "  \"zoe\": {\"activations\": {\"host_bytes\": %llu, \"prefetch_bytes\": %llu}}\n"
      "}\n";
  const int n = snprintf(NULL, 0, format, micro_batches, ZOE_MLP_GRADIENT_CLIPPING, lr, ZOE_MLP_BETA1, ZOE_MLP_BETA2,
                         ZOE_MLP_EPS, ZOE_MLP_WEIGHT_DECAY, swap_dir, swap_dir, layer, live, weight, hidden, layer,
                         activation * layers, activation * ZOE_MLP_PREFETCHED_ACTIVATIONS);
  char* out = malloc((size_t)n + 1);
  if (out == NULL) return NULL;
  snprintf(out, (size_t)n + 1, format, micro_batches, ZOE_MLP_GRADIENT_CLIPPING, lr, ZOE_MLP_BETA1, ZOE_MLP_BETA2,
           ZOE_MLP_EPS, ZOE_MLP_WEIGHT_DECAY, swap_dir, swap_dir, layer, live, weight, hidden, layer,
           activation * layers, activation * ZOE_MLP_PREFETCHED_ACTIVATIONS);
  return out;
}

int mlp_plan(const mlp_options* o, const char* config_json, const char* overrides, unsigned world_size,
             zoe_footprint* plan) {
  zoe_model* model = NULL;
  if (mlp_check(mlp_model_build(o->hidden, o->layers, o->seed, &model), "mlp_model_build") != 0) return -1;
  zoe_engine_desc desc = ZOE_ENGINE_DESC_INIT;
  desc.config_json = config_json;
  desc.config_overrides = overrides;
  desc.model = model;
  zoe_footprint planned = ZOE_FOOTPRINT_INIT;
  const zoe_status s = zoe_footprint_plan(&desc, world_size, &planned);
  zoe_model_destroy(model);
  if (mlp_check(s, "zoe_footprint_plan") != 0) return -1;
  *plan = planned;
  return 0;
}

uint64_t mlp_device_budget(const zoe_footprint* plan, size_t hidden, size_t micro_rows) {
  const uint64_t activation = 4ull * micro_rows * hidden;
  /* The program's four buffers, and the activation a load brings back into memory zoe allocates
   * outside its plan (the prefetched ones are the plan's prefetch share). */
  const uint64_t program = (4 + 1) * activation;
  /* For the devices' rounding of each allocation (256 bytes on the host device, more on CUDA). */
  const uint64_t margin = (uint64_t)4 << 20;
  return plan->device_bytes + program + margin;
}

int mlp_keeps_activations(const zoe_footprint* plan) {
  return plan->activation_host_bytes == 0 && plan->activation_nvme_bytes == 0;
}

size_t mlp_config_accumulation(const char* json) {
  /* The key at depth 1 only: a nested object may hold a key of that name too. */
  static const char key[] = "\"gradient_accumulation_steps\"";
  int depth = 0;
  for (const char* p = json; *p != '\0'; ++p) {
    if (*p == '"') {
      if (depth == 1 && strncmp(p, key, sizeof key - 1) == 0) {
        const char* v = p + sizeof key - 1;
        while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') ++v;
        if (*v == ':') {
          ++v;
          char* end = NULL;
          errno = 0;
          const double k = strtod(v, &end);
          if (end == v || errno != 0 || !(k >= 1) || k != (double)(size_t)k) {
            fprintf(stderr,
                    "zoe-train-mlp: the configuration's gradient_accumulation_steps is not a positive "
                    "integer\n");
            return 0;
          }
          return (size_t)k;
        }
      }
      /* Skip the string. */
      for (++p; *p != '\0' && *p != '"'; ++p) {
        if (*p == '\\' && p[1] != '\0') ++p;
      }
      if (*p == '\0') break;
    } else if (*p == '{' || *p == '[') {
      ++depth;
    } else if (*p == '}' || *p == ']') {
      --depth;
    }
  }
  return 1;
}

char* mlp_read_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "zoe-train-mlp: cannot open %s: %s\n", path, strerror(errno));
    return NULL;
  }
  size_t size = 0;
  size_t capacity = 4096;
  char* text = malloc(capacity);
  for (;;) {
    if (text == NULL) break;
    size += fread(text + size, 1, capacity - size - 1, f);
    if (size < capacity - 1) break;
    capacity *= 2;
    char* grown = realloc(text, capacity);
    if (grown == NULL) free(text);
    text = grown;
  }
  const int failed = ferror(f);
  fclose(f);
  if (text == NULL || failed) {
    fprintf(stderr, "zoe-train-mlp: cannot read %s\n", path);
    free(text);
    return NULL;
  }
  text[size] = '\0';
  return text;
}
