/* step_bytes.h: the bytes a training step moved to and from NVMe, counted twice: by zoe (its
 * statistics' totals over every stage) and by the kernel (/proc/self/io, what this process's
 * threads, io_uring's workers among them, made the block layer read and write). */
#ifndef ZOE_DEMO_STEP_BYTES_H
#define ZOE_DEMO_STEP_BYTES_H

#include <stdint.h>

#include "zoe/zoe.h"

typedef struct mlp_byte_mark {
  uint64_t zoe_read;
  uint64_t zoe_written;
  uint64_t kernel_read;    /* /proc/self/io read_bytes */
  uint64_t kernel_written; /* /proc/self/io write_bytes */
  int kernel_known;        /* 0 when /proc/self/io could not be read */
} mlp_byte_mark;

typedef struct mlp_step_bytes {
  double zoe_read;
  double zoe_written;
  double kernel_read; /* -1 when /proc/self/io could not be read at some mark */
  double kernel_written;
  long steps;
} mlp_step_bytes;

/* zoe_statistics' JSON, malloc'd (the caller frees it), sized again when it grew between the call
 * that sizes it and the one that copies it; NULL with a message when it fails. */
char* mlp_statistics_json(zoe_engine* engine);
/* The counters now. 0, or -1 with a message (zoe_statistics failed, or its JSON lacked the totals). */
int mlp_byte_mark_now(zoe_engine* engine, mlp_byte_mark* mark);
/* Adds what moved between `before` and `after` as one more step. */
void mlp_step_bytes_add(mlp_step_bytes* total, const mlp_byte_mark* before, const mlp_byte_mark* after);
/* Per step on average over the steps added: zoe's and the kernel's read and written bytes. */
mlp_step_bytes mlp_step_bytes_mean(const mlp_step_bytes* total);

#endif /* ZOE_DEMO_STEP_BYTES_H */
