/* model.h: the MLP as zoe sees it: L modules "layer<l>", each with a weight W (hidden x hidden,
 * row-major W[out][in]) and a bias b (hidden), fp32, seeded uniform (W in [-sqrt(6/H), sqrt(6/H)), b in [-1/sqrt(H),
 * 1/sqrt(H))). */
#ifndef ZOE_DEMO_MODEL_H
#define ZOE_DEMO_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "zoe/zoe.h"

/* Parameter ids: layer l's W is 2l, its b 2l + 1 (the order they are registered in). */
static inline zoe_parameter_id mlp_weight_id(size_t layer) { return (zoe_parameter_id)(2 * layer); }
static inline zoe_parameter_id mlp_bias_id(size_t layer) { return (zoe_parameter_id)(2 * layer + 1); }

/* Elements of one layer's parameters: H*H + H. */
uint64_t mlp_layer_numel(size_t hidden);
/* Every state of every parameter in bytes: per element the fp32 working copy (which is the fp32
 * master), the fp32 gradient, exp_avg and exp_avg_sq: 16 bytes. */
uint64_t mlp_model_state_bytes(size_t hidden, size_t layers);

/* A zoe model with the layers registered. ZOE_SUCCESS or the failing call's status (the message
 * is zoe_last_error()). */
zoe_status mlp_model_build(size_t hidden, size_t layers, uint64_t seed, zoe_model** model);

/* The initial values of layer `layer`'s weight (bias = 0) or bias (bias = 1): what zoe gives the
 * parameters of mlp_model_build, for the reference trainer. */
zoe_status mlp_model_initial(size_t hidden, uint64_t seed, size_t layer, int bias, float* values);

#endif /* ZOE_DEMO_MODEL_H */
