// Early checks of `bertpre train` (see preflight.h): the checkpoint directory's ownership,
// a probe write, stale temporary directories, the free space for one checkpoint, and the
// metrics file of an earlier run.
#include "engine/preflight.h"
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "engine/checkpoint.h"
#include "kernels/common/files.h"
#include "kernels/common/check.h"

static void make_parents(const char *dir, const char *config_path) {
    char buf[1100];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1;; p++) {
        int end = *p == 0;
        if (*p != '/' && !end) continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            fatal("%s: field 'train.checkpoint_dir' = '%s': cannot create the directory '%s': %s", config_path, dir,
                  buf, strerror(errno));
        if (end) break;
        *p = '/';
    }
}

// train.checkpoint_dir: a file there is an error; with `create` the directory is created with
// its parents. Returns whether it exists now.
static int checkpoint_dir_ready(const char *dir, const char *config_path, int create) {
    struct stat st;
    int exists = stat(dir, &st) == 0;
    if (exists && !S_ISDIR(st.st_mode))
        fatal("%s: field 'train.checkpoint_dir' = '%s' is a file, not a directory", config_path, dir);
    if (create) make_parents(dir, config_path);
    return exists || create;
}

// The lock of train.checkpoint_dir this process holds (rank 0), kept to check before each
// checkpoint that it is still the lock file on disk.
static dir_lock held = {.fd = -1};

void preflight_lock_checkpoint_dir(const train_config *t, const char *config_path, int dry_run) {
    const char *dir = t->checkpoint_dir;
    if (!dir[0]) return;
    if (!checkpoint_dir_ready(dir, config_path, !dry_run)) return;  // a dry run creates nothing
    char what[1300], holder[512];
    snprintf(what, sizeof what, "%s: field 'train.checkpoint_dir' = '%s'", config_path, dir);
    dir_lock l;
    // Never released: the lock lasts as long as the process (and ends with it, however it ends).
    int got = dir_lock_take(&l, dir, PREFLIGHT_LOCK_FILE, !dry_run, what, holder, sizeof holder);
    if (got == DIR_LOCK_ABSENT) return;  // no lock file: no run holds the directory
    if (got == DIR_LOCK_UNSUPPORTED) {
        fprintf(stderr,
                "bertpre: warning: train.checkpoint_dir '%s': cannot lock %s (flock: %s): this file system does "
                "not support locks, so nothing stops a second run on the same directory from removing this "
                "run's checkpoints (docs/CHECKPOINTS.md)\n",
                dir, l.path, strerror(errno));
        return;
    }
    if (got == DIR_LOCK_HELD)
        fatal("%s is in use by another run (%s, holding %s): two runs in one directory remove each other's "
              "checkpoints. Wait for that run to end, stop it, or choose another directory",
              what, holder[0] ? holder : "its host and pid not written", l.path);
    if (dry_run) {  // the lock was free: let it go at once, writing nothing
        dir_lock_release(&l);
        return;
    }
    // Who holds it, for the message of a second run. The lock holds without it: a full disk
    // here is reported by the probe write that follows (preflight_checkpoint_dir).
    dir_lock_sign(&l);
    held = l;
}

void preflight_lock_recheck(const train_config *t, const char *config_path, long step) {
    if (held.fd < 0 || dir_lock_intact(&held)) return;
    // The lock file is gone or another: the directory was removed (rm -rf) or replaced while
    // this run held it. It is made again and locked anew, unless another run took it since.
    const char *dir = t->checkpoint_dir;
    make_parents(dir, config_path);
    char what[1300], holder[512];
    snprintf(what, sizeof what, "%s: field 'train.checkpoint_dir' = '%s'", config_path, dir);
    dir_lock l;
    int got = dir_lock_take(&l, dir, PREFLIGHT_LOCK_FILE, 1, what, holder, sizeof holder);
    if (got == DIR_LOCK_HELD)
        fatal("%s was removed while this run held it (its lock file %s went with it), and another run (%s) has "
              "taken it since: this run stops without writing its checkpoint of step %ld there, so that the two "
              "do not remove each other's checkpoints; continue that run, or start this one again in another "
              "directory",
              what, held.path, holder[0] ? holder : "its host and pid not written", step);
    dir_lock_release(&held);
    if (got == DIR_LOCK_TAKEN) dir_lock_sign(&l), held = l;
    fprintf(stderr,
            "bertpre: warning: train.checkpoint_dir '%s' was removed or replaced while this run held it (its lock "
            "file %s is not the one locked): the run made it again%s and goes on writing its checkpoints there; the "
            "checkpoints it held before are gone\n",
            dir, held.path, got == DIR_LOCK_TAKEN ? " and locked it" : " (unlocked: the file system refuses flock)");
}

// Whether checkpoint `source` lies directly in directory `dir`.
static int lies_in(const char *source, const char *dir) {
    char a[PATH_MAX], b[PATH_MAX];
    if (!source || !realpath(source, a) || !realpath(dir, b)) return 0;
    char *slash = strrchr(a, '/');
    if (!slash) return 0;
    *slash = 0;
    return strcmp(a, b) == 0;
}

void preflight_checkpoint_dir(const train_config *t, const char *config_path, int resuming, int overwrite,
                              const char *source, int dry_run) {
    const char *dir = t->checkpoint_dir;
    if (!dir[0]) return;
    if (!checkpoint_dir_ready(dir, config_path, !dry_run)) return;  // a dry run creates nothing
    int stale = dry_run ? 0 : checkpoint_remove_stale(dir);
    if (stale) printf("  removed %d temporary director%s left in %s by an interrupted checkpoint write\n", stale,
                      stale == 1 ? "y" : "ies", dir);
    char names[600];
    int n = checkpoint_list(dir, names, sizeof names);
    // Resuming from a checkpoint outside the directory that already holds checkpoints: they
    // are another run's, and this run's checkpoints would rotate them out.
    if (n && resuming && source && !lies_in(source, dir) && !overwrite)
        fatal("%s: field 'train.checkpoint_dir' = '%s' already holds %d checkpoint%s (%s%s), and this run resumes "
              "from %s, which is not among them: its checkpoints would be rotated in with theirs and replace them. "
              "Resume from one of them (--resume auto), remove them with --overwrite-checkpoints, or choose "
              "another directory",
              config_path, dir, n, n == 1 ? "" : "s", names, strlen(names) >= sizeof names - 1 ? "..." : "", source);
    if (n && resuming && source && !lies_in(source, dir)) {
        if (!dry_run) checkpoint_remove_all(dir);
        printf("  --overwrite-checkpoints: %s %d checkpoint%s of another run from %s (%s)\n",
               dry_run ? "the run would remove" : "removed", n, n == 1 ? "" : "s", dir, names);
    }
    if (n && !resuming) {
        if (overwrite && lies_in(source, dir))
            fatal("--overwrite-checkpoints would remove %s, the checkpoint this run starts from; copy it elsewhere "
                  "or choose another train.checkpoint_dir", source);
        if (!overwrite)
            fatal("%s: field 'train.checkpoint_dir' = '%s' already holds %d checkpoint%s of another run (%s%s): "
                  "a new run would replace and rotate them out. Continue that run with --resume auto, remove them "
                  "with --overwrite-checkpoints, or choose another directory",
                  config_path, dir, n, n == 1 ? "" : "s", names, strlen(names) >= sizeof names - 1 ? "..." : "");
        if (!dry_run) checkpoint_remove_all(dir);
        printf("  --overwrite-checkpoints: %s %d checkpoint%s of a previous run from %s (%s)\n",
               dry_run ? "the run would remove" : "removed", n, n == 1 ? "" : "s", dir, names);
    }
    // A probe: create, write, fsync and remove a small file, as a checkpoint write would.
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/.probe-%d", dir, (int)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int ok = fd >= 0;
    static const char text[] = "bertpre checks that checkpoints can be written here\n";
    ok = ok && write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1) && fsync(fd) == 0;
    int saved = errno;
    if (fd >= 0) close(fd);
    unlink(probe);
    if (!ok)
        fatal("%s: field 'train.checkpoint_dir' = '%s': cannot write a checkpoint there (probe file %s: %s)",
              config_path, dir, probe, strerror(saved));
}

void preflight_disk_space(const train_config *t, size_t n_params) {
    if (!t->checkpoint_dir[0]) return;
    struct statvfs fs;
    if (statvfs(t->checkpoint_dir, &fs) != 0) return;
    double free_bytes = (double)fs.f_bavail * (double)fs.f_frsize, need = checkpoint_bytes(n_params);
    if (free_bytes < need)
        fprintf(stderr,
                "bertpre: warning: train.checkpoint_dir '%s' has %.3g MB free, less than one checkpoint of this "
                "model (%.3g MB: weights and two LAMB moments); checkpoint writes will fail unless space is freed\n",
                t->checkpoint_dir, free_bytes / 1e6, need / 1e6);
}

// Whether the head of a file reads as bertpre's metrics: its first line a JSON object with a
// "step" (or, cut by a failed write before its end, the start of one).
static int looks_like_metrics(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 1;  // unreadable: opening it for writing reports the error
    char head[4097];
    size_t n = fread(head, 1, sizeof head - 1, f);
    fclose(f);
    head[n] = 0;
    if (n < 2 || head[0] != '{' || head[1] != '"') return 0;
    char *end = memchr(head, '\n', n);
    if (!end) return n < sizeof head - 1;
    json_t *line = json_loadb(head, (size_t)(end - head), 0, NULL);
    int ok = json_is_object(line) && json_object_get(line, "step");
    json_decref(line);
    return ok;
}

void preflight_metrics_target(const run_config *cfg, const char *config_path) {
    const char *path = cfg->train.metrics_file;
    struct stat st;
    if (!path[0] || stat(path, &st) != 0) return;
    const char *inputs[][2] = {{config_path, "the config file"}, {cfg->train.tokenizer, "train.tokenizer"},
                               {cfg->train.data, "train.data"}, {cfg->train.eval_data, "train.eval_data"}};
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++)
        if (inputs[i][0][0] && same_file(path, inputs[i][0]))
            fatal("%s: field 'train.metrics_file' = '%s' is %s of this run (%s): the run would move it aside and "
                  "write its metrics in its place; choose another file", config_path, path, inputs[i][1],
                  inputs[i][0]);
    if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode))
        fatal("%s: field 'train.metrics_file' = '%s' is %s, not a file%s; choose a file", config_path, path,
              S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket" : S_ISDIR(st.st_mode)
                                                                                   ? "a directory" : "a block device",
              S_ISFIFO(st.st_mode) ? " (the run would wait for a reader before its first step, silently)" : "");
    if (S_ISREG(st.st_mode) && st.st_size > 0 && !looks_like_metrics(path))
        fatal("%s: field 'train.metrics_file' = '%s' holds %lld bytes that are not bertpre metrics (its first line "
              "is not a JSON object with a \"step\"): an input (a shard, a tokenizer, a config) named by mistake? "
              "The run would move it aside and write in its place; choose another file, or move this one away",
              config_path, path, (long long)st.st_size);
}

// A resumed run appends: a last line cut off by a failed write (a full disk) is removed
// first, so that the next line starts on a line of its own.
static void drop_torn_line(const char *path) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        if (fd >= 0) close(fd);
        return;
    }
    off_t end = st.st_size, keep = -1;  // the length up to the last newline; -1: unknown
    char buf[4096];
    for (off_t at = end; at > 0 && keep < 0;) {
        size_t take = at < (off_t)sizeof buf ? (size_t)at : sizeof buf;
        at -= (off_t)take;
        if (pread(fd, buf, take, at) != (ssize_t)take) break;  // unread: nothing is cut
        for (size_t i = take; i-- > 0 && keep < 0;)
            if (buf[i] == '\n') keep = at + (off_t)i + 1;
        if (at == 0 && keep < 0) keep = 0;  // no newline at all: the whole file is one cut line
    }
    if (keep >= 0 && keep < end) {
        if (ftruncate(fd, keep) != 0)
            fatal("%s: removing the line cut off by an earlier failed write (bytes %lld-%lld) failed: %s", path,
                  (long long)keep, (long long)end, strerror(errno));
        printf("  metrics: %s ended in a line cut off by a failed write (%lld bytes, no newline): removed before "
               "appending\n", path, (long long)(end - keep));
    }
    close(fd);
}

void preflight_metrics_file(const train_config *t, int resuming) {
    const char *path = t->metrics_file;
    struct stat st;
    if (resuming && path[0]) drop_torn_line(path);
    if (resuming || !path[0] || stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return;
    char kept[1200];
    for (int n = 1;; n++) {
        snprintf(kept, sizeof kept, "%s.%d", path, n);
        if (access(kept, F_OK) != 0) break;
    }
    if (rename(path, kept) != 0)
        fatal("%s: the metrics file (train.metrics_file) of an earlier run could not be kept as %s: %s", path, kept,
              strerror(errno));
    printf("  metrics: %s held %lld bytes of an earlier run, kept as %s\n", path, (long long)st.st_size, kept);
}
