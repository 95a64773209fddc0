/* options.c: parses zoe-train-mlp's flags; every bad flag or value is named on stderr and exits 2. */
#include "options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ZOE_MLP_DEFAULT_HIDDEN 2048
#define ZOE_MLP_DEFAULT_LAYERS 16
#define ZOE_MLP_DEFAULT_BATCH 512
#define ZOE_MLP_DEFAULT_STEPS 8
#define ZOE_MLP_DEFAULT_LR 1e-4
#define ZOE_MLP_DEFAULT_SEED 1

/* Every core but one: on the host device zoe's stream workers do what a GPU's copy engines do
 * (moving parameters, gradients and activations) and its I/O thread drives the drive; with BLAS on
 * every core they would take turns with it instead of running beside it. */
int mlp_default_blas_threads(unsigned local_ranks) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const long each = (cores - 1) / (long)(local_ranks > 0 ? local_ranks : 1);
  return each > 1 ? (int)each : 1;
}

static int default_blas_threads(void) { return mlp_default_blas_threads(1); }

void mlp_print_help(FILE* out) {
  fputs(
      "usage: zoe-train-mlp [flags]\n"
      "\n"
      "Trains an MLP of --layers wide layers (y = relu(x W^T + b), no ReLU on the last) on a synthetic\n"
      "regression task (inputs uniform in [-1, 1) drawn from (seed, step, row, column); each target a fixed\n"
      "quadratic function of two neighbouring inputs; MSE loss) with zoe: parameters, gradients and Adam\n"
      "states live in device memory, pinned host memory or on NVMe as the configuration places them, and\n"
      "the program computes forward and backward on the device pointers zoe hands it (OpenBLAS on the\n"
      "host device, cuBLAS on a CUDA device). Each layer's input is an activation checkpoint kept by zoe\n"
      "(zoe_activation_save); when the configuration gives zoe's activation store no room\n"
      "(zoe.activations.host_bytes and nvme_bytes both 0, as in a plain DeepSpeed file), the program keeps\n"
      "them itself in host memory of its own (copied off the device in forward, back in backward) rather than\n"
      "change the configuration it was given. The start line says which.\n"
      "\n",
      out);
  fprintf(out,
          "flags (defaults in brackets):\n"
          "  --hidden H            width of every layer [%d]\n"
          "  --layers L            number of layers, each with W (H x H) and b (H) [%d]\n"
          "  --batch B             global batch, split evenly over the configuration's\n"
          "                        gradient_accumulation_steps micro-batches and over the ranks (their\n"
          "                        product must divide it) [%d]\n"
          "  --micro-batches K     the built-in configuration's gradient_accumulation_steps [1]\n"
          "  --steps N             train up to step N (with --resume: from the checkpoint's step) [%d]\n"
          "  --lr LR               learning rate passed to every step [%g]\n"
          "  --seed S              seeds the initial weights and the data [%d]\n"
          "  --dir DIR             folder for the swap files (DIR/swap; DIR/rank-<r> on several ranks) and the\n"
          "                        checkpoints (DIR/checkpoints, one for all ranks); kept.\n"
          "                        [a new folder under $TMPDIR or /var/tmp, removed at exit; a folder on tmpfs\n"
          "                        or ramfs is refused, as it would hold the \"NVMe\" tier in memory]\n"
          "  --checkpoint-every K  save a checkpoint into DIR after every K-th step and print\n"
          "                        \"checkpoint step <n> saved in <path>\" on stdout [0: never]\n"
          "  --resume              continue from DIR's latest checkpoint (needs --dir); the step number comes\n"
          "                        from the checkpoint, the steps continue to --steps\n"
          "  --config FILE         a DeepSpeed-style JSON configuration (zoe's engine/CONFIG.md) instead of the\n"
          "                        built-in one: stage 3, fp32 weights, offload_param and offload_optimizer on nvme\n"
          "                        at DIR/swap (DIR/rank-<r> on several ranks), small pinned buffers, aio.block_size\n"
          "                        1 MiB, AdamW, gradient clipping 1.0, one micro-batch per step, the activations\n"
          "                        of a micro-batch in zoe's pinned host share\n"
          "  --device-budget BYTES device memory zoe and the program may use [what zoe's footprint plan of the\n"
          "                        configuration asks for on the device (zoe_footprint_plan, for this model on\n"
          "                        this many ranks: ZeRO++'s buffers included), plus the program's four buffers\n"
          "                        of a micro-batch, one loaded activation and 4 MiB for rounding; printed at start]\n"
          "  --device KIND         auto, host or cuda [auto: CUDA when a usable GPU is present]\n"
          "  --json                one JSON object per line (below) instead of the table (the checkpoint lines\n"
          "                        of --checkpoint-every stay text lines between them)\n"
          "  --reference           train the same model, same seed, in ordinary memory without zoe (plain arrays,\n"
          "                        the same BLAS forward and backward, Adam written out with zoe's arithmetic);\n"
          "                        prints the same per-step lines. One process only: refused under a launcher\n"
          "                        with several ranks, as it has no communicator (each rank would train the\n"
          "                        whole batch alone); the one-rank zoe run is the many-rank run's reference\n"
          "  --blas-threads T      OpenBLAS threads [%d: every core but one, which zoe's I/O thread and stream\n"
          "                        workers (the host device's copy engines) keep to themselves; under a launcher\n"
          "                        that many divided by the ranks on the node, at least 1]\n"
          "  --ranks-per-node N    ranks per node (zoe.ranks_per_node, set over --config's too): N consecutive\n"
          "                        ranks form a node, so 4 ranks on one machine can run as 2 nodes of 2 [zoe's\n"
          "                        default: MPI's shared-memory split]\n"
          "  --help                this text\n"
          "\n",
          ZOE_MLP_DEFAULT_HIDDEN, ZOE_MLP_DEFAULT_LAYERS, ZOE_MLP_DEFAULT_BATCH, ZOE_MLP_DEFAULT_STEPS,
          ZOE_MLP_DEFAULT_LR, ZOE_MLP_DEFAULT_SEED, default_blas_threads());
  fputs(
      "Many ranks: `mpirun -n 4 zoe-train-mlp --ranks-per-node 2 ...` trains data-parallel (the program does\n"
      "not link MPI: it learns its rank through zoe). Every rank draws the same global batch and trains on\n"
      "its rows (rank r of W: rows [r B/(K W), (r+1) B/(K W)) of each micro-batch of B/K rows), zoe averages\n"
      "the gradients over the ranks, so one rank with the same flags computes the same steps: bit for bit\n"
      "when every rank's rows are a power-of-two number of leaves of 128 rows and W is a power of two (the\n"
      "gradients and the loss are summed over the leaves, and zoe sums the ranks, in one pairwise tree),\n"
      "else up to the order of fp32 sums. The loss printed is the global mean (the squared errors summed\n"
      "over the ranks with zoe_all_reduce_sum, divided once). With --dir every rank keeps its swap files\n"
      "in DIR/rank-<r>. Rank 0 alone prints the lines below and the progress; another rank prints only its\n"
      "errors. Checkpoints are collective: every rank saves with --checkpoint-every into the one shared\n"
      "DIR/checkpoints (rank 0 writes it, the other ranks' shards reach it through zoe), and --resume loads\n"
      "it on any number of ranks: saved on 4, it resumes on 1 or 2 (and back), continuing the steps as the\n"
      "run that never stopped would, bit for bit where the sums are grouped alike (above), else up to the\n"
      "order of fp32 sums.\n"
      "\n",
      out);
  fputs(
      "--json output: one line per step\n"
      "  {\"step\": n, \"loss\": the step's loss (mean over its micro-batches of the mean squared error, %.9g),\n"
      "   \"loss_hex\": the same value as a C99 hex float (%a, compare bit for bit), \"skipped\": 1 when the\n"
      "   step was skipped for an inf/NaN gradient, \"grad_norm\": the averaged unscaled gradient norm,\n"
      "   \"step_s\": this step's wall time}\n"
      "then a final line with:\n"
      "  peak_device_bytes    the most device memory in use at once (zoe's and the program's activations)\n"
      "  device_budget_bytes  the device budget\n"
      "  model_state_bytes    every state of every parameter in bytes: per element the fp32 working copy\n"
      "                       (the master itself), the fp32 gradient, exp_avg and exp_avg_sq: 16 x numel\n"
      "  step_s               mean wall time of a step, over the steps after the first (the first pays\n"
      "                       for first touches); the only step's time when there was one\n"
      "  compute_s            forward and backward of one step with everything resident: the same BLAS and\n"
      "                       elementwise work over L layers with one layer's weights kept in device\n"
      "                       memory and the activations kept there too, no fetches (the second of two\n"
      "                       runs after training; the first warms up)\n"
      "  param_io_s           the step's parameter reads alone (zoe_measure_stages: every module fetched\n"
      "                       and released for forward, then for backward)\n"
      "  adam_s               Adam over every shard with its NVMe parts already read (zoe_measure_stages)\n"
      "  optimizer_io_s       the optimizer's NVMe reads and writes together, without Adam\n"
      "  bound_s              max(compute_s, param_io_s) + max(adam_s, optimizer_io_s): the step time if\n"
      "                       every transfer hid behind compute and Adam\n",
      out);
  /* C99 guarantees string literals of 4095 characters only: the final line's fields go in two. */
  fputs(
      "  io_s                 the drive's time for the last step's NVMe bytes (all of them, by the\n"
      "                       mover's count: parameters, gradients, optimizer, activations), replayed in\n"
      "                       this run through zoe's raw I/O engine alone (O_DIRECT, no swap store, no\n"
      "                       checksums, no copies, no compute) in a scratch file beside the swap files,\n"
      "                       at aio.queue_depth requests of aio.block_size, as the step has them: the\n"
      "                       faster of the reads and the writes in flight together and the reads alone\n"
      "                       then the writes alone (zoe_measure_stages' io_s). It matches `zoe-bench io`\n"
      "                       or fio moving the same bytes (fio: --rw=rw with that mix, or a read job then\n"
      "                       a write job, whichever is faster)\n"
      "  floor_s              max(compute_s, io_s): the step's compute or its I/O alone, whichever is longer\n"
      "  step_over_floor      step_s / floor_s (1 is a step that hides all I/O behind compute, or the reverse)\n"
      "  nvme_read_bytes_per_step, nvme_write_bytes_per_step  NVMe bytes a step read and wrote by zoe's count\n"
      "                       (zoe_statistics' totals over every stage), counted around each step and\n"
      "                       averaged over the steps of this run (checkpoint saves not included)\n"
      "  kernel_read_bytes_per_step, kernel_write_bytes_per_step  the same by the kernel's count\n"
      "                       (/proc/self/io read_bytes and write_bytes of every thread of the process);\n"
      "                       -1 when /proc/self/io cannot be read\n"
      "  peak_rss_bytes       the process's peak resident set (getrusage), zoe's host and pinned memory\n"
      "                       and the host device's memory included\n"
      "  statistics           zoe_statistics: bytes and bandwidth per tier and direction, fetch waits, ...\n"
      "                       (rank 0's)\n"
      "  world_size           the ranks that trained (1 without a launcher)\n"
      "  ranks_per_node       ranks per node as zoe grouped them (--ranks-per-node)\n"
      "  inter_node_bytes_per_step  bytes a rank sent to ranks on other nodes per step (zoe_engine_traffic:\n"
      "                       counted by the communicator over every collective of the engine, per rank,\n"
      "                       averaged over the ranks and the steps of this run); 0 on one node\n"
      "  intra_node_bytes_per_step  the same for bytes sent to ranks on the same node\n"
      "(With --reference the final line has \"reference\": true, step_s and peak_rss_bytes only.)\n"
      "\n"
      "exit status: 0 done, 1 a zoe or system failure (the message names it), 2 a bad flag or value,\n"
      "130 stopped by SIGINT or SIGTERM (after the step in progress, its temporary folder removed; a second\n"
      "signal ends it at once).\n",
      out);
}

static int bad(const char* flag, const char* value, const char* why) {
  if (value != NULL) {
    fprintf(stderr, "zoe-train-mlp: %s %s: %s (see --help)\n", flag, value, why);
  } else {
    fprintf(stderr, "zoe-train-mlp: %s: %s (see --help)\n", flag, why);
  }
  return 2;
}

/* An unsigned integer in [min, max], the whole string. */
static int parse_u64(const char* flag, const char* v, uint64_t min, uint64_t max, uint64_t* out) {
  if (v[0] == '\0' || v[0] == '-' || v[0] == '+') return bad(flag, v, "not a non-negative integer");
  char* end = NULL;
  errno = 0;
  const unsigned long long x = strtoull(v, &end, 10);
  if (errno != 0 || *end != '\0') return bad(flag, v, "not a non-negative integer");
  if (x < min || x > max) {
    char why[96];
    snprintf(why, sizeof why, "must lie in [%llu, %llu]", (unsigned long long)min, (unsigned long long)max);
    return bad(flag, v, why);
  }
  *out = x;
  return 0;
}

int mlp_parse_options(int argc, char** argv, mlp_options* o) {
  memset(o, 0, sizeof *o);
  o->hidden = ZOE_MLP_DEFAULT_HIDDEN;
  o->layers = ZOE_MLP_DEFAULT_LAYERS;
  o->batch = ZOE_MLP_DEFAULT_BATCH;
  o->steps = ZOE_MLP_DEFAULT_STEPS;
  o->lr = ZOE_MLP_DEFAULT_LR;
  o->seed = ZOE_MLP_DEFAULT_SEED;
  o->device = "auto";
  o->blas_threads = default_blas_threads();
  for (int i = 1; i < argc; ++i) {
    const char* f = argv[i];
    /* Flags without a value. */
    if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
      o->help = 1;
      continue;
    }
    if (strcmp(f, "--json") == 0) {
      o->json = 1;
      continue;
    }
    if (strcmp(f, "--reference") == 0) {
      o->reference = 1;
      continue;
    }
    if (strcmp(f, "--resume") == 0) {
      o->resume = 1;
      continue;
    }
    static const char* const with_value[] = {"--hidden",
                                             "--layers",
                                             "--batch",
                                             "--steps",
                                             "--lr",
                                             "--seed",
                                             "--dir",
                                             "--checkpoint-every",
                                             "--config",
                                             "--device",
                                             "--device-budget",
                                             "--blas-threads",
                                             "--micro-batches",
                                             "--ranks-per-node"};
    int known = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; ++k) known |= strcmp(f, with_value[k]) == 0;
    if (!known) return bad(f, NULL, "unknown flag");
    if (i + 1 >= argc) return bad(f, NULL, "needs a value");
    const char* v = argv[++i];
    uint64_t u = 0;
    int rc = 0;
    if (strcmp(f, "--hidden") == 0) {
      rc = parse_u64(f, v, 1, 1u << 16, &u);
      o->hidden = (size_t)u;
    } else if (strcmp(f, "--layers") == 0) {
      rc = parse_u64(f, v, 1, 100000, &u);
      o->layers = (size_t)u;
    } else if (strcmp(f, "--batch") == 0) {
      rc = parse_u64(f, v, 1, 1u << 20, &u);
      o->batch = (size_t)u;
    } else if (strcmp(f, "--micro-batches") == 0) {
      rc = parse_u64(f, v, 1, 1u << 20, &u);
      o->micro_batches = (size_t)u;
    } else if (strcmp(f, "--steps") == 0) {
      rc = parse_u64(f, v, 0, 1000000000, &u);
      o->steps = (long)u;
    } else if (strcmp(f, "--seed") == 0) {
      rc = parse_u64(f, v, 0, UINT64_MAX, &u);
      o->seed = u;
    } else if (strcmp(f, "--checkpoint-every") == 0) {
      rc = parse_u64(f, v, 0, 1000000000, &u);
      o->checkpoint_every = (long)u;
    } else if (strcmp(f, "--device-budget") == 0) {
      rc = parse_u64(f, v, 1, UINT64_MAX, &u);
      o->device_budget = u;
    } else if (strcmp(f, "--blas-threads") == 0) {
      rc = parse_u64(f, v, 1, 1024, &u);
      o->blas_threads = (int)u;
      o->blas_threads_given = 1;
    } else if (strcmp(f, "--ranks-per-node") == 0) {
      rc = parse_u64(f, v, 1, 1u << 20, &u);
      o->ranks_per_node = (size_t)u;
    } else if (strcmp(f, "--lr") == 0) {
      char* end = NULL;
      errno = 0;
      o->lr = strtod(v, &end);
      if (errno != 0 || *end != '\0' || v[0] == '\0' || !(o->lr >= 0.0) || o->lr > 1e30) {
        rc = bad(f, v, "not a finite number >= 0");
      }
    } else if (strcmp(f, "--dir") == 0) {
      if (v[0] == '\0') rc = bad(f, v, "empty path");
      o->dir = v;
    } else if (strcmp(f, "--config") == 0) {
      if (v[0] == '\0') rc = bad(f, v, "empty path");
      o->config = v;
    } else if (strcmp(f, "--device") == 0) {
      if (strcmp(v, "auto") != 0 && strcmp(v, "host") != 0 && strcmp(v, "cuda") != 0) {
        rc = bad(f, v, "must be auto, host or cuda");
      }
      o->device = v;
    }
    if (rc != 0) return rc;
  }
  if (o->help) return 0;
  if (o->resume && o->dir == NULL) return bad("--resume", NULL, "needs --dir (the folder holding the checkpoints)");
  if (o->config != NULL && o->micro_batches != 0) {
    return bad("--micro-batches", NULL, "with --config the configuration's gradient_accumulation_steps decides");
  }
  if (o->resume && o->reference) return bad("--resume", NULL, "cannot be combined with --reference");
  return 0;
}
