/* compute_cuda_stub.c: mlp_compute_cuda_create when zoe is built without CUDA. */
#include <stdio.h>

#include "compute.h"

mlp_compute* mlp_compute_cuda_create(void* native_stream) {
  (void)native_stream;
  fprintf(stderr, "zoe-train-mlp: this build has no CUDA support (configure zoe with -DZOE_WITH_CUDA=ON)\n");
  return NULL;
}
