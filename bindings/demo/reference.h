/* reference.h: --reference: the same model, seed, data and optimizer, trained in ordinary memory
 * without zoe, to check that offloading does not change the math. */
#ifndef ZOE_DEMO_REFERENCE_H
#define ZOE_DEMO_REFERENCE_H

#include "options.h"

/* Trains o->steps steps of the built-in configuration with `micro_batches` micro-batches per step,
 * printing the same per-step lines as the zoe run. Returns the exit status. */
int mlp_reference_run(const mlp_options* o, size_t micro_batches);

#endif /* ZOE_DEMO_REFERENCE_H */
