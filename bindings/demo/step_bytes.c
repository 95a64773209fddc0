/* step_bytes.c: zoe's and the kernel's count of a step's NVMe bytes. */
#include "step_bytes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first value of `"key": <number>` in `text`, or -1 when absent. zoe_statistics lists its
 * totals over the stages first, before each stage's own figures of the same name. */
static int first_number(const char* text, const char* key, uint64_t* out) {
  char quoted[64];
  snprintf(quoted, sizeof quoted, "\"%s\":", key);
  const char* at = strstr(text, quoted);
  if (at == NULL) return -1;
  char* end = NULL;
  const unsigned long long v = strtoull(at + strlen(quoted), &end, 10);
  if (end == at + strlen(quoted)) return -1;
  *out = (uint64_t)v;
  return 0;
}

/* read_bytes and write_bytes of /proc/self/io; 0 when the file cannot be read (no procfs, or a
 * kernel without task I/O accounting). */
static int kernel_bytes(uint64_t* read, uint64_t* written) {
  FILE* f = fopen("/proc/self/io", "r");
  if (f == NULL) return 0;
  char line[128];
  int found = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long long v = 0;
    if (sscanf(line, "read_bytes: %llu", &v) == 1) {
      *read = v;
      found |= 1;
    } else if (sscanf(line, "write_bytes: %llu", &v) == 1) {
      *written = v;
      found |= 2;
    }
  }
  fclose(f);
  return found == 3;
}

char* mlp_statistics_json(zoe_engine* engine) {
  /* The statistics may grow between the call that sizes them and the one that copies them (a
   * figure of the engine's threads gains a digit): a short capacity copies nothing, so size again. */
  char* text = NULL;
  size_t capacity = 0;
  size_t length = 0;
  for (;;) {
    if (zoe_statistics(engine, text, capacity, &length) != ZOE_SUCCESS) {
      fprintf(stderr, "zoe-train-mlp: zoe_statistics: %s\n", zoe_last_error());
      free(text);
      return NULL;
    }
    if (text != NULL && length < capacity) return text;
    free(text);
    capacity = length + 256;
    text = malloc(capacity);
    if (text == NULL) {
      fprintf(stderr, "zoe-train-mlp: out of memory for zoe_statistics' %zu bytes\n", capacity);
      return NULL;
    }
  }
}

int mlp_byte_mark_now(zoe_engine* engine, mlp_byte_mark* mark) {
  memset(mark, 0, sizeof *mark);
  char* text = mlp_statistics_json(engine);
  if (text == NULL) return -1;
  int rc = 0;
  if (first_number(text, "nvme_read_bytes", &mark->zoe_read) != 0 ||
      first_number(text, "nvme_write_bytes", &mark->zoe_written) != 0) {
    fprintf(stderr, "zoe-train-mlp: zoe_statistics has no nvme_read_bytes / nvme_write_bytes totals\n");
    rc = -1;
  }
  free(text);
  mark->kernel_known = kernel_bytes(&mark->kernel_read, &mark->kernel_written);
  return rc;
}

void mlp_step_bytes_add(mlp_step_bytes* total, const mlp_byte_mark* before, const mlp_byte_mark* after) {
  total->zoe_read += (double)(after->zoe_read - before->zoe_read);
  total->zoe_written += (double)(after->zoe_written - before->zoe_written);
  if (before->kernel_known && after->kernel_known && total->kernel_read >= 0) {
    total->kernel_read += (double)(after->kernel_read - before->kernel_read);
    total->kernel_written += (double)(after->kernel_written - before->kernel_written);
  } else {
    total->kernel_read = total->kernel_written = -1;
  }
  ++total->steps;
}

mlp_step_bytes mlp_step_bytes_mean(const mlp_step_bytes* total) {
  mlp_step_bytes m = *total;
  if (total->steps == 0) return m;
  const double n = (double)total->steps;
  m.zoe_read /= n;
  m.zoe_written /= n;
  if (m.kernel_read >= 0) {
    m.kernel_read /= n;
    m.kernel_written /= n;
  }
  return m;
}
