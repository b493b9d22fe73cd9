// Early checks of `bertpre train` (see preflight.h): the checkpoint directory's ownership,
// a probe write, stale temporary directories, the free space for one checkpoint, and the
// metrics file of an earlier run.
#include "engine/preflight.h"
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "engine/checkpoint.h"
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

void preflight_lock_checkpoint_dir(const train_config *t, const char *config_path, int dry_run) {
    const char *dir = t->checkpoint_dir;
    if (!dir[0]) return;
    if (!checkpoint_dir_ready(dir, config_path, !dry_run)) return;  // a dry run creates nothing
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, PREFLIGHT_LOCK_FILE);
    // Never closed: the lock lasts as long as the process (and ends with it, however it ends).
    int fd = open(path, O_RDWR | O_CLOEXEC | (dry_run ? 0 : O_CREAT), 0644);
    if (fd < 0 && dry_run && errno == ENOENT) return;  // no lock file: no run holds the directory
    if (fd < 0)
        fatal("%s: field 'train.checkpoint_dir' = '%s': cannot open the lock file %s: %s", config_path, dir, path,
              strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) {
            fprintf(stderr,
                    "bertpre: warning: train.checkpoint_dir '%s': cannot lock %s (flock: %s): this file system does "
                    "not support locks, so nothing stops a second run on the same directory from removing this "
                    "run's checkpoints (docs/CHECKPOINTS.md)\n",
                    dir, path, strerror(errno));
            close(fd);
            return;
        }
        char holder[512] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        fatal("%s: field 'train.checkpoint_dir' = '%s' is in use by another run (%s, holding %s): two runs in one "
              "directory remove each other's checkpoints. Wait for that run to end, stop it, or choose another "
              "directory",
              config_path, dir, holder[0] ? holder : "its host and pid not written", path);
    }
    if (dry_run) {  // the lock was free: let it go at once, writing nothing
        close(fd);
        return;
    }
    char host[256] = "unknown", when[64] = "", text[600];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    int len = snprintf(text, sizeof text, "host %s, pid %d, started %s\n", host, (int)getpid(), when);
    // Who holds it, for the message of a second run. The lock holds without it: a full disk
    // here is reported by the probe write that follows (preflight_checkpoint_dir).
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) return;
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

void preflight_metrics_file(const train_config *t, int resuming) {
    const char *path = t->metrics_file;
    struct stat st;
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
