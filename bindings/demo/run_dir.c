/* run_dir.c: the run's folder on a real disk. */
#include "run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define ZOE_MLP_TMPFS_MAGIC 0x01021994L
#define ZOE_MLP_RAMFS_MAGIC 0x858458f6L

static int make_folder(const char* path) {
  if (mkdir(path, 0700) == 0 || errno == EEXIST) return 0;
  fprintf(stderr, "zoe-train-mlp: cannot make the folder %s: %s\n", path, strerror(errno));
  return -1;
}

static int join(char* out, size_t size, const char* a, const char* b) {
  const int n = snprintf(out, size, "%s/%s", a, b);
  if (n < 0 || (size_t)n >= size) {
    fprintf(stderr, "zoe-train-mlp: the path %s/%s is too long\n", a, b);
    return -1;
  }
  return 0;
}

int mlp_run_dir_open(const char* dir, long rank, mlp_run_dir* out) {
  memset(out, 0, sizeof *out);
  if (dir == NULL) {
    const char* base = getenv("TMPDIR");
    if (base == NULL || base[0] == '\0') base = "/var/tmp";
    if (join(out->root, sizeof out->root, base, "zoe-train-mlp.XXXXXX") != 0) return -1;
    if (mkdtemp(out->root) == NULL) {
      fprintf(stderr, "zoe-train-mlp: cannot make a folder from %s: %s (set --dir or TMPDIR)\n", out->root,
              strerror(errno));
      return -1;
    }
    out->temporary = 1;
  } else {
    if (strlen(dir) >= sizeof out->root) {
      fprintf(stderr, "zoe-train-mlp: --dir %s: the path is too long\n", dir);
      return -1;
    }
    strcpy(out->root, dir);
    if (make_folder(out->root) != 0) return -1;
  }
  for (const char* p = out->root; *p != '\0'; ++p) {
    if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) {
      fprintf(stderr, "zoe-train-mlp: --dir %s: the path holds a quote, backslash or control character\n", out->root);
      mlp_run_dir_close(out);
      return -1;
    }
  }
  struct statfs fs;
  if (statfs(out->root, &fs) == 0 &&
      ((long)fs.f_type == ZOE_MLP_TMPFS_MAGIC || (long)fs.f_type == ZOE_MLP_RAMFS_MAGIC)) {
    fprintf(stderr,
            "zoe-train-mlp: %s is on tmpfs/ramfs: the swap files would stay in memory, not on a disk. Choose a folder "
            "on a real disk with --dir (or TMPDIR), e.g. under /var/tmp\n",
            out->root);
    mlp_run_dir_close(out);
    return -1;
  }
  char swap_name[32];
  if (rank >= 0) {
    snprintf(swap_name, sizeof swap_name, "rank-%ld", rank);
  } else {
    strcpy(swap_name, "swap");
  }
  if (join(out->swap, sizeof out->swap, out->root, swap_name) != 0 ||
      join(out->checkpoints, sizeof out->checkpoints, out->root, "checkpoints") != 0 || make_folder(out->swap) != 0 ||
      make_folder(out->checkpoints) != 0) {
    mlp_run_dir_close(out);
    return -1;
  }
  return 0;
}

static int remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  if (remove(path) != 0) fprintf(stderr, "zoe-train-mlp: cannot remove %s: %s\n", path, strerror(errno));
  return 0;
}

void mlp_run_dir_close(mlp_run_dir* d) {
  if (!d->temporary || d->root[0] == '\0') return;
  nftw(d->root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  d->temporary = 0;
}

long mlp_latest_checkpoint_step(const mlp_run_dir* d) {
  char path[4200];
  if (join(path, sizeof path, d->checkpoints, "latest") != 0) return -1;
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr, "zoe-train-mlp: --resume: no checkpoint to resume from: cannot open %s: %s\n", path,
            strerror(errno));
    return -1;
  }
  long step = -1;
  char extra = 0;
  const int n = fscanf(f, "step-%ld%c", &step, &extra);
  fclose(f);
  if (n < 1 || step < 0) {
    fprintf(stderr, "zoe-train-mlp: --resume: %s does not name a checkpoint \"step-<n>\" of this program\n", path);
    return -1;
  }
  return step;
}

void mlp_remove_checkpoint(const mlp_run_dir* d, long step) {
  char name[64];
  snprintf(name, sizeof name, "step-%ld", step);
  char path[4200];
  if (join(path, sizeof path, d->checkpoints, name) != 0) return;
  DIR* dir = opendir(path);
  if (dir == NULL) return;
  for (struct dirent* e = readdir(dir); e != NULL; e = readdir(dir)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char file[4500];
    snprintf(file, sizeof file, "%s/%s", path, e->d_name);
    if (unlink(file) != 0) fprintf(stderr, "zoe-train-mlp: cannot remove %s: %s\n", file, strerror(errno));
  }
  closedir(dir);
  if (rmdir(path) != 0) fprintf(stderr, "zoe-train-mlp: cannot remove %s: %s\n", path, strerror(errno));
}
