// Checks before the first step of `bertpre train`: everything the run will write is tried
// before any work, so that a bad path or a full disk is reported in the first second rather
// than at the first checkpoint, and a run never takes over another run's checkpoints.
#pragma once
#include <stddef.h>
#include "engine/config.h"

// One run per train.checkpoint_dir (rank 0, before anything reads or cleans the directory;
// nothing when unset): creates the directory and takes an exclusive flock on its lock file
// PREFLIGHT_LOCK_FILE for the rest of the process's life, writing "host H, pid P, started
// T" into it. A directory locked by another process is an error naming that holder. Where
// the file system refuses flock (some NFS and Lustre mounts) a warning says that the
// directory is not protected, and the run goes on. The file stays (it is not a checkpoint).
// With `dry_run` the same refusal of a held lock, changing nothing: no directory or lock
// file is created, and a free lock is released at once.
#define PREFLIGHT_LOCK_FILE ".bertpre-lock"
void preflight_lock_checkpoint_dir(const train_config *t, const char *config_path, int dry_run);
// Before each checkpoint (rank 0): whether the lock taken above is still the lock file on
// disk. A `rm -rf` of the directory takes the file along, and a second run could then take
// a new one: when the file is gone or another, the directory is made again and locked anew
// (a warning says that its earlier checkpoints are gone), or, when another run holds the new
// lock, the run stops with an error naming that run and `step`, writing nothing there.
void preflight_lock_recheck(const train_config *t, const char *config_path, long step);
// train.checkpoint_dir (rank 0; nothing when unset): it must be a directory (created if
// absent) where a probe file can be written, fsynced and removed. Temporary directories
// left by interrupted writes are removed. A fresh run (resuming = 0) refuses a directory
// that already holds step-N checkpoints, naming it and them, unless `overwrite` is set:
// then they are removed first (never `source`, the checkpoint the run starts from, or NULL).
// A resumed run whose `source` lies outside a directory holding checkpoints is refused (or
// they are removed, with `overwrite`) the same way: they belong to another run. With
// `dry_run` the same checks and the probe, changing nothing: no directory is created and
// nothing removed (what the run would remove is said).
void preflight_checkpoint_dir(const train_config *t, const char *config_path, int resuming, int overwrite,
                              const char *source, int dry_run);
// Warns (stderr, naming both sizes) when the file system of train.checkpoint_dir has less
// free space than one checkpoint of n_params parameters.
void preflight_disk_space(const train_config *t, size_t n_params);

// train.metrics_file before anything touches it (rank 0, the run and --dry-run alike): an
// existing path that is the config, the tokenizer or the data of this run, a FIFO, socket,
// directory or block device, or a non-empty file whose first line is not a metrics line (a
// JSON object with "step"), is an error naming it. Character devices (/dev/null) are taken.
void preflight_metrics_target(const run_config *cfg, const char *config_path);
// A new run (not resuming) whose train.metrics_file already holds an earlier run's lines
// keeps them: the file is renamed to FILE.N (the first free N) and the run starts a new one.
// A resumed run appends to it, after removing a last line cut off by a failed write (said
// on stdout).
void preflight_metrics_file(const train_config *t, int resuming);
