/* run_dir.h: the folder a run keeps its swap files and checkpoints in. */
#ifndef ZOE_DEMO_RUN_DIR_H
#define ZOE_DEMO_RUN_DIR_H

#include <stddef.h>

typedef struct mlp_run_dir {
  char root[4096];        /* DIR */
  char swap[4096];        /* DIR/swap (DIR/rank-<r> on several ranks): the built-in configuration's nvme_path */
  char checkpoints[4096]; /* DIR/checkpoints */
  int temporary;          /* made by mlp_run_dir_open: removed by mlp_run_dir_close */
} mlp_run_dir;

/* Opens `dir` (made when missing), or a new folder under $TMPDIR or /var/tmp when `dir` is NULL,
 * and makes its swap and checkpoints folders: the swap folder is DIR/swap, or DIR/rank-<rank> when
 * `rank` >= 0 (each rank of a many-rank run its own, in one shared DIR). Refuses a folder on tmpfs or ramfs (the NVMe
 * tier would live in memory) and a path a JSON string cannot hold plainly. 0, or -1 with a message. */
int mlp_run_dir_open(const char* dir, long rank, mlp_run_dir* out);
/* Removes the folder when it is temporary. */
void mlp_run_dir_close(mlp_run_dir* d);

/* The step of the latest checkpoint (DIR/checkpoints/latest names "step-<n>"), or -1 with a
 * message naming the file. */
long mlp_latest_checkpoint_step(const mlp_run_dir* d);
/* Removes the checkpoint folder DIR/checkpoints/step-<step> (flat: files only). */
void mlp_remove_checkpoint(const mlp_run_dir* d, long step);

#endif /* ZOE_DEMO_RUN_DIR_H */
