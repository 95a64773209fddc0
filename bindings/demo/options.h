/* options.h: zoe-train-mlp's command line. */
#ifndef ZOE_DEMO_OPTIONS_H
#define ZOE_DEMO_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct mlp_options {
  size_t hidden;
  size_t layers;
  size_t batch;         /* the global batch, split evenly over gradient_accumulation_steps micro-batches */
  size_t micro_batches; /* the built-in configuration's gradient_accumulation_steps (0: not given, 1) */
  long steps;           /* the step to train up to (a resumed run continues from its checkpoint's step) */
  double lr;
  uint64_t seed;
  const char* dir;       /* NULL: a new temporary folder, removed at exit */
  long checkpoint_every; /* 0: no checkpoints */
  int resume;
  const char* config;     /* NULL: the built-in configuration */
  uint64_t device_budget; /* 0: from zoe's footprint plan (mlp_device_budget) */
  const char* device;     /* "auto", "host" or "cuda" */
  int json;
  int reference;
  int blas_threads;
  int blas_threads_given; /* 0: the default, divided among the ranks of this node */
  size_t ranks_per_node;  /* --ranks-per-node: zoe.ranks_per_node (0: not given, zoe decides) */
  int help;
} mlp_options;

/* Parses argv into *o (defaults first). Returns 0, or 2 after printing to stderr a line that
 * names the bad flag or value (the exit status for a usage error). */
int mlp_parse_options(int argc, char** argv, mlp_options* o);

/* The --help text. */
void mlp_print_help(FILE* out);

/* OpenBLAS threads when --blas-threads is not given: every core but one, shared by the
 * `local_ranks` ranks of this node (at least 1 each). */
int mlp_default_blas_threads(unsigned local_ranks);

#endif /* ZOE_DEMO_OPTIONS_H */
