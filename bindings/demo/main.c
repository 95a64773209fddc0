/* zoe-train-mlp: trains an MLP whose states do not fit in device memory, through zoe's C API.
 * main.c: the flags, the training loop with its checkpoints, and the output. */
#include <cblas.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "model.h"
#include "options.h"
#include "reference.h"
#include "report.h"
#include "run_dir.h"
#include "step_bytes.h"
#include "trainer.h"
#include "zoe/zoe.h"

/* OpenBLAS's own call (cblas.h declares it); BLAS, zoe's I/O thread and its workers share the
 * cores, so the demo sets it rather than letting OpenBLAS take every core. */
void openblas_set_num_threads(int num_threads);

/* Set by SIGINT / SIGTERM: the run stops after the step in progress and cleans up (its temporary
 * folder holds a gigabyte of swap files); a second signal ends it at once. */
static volatile sig_atomic_t stop_requested = 0;

static void request_stop(int signal_number) {
  stop_requested = 1;
  struct sigaction restore;
  memset(&restore, 0, sizeof restore);
  restore.sa_handler = SIG_DFL;
  sigaction(signal_number, &restore, NULL);
}

static void install_stop_handlers(void) {
  struct sigaction a;
  memset(&a, 0, sizeof a);
  a.sa_handler = request_stop;
  sigemptyset(&a.sa_mask);
  sigaction(SIGINT, &a, NULL);
  sigaction(SIGTERM, &a, NULL);
}

/* Saves the checkpoint of `step` into DIR/checkpoints and drops the one saved before it. Collective:
 * every rank calls it after the same step (zoe_checkpoint_save gathers the ranks' shards into one
 * folder that rank 0 writes, so the checkpoint loads on any number of ranks); rank 0 alone prints
 * and removes the older checkpoint, which no rank reads any more once the save has returned. */
static int save_checkpoint(mlp_trainer* t, const mlp_run_dir* dir, long step, long* previous) {
  char tag[64];
  snprintf(tag, sizeof tag, "step-%ld", step);
  if (mlp_check(zoe_checkpoint_save(t->engine, dir->checkpoints, tag), "zoe_checkpoint_save") != 0) return -1;
  if (t->ranks.rank == 0) {
    printf("checkpoint step %ld saved in %s/%s\n", step, dir->checkpoints, tag);
    fflush(stdout);
    /* DIR/checkpoints/latest names the new one now: the old one is no longer needed. */
    if (*previous >= 0 && *previous != step) mlp_remove_checkpoint(dir, *previous);
  }
  *previous = step;
  return 0;
}

/* Loads DIR's latest checkpoint and returns its step, or -1 with a message. Collective: rank 0
 * reads DIR/checkpoints/latest and the others learn its step through the all-reduce (-1 when it
 * failed, so every rank stops alike), then every rank loads that tag: the ranks cannot pick
 * different checkpoints even when a save lands in between. */
static long resume_checkpoint(mlp_trainer* t, const mlp_run_dir* dir) {
  double at = 0.0;
  if (t->ranks.rank == 0) at = (double)mlp_latest_checkpoint_step(dir);
  if (mlp_check(zoe_all_reduce_sum(t->engine, &at, 1), "zoe_all_reduce_sum") != 0 || at < 0.0) return -1;
  const long step = (long)at;
  char tag[64];
  snprintf(tag, sizeof tag, "step-%ld", step);
  if (mlp_check(zoe_checkpoint_load(t->engine, dir->checkpoints, tag), "zoe_checkpoint_load") != 0) return -1;
  return step;
}

/* What crossed between ranks over the steps of this run: the engine's counters before and after,
 * averaged over the ranks (collective) and the steps. */
typedef struct traffic_mark {
  uint64_t intra;
  uint64_t inter;
} traffic_mark;

static int traffic_now(mlp_trainer* t, traffic_mark* m) {
  zoe_comm_traffic c = ZOE_COMM_TRAFFIC_INIT;
  if (mlp_check(zoe_engine_traffic(t->engine, &c), "zoe_engine_traffic") != 0) return -1;
  m->intra = c.intra_node_bytes;
  m->inter = c.inter_node_bytes;
  return 0;
}

static int traffic_per_step(mlp_trainer* t, const traffic_mark* before, long steps, mlp_summary* s) {
  traffic_mark after;
  if (traffic_now(t, &after) != 0) return -1;
  double v[2] = {(double)(after.intra - before->intra), (double)(after.inter - before->inter)};
  if (mlp_check(zoe_all_reduce_sum(t->engine, v, 2), "zoe_all_reduce_sum") != 0) return -1;
  const double per = steps > 0 ? (double)t->ranks.world_size * (double)steps : 1.0;
  s->intra_node_bytes_per_step = v[0] / per;
  s->inter_node_bytes_per_step = v[1] / per;
  return 0;
}

static int train(const mlp_options* o, const zoe_ranks* launch, size_t micro_batches, const char* user_config) {
  const int several = launch->world_size > 1;
  const int lead = launch->rank == 0; /* prints the lines and the progress */
  mlp_run_dir dir;
  if (mlp_run_dir_open(o->dir, several ? (long)launch->rank : -1, &dir) != 0) return 1;
  /* The built-in configuration and the budget for a whole micro-batch: a rank's share needs less. */
  const size_t rows = o->batch / micro_batches;
  char* builtin = NULL;
  if (user_config == NULL) {
    builtin = mlp_builtin_config(dir.swap, o->hidden, o->layers, micro_batches, rows, o->lr);
    if (builtin == NULL) {
      fprintf(stderr, "zoe-train-mlp: out of memory\n");
      mlp_run_dir_close(&dir);
      return 1;
    }
  }
  const char* config = user_config != NULL ? user_config : builtin;
  char overrides[96];
  if (o->ranks_per_node != 0) {
    snprintf(overrides, sizeof overrides, "{\"zoe\": {\"ranks_per_node\": %zu}}", o->ranks_per_node);
  }
  const char* patch = o->ranks_per_node != 0 ? overrides : NULL;
  /* What zoe will ask for, before the device is opened: its budget, and whether zoe has room for
   * the activations. */
  zoe_footprint plan = ZOE_FOOTPRINT_INIT;
  if (mlp_plan(o, config, patch, launch->world_size, &plan) != 0) {
    free(builtin);
    mlp_run_dir_close(&dir);
    return 1;
  }
  const uint64_t budget = o->device_budget != 0 ? o->device_budget : mlp_device_budget(&plan, o->hidden, rows);
  const int keep_activations = mlp_keeps_activations(&plan);
  const uint64_t states = mlp_model_state_bytes(o->hidden, o->layers);
  FILE* info = o->json ? stderr : stdout;
  if (lead) {
    fprintf(info,
            "zoe-train-mlp: %zu layers of %zu x %zu, batch %zu in %zu micro-batch(es) on %u rank(s); model states %llu "
            "bytes, device budget %llu bytes (%s; states = %.1fx budget); activations kept by %s; folder %s%s\n",
            o->layers, o->hidden, o->hidden, o->batch, micro_batches, launch->world_size, (unsigned long long)states,
            (unsigned long long)budget,
            o->device_budget != 0 ? "--device-budget" : "zoe's plan and the program's buffers",
            (double)states / (double)budget,
            keep_activations ? "the program (the configuration gives zoe.activations no room)" : "zoe", dir.root,
            dir.temporary ? " (temporary)" : "");
    fflush(info);
  }

  if (o->checkpoint_every > 0 && dir.temporary && lead) {
    fprintf(stderr,
            "zoe-train-mlp: warning: --checkpoint-every without --dir: the checkpoints go into the temporary "
            "folder %s and are removed with it at exit\n",
            dir.root);
  }
  int rc = 1;
  mlp_trainer t;
  const int opened = mlp_trainer_open(&t, o, config, patch, micro_batches, budget, keep_activations);
  if (opened != 0) {
    rc = opened == 2 ? 2 : 1;
    goto done;
  }
  if (t.ranks.world_size != launch->world_size || t.ranks.rank != launch->rank) {
    fprintf(stderr,
            "zoe-train-mlp: the launcher says rank %u of %u, zoe's engine rank %u of %u (zoe.comm.backend?): they "
            "must agree\n",
            launch->rank, launch->world_size, t.ranks.rank, t.ranks.world_size);
    goto done;
  }

  long first = 1;
  long previous_checkpoint = -1;
  if (o->resume) {
    const long at = resume_checkpoint(&t, &dir);
    if (at < 0) goto done;
    if (lead) {
      fprintf(info, "zoe-train-mlp: resumed from the checkpoint of step %ld in %s on %u rank(s)\n", at, dir.checkpoints,
              t.ranks.world_size);
      fflush(info);
    }
    first = at + 1;
    previous_checkpoint = at;
  }

  if (lead) mlp_report_header(o->json);
  double after_first = 0.0;
  double only = 0.0;
  long timed = 0;
  long ran = 0;
  traffic_mark before;
  if (traffic_now(&t, &before) != 0) goto done;
  /* The steps' own NVMe bytes: counted around each step, so that checkpoint saves do not count. */
  mlp_step_bytes moved;
  memset(&moved, 0, sizeof moved);
  for (long step = first; step <= o->steps; ++step) {
    /* The marks lie outside the step's time: each renders zoe_statistics' JSON. */
    mlp_byte_mark bytes_before;
    mlp_byte_mark bytes_after;
    if (mlp_byte_mark_now(t.engine, &bytes_before) != 0) goto done;
    const double t0 = mlp_now();
    double sum_sq = 0.0;
    zoe_step_result r = ZOE_STEP_RESULT_INIT;
    if (mlp_trainer_step(&t, step, o->lr, &sum_sq, &r) != 0) goto done;
    ++ran;
    /* The global batch's mean loss: the ranks' squared errors added (in the pairwise tree, as the
     * leaves of each rank's rows were), divided once by every element of the batch. A signal that
     * reached some ranks stops them all after this step (a rank that stopped alone would leave the
     * others waiting). */
    double global[2] = {sum_sq, stop_requested ? 1.0 : 0.0};
    if (several && mlp_check(zoe_all_reduce_sum(t.engine, global, 2), "zoe_all_reduce_sum") != 0) goto done;
    const double loss = global[0] / ((double)o->batch * (double)o->hidden);
    const int stop = global[1] > 0.0;
    const double seconds = mlp_now() - t0;
    if (mlp_byte_mark_now(t.engine, &bytes_after) != 0) goto done;
    mlp_step_bytes_add(&moved, &bytes_before, &bytes_after);
    if (step == first) {
      only = seconds;
    } else {
      after_first += seconds;
      ++timed;
    }
    const mlp_step_line line = {step, o->steps, loss, r.skipped, r.grad_norm, seconds};
    if (lead) mlp_report_step(o->json, &line);
    if (o->checkpoint_every > 0 && step % o->checkpoint_every == 0 &&
        save_checkpoint(&t, &dir, step, &previous_checkpoint) != 0) {
      goto done;
    }
    if (stop) {
      if (lead) fprintf(stderr, "zoe-train-mlp: stopped by a signal after step %ld\n", step);
      rc = 130;
      goto done;
    }
  }

  mlp_summary s;
  memset(&s, 0, sizeof s);
  s.device_budget_bytes = budget;
  s.model_state_bytes = states;
  s.step_s = timed > 0 ? after_first / (double)timed : only;
  s.world_size = t.ranks.world_size;
  s.ranks_per_node = t.ranks.ranks_per_node;
  if (traffic_per_step(&t, &before, ran, &s) != 0) goto done;
  /* The statistics of training alone: zoe_measure_stages' own reads and writes would count too. */
  char* statistics = mlp_statistics_json(t.engine);
  s.statistics = statistics;
  zoe_stage_times st = ZOE_STAGE_TIMES_INIT;
  if (first <= o->steps) {
    if (mlp_check(zoe_measure_stages(t.engine, &st), "zoe_measure_stages") != 0) {
      free(statistics);
      goto done;
    }
  } else if (lead) {
    fprintf(stderr, "zoe-train-mlp: no step ran in this process: the stage times are not measured\n");
  }
  s.param_io_s = st.param_io_s;
  s.adam_s = st.adam_s;
  s.optimizer_io_s = st.optimizer_io_s;
  s.bytes = mlp_step_bytes_mean(&moved);
  uint64_t current = 0;
  uint64_t device_budget = 0;
  if (mlp_check(zoe_device_memory(t.device, &current, &s.peak_device_bytes, &device_budget), "zoe_device_memory") !=
      0) {
    free(statistics);
    goto done;
  }
  if (mlp_trainer_close_engine(&t) != 0) {
    free(statistics);
    goto done;
  }
  s.compute_s = mlp_trainer_compute_s(&t);
  if (s.compute_s < 0) { /* the message is out already; no figure without its compute time */
    free(statistics);
    goto done;
  }
  const double io = s.param_io_s > s.compute_s ? s.param_io_s : s.compute_s;
  const double opt = s.adam_s > s.optimizer_io_s ? s.adam_s : s.optimizer_io_s;
  s.bound_s = io + opt;
  /* The drive's share alone: the last step's NVMe bytes through zoe's raw I/O engine, reads and
   * writes in flight together as the step has them. */
  s.io_s = st.io_s;
  s.floor_s = s.compute_s > s.io_s ? s.compute_s : s.io_s;
  s.peak_rss_bytes = mlp_peak_rss_bytes();
  if (lead) mlp_report_summary(o->json, &s);
  free(statistics);
  rc = 0;
done:
  mlp_trainer_close(&t);
  free(builtin);
  mlp_run_dir_close(&dir);
  return rc;
}

int main(int argc, char** argv) {
  mlp_options o;
  const int parsed = mlp_parse_options(argc, argv, &o);
  if (parsed != 0) return parsed;
  if (o.help) {
    mlp_print_help(stdout);
    return 0;
  }
  /* Where this process stands, as its launcher says (zoe's engine confirms it once made). */
  zoe_ranks launch = ZOE_RANKS_INIT;
  if (mlp_check(zoe_launcher_ranks(&launch), "zoe_launcher_ranks") != 0) return 1;
  mlp_set_rank(launch.rank, launch.world_size);
  if (launch.world_size > 1 && o.reference) {
    /* The reference uses no communicator: every rank would train the whole batch alone, the same
     * numbers W times over, and compare with nothing a many-rank run computes. */
    fprintf(stderr,
            "zoe-train-mlp: --reference trains in one process without zoe (no communicator: each of the %u ranks "
            "would train the whole batch alone): run it without a launcher; the one-rank zoe run is the reference "
            "of a many-rank run\n",
            launch.world_size);
    return 2;
  }
  openblas_set_num_threads(o.blas_threads_given ? o.blas_threads : mlp_default_blas_threads(launch.ranks_per_node));
  install_stop_handlers();

  char* user_config = NULL;
  size_t micro_batches = o.micro_batches != 0 ? o.micro_batches : 1;
  if (o.config != NULL) {
    if (o.reference) {
      fprintf(stderr, "zoe-train-mlp: --reference: trains the built-in configuration only; drop --config\n");
      return 2;
    }
    user_config = mlp_read_file(o.config);
    if (user_config == NULL) return 2;
    micro_batches = mlp_config_accumulation(user_config);
    if (micro_batches == 0) {
      free(user_config);
      return 2;
    }
  }
  if (o.batch % micro_batches != 0) {
    fprintf(stderr, "zoe-train-mlp: --batch %zu: not a multiple of gradient_accumulation_steps %zu\n", o.batch,
            micro_batches);
    free(user_config);
    return 2;
  }
  if (o.batch % (micro_batches * launch.world_size) != 0) {
    fprintf(stderr,
            "zoe-train-mlp: --batch %zu: not a multiple of gradient_accumulation_steps %zu times the world size %u "
            "(every rank takes an equal share of every micro-batch)\n",
            o.batch, micro_batches, launch.world_size);
    free(user_config);
    return 2;
  }
  const int rc = o.reference ? mlp_reference_run(&o, micro_batches) : train(&o, &launch, micro_batches, user_config);
  free(user_config);
  return rc;
}
