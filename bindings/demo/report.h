/* report.h: what zoe-train-mlp prints: a line per step (JSON or a table row) on stdout, a progress
 * line per step on stderr, and the final summary. */
#ifndef ZOE_DEMO_REPORT_H
#define ZOE_DEMO_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "step_bytes.h"

typedef struct mlp_step_line {
  long step;
  long steps; /* the last step of the run */
  double loss;
  int skipped;
  double grad_norm;
  double seconds;
} mlp_step_line;

typedef struct mlp_summary {
  uint64_t peak_device_bytes;
  uint64_t device_budget_bytes;
  uint64_t model_state_bytes;
  double step_s;
  double compute_s;
  double param_io_s;
  double adam_s;
  double optimizer_io_s;
  double bound_s;
  double io_s;          /* the step's NVMe bytes through zoe's raw I/O engine alone (zoe_stage_times.io_s) */
  double floor_s;       /* max(compute_s, io_s): no step can be faster */
  mlp_step_bytes bytes; /* per step, zoe's count and the kernel's */
  uint64_t peak_rss_bytes;
  const char* statistics; /* zoe_statistics' JSON, or NULL */
  unsigned world_size;
  unsigned ranks_per_node;
  double inter_node_bytes_per_step; /* per rank, averaged over the ranks and steps */
  double intra_node_bytes_per_step;
} mlp_summary;

/* The table's header (nothing with --json). */
void mlp_report_header(int json);
/* One step: a JSON line or a table row on stdout, flushed; a progress line on stderr. */
void mlp_report_step(int json, const mlp_step_line* s);
/* The final line (--json) or the summary table. */
void mlp_report_summary(int json, const mlp_summary* s);
/* The final line of --reference: step_s and peak_rss_bytes. */
void mlp_report_reference_summary(int json, double step_s, uint64_t peak_rss_bytes);

/* The process's peak resident set in bytes. */
uint64_t mlp_peak_rss_bytes(void);
/* A monotonic clock in seconds. */
double mlp_now(void);

#endif /* ZOE_DEMO_REPORT_H */
