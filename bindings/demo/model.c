/* model.c: registers the MLP's layers with zoe. */
#include "model.h"

#include <math.h>
#include <stdio.h>

#include "mlp_math.h"

uint64_t mlp_layer_numel(size_t hidden) { return (uint64_t)hidden * hidden + hidden; }

uint64_t mlp_model_state_bytes(size_t hidden, size_t layers) { return 16u * mlp_layer_numel(hidden) * layers; }

/* Uniform in [-scale, scale): the bias with nn.Linear's 1/sqrt(fan_in); the weight with Kaiming's
 * sqrt(6/fan_in) for ReLU, which keeps the activations' scale through many layers (with
 * 1/sqrt(fan_in) each layer shrinks it by sqrt(6), and a deep stack computes on nearly zeros). */
static float init_scale(size_t hidden, int bias) { return (float)((bias ? 1.0 : sqrt(6.0)) / sqrt((double)hidden)); }

/* A distinct initializer seed per parameter, derived from the run's seed. */
static uint64_t init_seed(uint64_t seed, size_t layer, int bias) { return mlp_mix(seed) + 2u * layer + (bias ? 1 : 0); }

zoe_status mlp_model_build(size_t hidden, size_t layers, uint64_t seed, zoe_model** model) {
  zoe_model* m = NULL;
  zoe_status s = zoe_model_create(&m);
  if (s != ZOE_SUCCESS) return s;
  for (size_t l = 0; l < layers && s == ZOE_SUCCESS; ++l) {
    char name[64];
    snprintf(name, sizeof name, "layer%zu", l);
    zoe_module_id module = 0;
    s = zoe_model_add_module(m, name, &module);
    for (int bias = 0; bias <= 1 && s == ZOE_SUCCESS; ++bias) {
      char pname[80];
      snprintf(pname, sizeof pname, "layer%zu.%s", l, bias ? "bias" : "weight");
      const uint64_t shape[2] = {hidden, hidden};
      zoe_parameter_desc d = ZOE_PARAMETER_DESC_INIT;
      d.name = pname;
      d.ndim = bias ? 1 : 2;
      d.shape = shape;
      d.dtype = ZOE_FP32;
      d.init = ZOE_INIT_UNIFORM;
      d.scale = init_scale(hidden, bias);
      d.seed = init_seed(seed, l, bias);
      zoe_parameter_id id = 0;
      s = zoe_model_add_parameter(m, module, &d, &id);
    }
  }
  if (s != ZOE_SUCCESS) {
    zoe_model_destroy(m);
    return s;
  }
  *model = m;
  return ZOE_SUCCESS;
}

zoe_status mlp_model_initial(size_t hidden, uint64_t seed, size_t layer, int bias, float* values) {
  const size_t n = bias ? hidden : hidden * hidden;
  return zoe_initializer_fill(ZOE_INIT_UNIFORM, init_scale(hidden, bias), init_seed(seed, layer, bias), 0, values, n);
}
