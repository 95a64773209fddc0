/* report.c: zoe-train-mlp's output. */
#include "report.h"

#include <sys/resource.h>
#include <time.h>

void mlp_report_header(int json) {
  if (json) return;
  printf("%6s  %-24s  %-12s  %s\n", "step", "loss", "grad_norm", "seconds");
  fflush(stdout);
}

void mlp_report_step(int json, const mlp_step_line* s) {
  if (json) {
    printf(
        "{\"step\": %ld, \"loss\": %.17g, \"loss_hex\": \"%a\", \"skipped\": %d, \"grad_norm\": %.9g, "
        "\"step_s\": %.6f}\n",
        s->step, s->loss, s->loss, s->skipped, s->grad_norm, s->seconds);
  } else {
    printf("%6ld  %-24.17g  %-12.6g  %.3f%s\n", s->step, s->loss, s->grad_norm, s->seconds,
           s->skipped ? "  (skipped: inf/NaN gradient)" : "");
  }
  fflush(stdout);
  fprintf(stderr, "zoe-train-mlp: step %ld/%ld  loss %.6g  %.2f s\n", s->step, s->steps, s->loss, s->seconds);
}

/* zoe_statistics' JSON, one key per line, indented by depth: readable whatever its shape. */
static void print_indented_json(const char* j) {
  int depth = 0;
  int in_string = 0;
  for (const char* p = j; *p != '\0'; ++p) {
    const char c = *p;
    if (in_string) {
      putchar(c);
      if (c == '\\' && p[1] != '\0') {
        putchar(*++p);
      } else if (c == '"') {
        in_string = 0;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = 1;
        putchar(c);
        break;
      case '{':
      case '[':
        putchar(c);
        ++depth;
        printf("\n%*s", 2 * depth, "");
        break;
      case '}':
      case ']':
        --depth;
        printf("\n%*s%c", 2 * depth, "", c);
        break;
      case ',': printf(",\n%*s", 2 * depth, ""); break;
      case ' ':
      case '\n':
      case '\t':
      case '\r': break;
      case ':': printf(": "); break;
      default: putchar(c);
    }
  }
  putchar('\n');
}

static double mib(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

static double over_floor(const mlp_summary* s) { return s->floor_s > 0 ? s->step_s / s->floor_s : 0.0; }

void mlp_report_summary(int json, const mlp_summary* s) {
  if (json) {
    printf(
        "{\"peak_device_bytes\": %llu, \"device_budget_bytes\": %llu, \"model_state_bytes\": %llu, "
        "\"step_s\": %.6f, \"compute_s\": %.6f, \"param_io_s\": %.6f, \"adam_s\": %.6f, \"optimizer_io_s\": %.6f, "
        "\"bound_s\": %.6f, \"io_s\": %.6f, \"floor_s\": %.6f, \"step_over_floor\": %.6f, "
        "\"nvme_read_bytes_per_step\": %.17g, \"nvme_write_bytes_per_step\": %.17g, "
        "\"kernel_read_bytes_per_step\": %.17g, \"kernel_write_bytes_per_step\": %.17g, "
        "\"peak_rss_bytes\": %llu, \"world_size\": %u, \"ranks_per_node\": %u, "
        "\"inter_node_bytes_per_step\": %.17g, \"intra_node_bytes_per_step\": %.17g, \"statistics\": %s}\n",
        (unsigned long long)s->peak_device_bytes, (unsigned long long)s->device_budget_bytes,
        (unsigned long long)s->model_state_bytes, s->step_s, s->compute_s, s->param_io_s, s->adam_s, s->optimizer_io_s,
        s->bound_s, s->io_s, s->floor_s, over_floor(s), s->bytes.zoe_read, s->bytes.zoe_written, s->bytes.kernel_read,
        s->bytes.kernel_written, (unsigned long long)s->peak_rss_bytes, s->world_size, s->ranks_per_node,
        s->inter_node_bytes_per_step, s->intra_node_bytes_per_step, s->statistics != NULL ? s->statistics : "null");
    fflush(stdout);
    return;
  }
  printf("\n");
  printf("peak device memory   %10.1f MiB of a %.1f MiB budget (%.1f%%)\n", mib(s->peak_device_bytes),
         mib(s->device_budget_bytes), 100.0 * (double)s->peak_device_bytes / (double)s->device_budget_bytes);
  printf("model states         %10.1f MiB (%.1fx the device budget)\n", mib(s->model_state_bytes),
         (double)s->model_state_bytes / (double)s->device_budget_bytes);
  printf("peak RSS             %10.1f MiB (%.1f%% of the model states)\n", mib(s->peak_rss_bytes),
         100.0 * (double)s->peak_rss_bytes / (double)s->model_state_bytes);
  printf("step                 %10.3f s (mean after the first)\n", s->step_s);
  printf("  compute alone      %10.3f s\n", s->compute_s);
  printf("  parameter reads    %10.3f s\n", s->param_io_s);
  printf("  Adam alone         %10.3f s\n", s->adam_s);
  printf("  optimizer I/O      %10.3f s\n", s->optimizer_io_s);
  if (s->world_size > 1) {
    printf("ranks                %10u (%u per node); per rank and step: %.1f MiB to other nodes, %.1f MiB within\n",
           s->world_size, s->ranks_per_node, mib((uint64_t)s->inter_node_bytes_per_step),
           mib((uint64_t)s->intra_node_bytes_per_step));
  }
  printf("  bound              %10.3f s = max(compute, parameter reads) + max(Adam, optimizer I/O); step/bound %.2f\n",
         s->bound_s, s->bound_s > 0 ? s->step_s / s->bound_s : 0.0);
  printf(
      "  I/O alone          %10.3f s = the step's NVMe bytes, raw, the faster of at once and one direction after the "
      "other\n",
      s->io_s);
  printf("  floor              %10.3f s = max(compute, I/O alone); step/floor %.2f\n", s->floor_s, over_floor(s));
  printf("NVMe per step        %10.1f MiB read, %.1f MiB written (zoe's count)\n", s->bytes.zoe_read / 1048576.0,
         s->bytes.zoe_written / 1048576.0);
  if (s->bytes.kernel_read >= 0) {
    printf("                     %10.1f MiB read, %.1f MiB written (the kernel's, /proc/self/io)\n",
           s->bytes.kernel_read / 1048576.0, s->bytes.kernel_written / 1048576.0);
  }
  if (s->statistics != NULL) {
    printf("\nzoe statistics (bytes and bandwidth per tier and direction):\n");
    print_indented_json(s->statistics);
  }
  fflush(stdout);
}

void mlp_report_reference_summary(int json, double step_s, uint64_t peak_rss_bytes) {
  if (json) {
    printf("{\"reference\": true, \"step_s\": %.6f, \"peak_rss_bytes\": %llu}\n", step_s,
           (unsigned long long)peak_rss_bytes);
  } else {
    printf("\nreference (in memory, no zoe): step %.3f s (mean after the first), peak RSS %.1f MiB\n", step_s,
           mib(peak_rss_bytes));
  }
  fflush(stdout);
}

uint64_t mlp_peak_rss_bytes(void) {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return (uint64_t)u.ru_maxrss * 1024u; /* Linux reports kilobytes */
}

double mlp_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
