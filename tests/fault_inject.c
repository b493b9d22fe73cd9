// A write-failure injector for the fault tests, loaded with LD_PRELOAD: it makes the file
// system under one directory look full without root or a real small disk.
//   BERTPRE_FAULT_DIR=PATH    files opened under PATH (by open, openat, creat, fopen) are watched
//   BERTPRE_FAULT_SPACE=N     N bytes may still be written to them (by write, pwrite, fwrite,
//                             fputs, fputc); a write past that writes what fits and fails with
//                             ENOSPC, as a full disk does
//   BERTPRE_FAULT_FREE=N      statvfs under PATH reports N bytes available
//   BERTPRE_FAULT_TRACE=FILE  appends a line to FILE for each step of writing a file under
//                             PATH, for the test of the write protocol (one absolute path
//                             per field): "create P" (opened to be written, created or
//                             truncated), "fsync P" (a file or a directory), "rename A B" and
//                             "link A B", each rename or link followed by "unsynced P" for
//                             every file at or under A written since its last fsync
// Everything else goes straight to the C library.
// Built without _FILE_OFFSET_BITS=64, so that open/open64, fopen/fopen64 and
// statvfs/statvfs64 are distinct symbols here, each wrapped.
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

enum { MAX_FD = 65536 };
static unsigned char watched[MAX_FD];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long long space = -1;  // -1: unlimited
static int space_read;

static void *real(const char *name) { return dlsym(RTLD_NEXT, name); }

// The trace: the absolute path of every watched descriptor, and the paths written since their
// last fsync (a few dozen files per test run: a list is enough).
enum { MAX_DIRTY = 4096 };
static char *fd_path[MAX_FD];
static char *dirty[MAX_DIRTY];
static int n_dirty;

static void absolute(const char *path, char *out, size_t size) {
    char cwd[4096];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(out, size, "%s", path);
    else snprintf(out, size, "%s/%s", cwd, path);
}

static void trace(const char *fmt, ...) {
    const char *file = getenv("BERTPRE_FAULT_TRACE");
    if (!file || !file[0]) return;
    char line[9000];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    int (*op)(const char *, int, ...) = real("open");
    int fd = op(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t (*w)(int, const void *, size_t) = real("write");
    if (w(fd, line, (size_t)n) != n) abort();  // a lost line would fail the test for the wrong reason
    int (*c)(int) = real("close");
    c(fd);
}

// Call with mu held.
static void mark_dirty(int fd) {
    if (fd < 0 || fd >= MAX_FD || !fd_path[fd]) return;
    for (int i = 0; i < n_dirty; i++)
        if (!strcmp(dirty[i], fd_path[fd])) return;
    if (n_dirty < MAX_DIRTY) dirty[n_dirty++] = strdup(fd_path[fd]);
}
static void mark_clean(const char *path) {
    for (int i = 0; i < n_dirty; i++)
        if (!strcmp(dirty[i], path)) free(dirty[i]), dirty[i--] = dirty[--n_dirty];
}
static int at_or_under(const char *path, const char *dir) {
    size_t n = strlen(dir);
    return !strncmp(path, dir, n) && (path[n] == 0 || path[n] == '/');
}

static int under_dir(const char *path) {
    const char *dir = getenv("BERTPRE_FAULT_DIR");
    if (!dir || !dir[0] || !path) return 0;
    size_t n = strlen(dir);
    if (path[0] != '/') {
        // Relative paths: compare against the absolute form.
        char cwd[4096], full[8192];
        if (!getcwd(cwd, sizeof cwd)) return 0;
        snprintf(full, sizeof full, "%s/%s", cwd, path);
        return strncmp(full, dir, n) == 0;
    }
    return strncmp(path, dir, n) == 0;
}

// A descriptor opened on `path`; `writing`: opened to be written, the file created or truncated.
static void track_open(int fd, const char *path, int writing) {
    if (fd < 0 || fd >= MAX_FD) return;
    watched[fd] = (unsigned char)under_dir(path);
    pthread_mutex_lock(&mu);
    free(fd_path[fd]);
    fd_path[fd] = NULL;
    if (watched[fd]) {
        char full[8192];
        absolute(path, full, sizeof full);
        fd_path[fd] = strdup(full);
        if (writing) trace("create %s", full);
    }
    pthread_mutex_unlock(&mu);
}
static void forget(int fd) {
    if (fd < 0 || fd >= MAX_FD) return;
    pthread_mutex_lock(&mu);
    watched[fd] = 0;
    free(fd_path[fd]);
    fd_path[fd] = NULL;
    pthread_mutex_unlock(&mu);
}

// How many of `want` bytes may be written to fd; sets *full when that is fewer.
static size_t allow(int fd, size_t want, int *full) {
    *full = 0;
    if (fd < 0 || fd >= MAX_FD || !watched[fd]) return want;
    pthread_mutex_lock(&mu);
    if (!space_read) {
        const char *s = getenv("BERTPRE_FAULT_SPACE");
        space = s ? atoll(s) : -1;
        space_read = 1;
    }
    size_t ok = want;
    mark_dirty(fd);
    if (space >= 0) {
        if ((long long)want > space) ok = (size_t)space, *full = 1;
        space -= (long long)ok;
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

// The mode argument of open-like calls, present only when a file may be created.
#define MODE_ARG(flags)                                   \
    ({                                                    \
        mode_t mode_ = 0;                                 \
        if ((flags) & (O_CREAT | O_TMPFILE)) {            \
            va_list ap_;                                  \
            va_start(ap_, flags);                         \
            mode_ = va_arg(ap_, mode_t);                  \
            va_end(ap_);                                  \
        }                                                 \
        mode_;                                            \
    })

static int tracked(int fd, const char *path, int flags) {
    track_open(fd, path, (flags & (O_CREAT | O_TRUNC)) && (flags & O_ACCMODE) != O_RDONLY);
    return fd;
}

int open(const char *path, int flags, ...) {
    int (*f)(const char *, int, ...) = real("open");
    return tracked(f(path, flags, MODE_ARG(flags)), path, flags);
}
int open64(const char *path, int flags, ...) {
    int (*f)(const char *, int, ...) = real("open64");
    return tracked(f(path, flags, MODE_ARG(flags)), path, flags);
}
int openat(int dirfd, const char *path, int flags, ...) {
    int (*f)(int, const char *, int, ...) = real("openat");
    return tracked(f(dirfd, path, flags, MODE_ARG(flags)), path, flags);
}
int creat(const char *path, mode_t mode) { return open(path, O_CREAT | O_WRONLY | O_TRUNC, mode); }

FILE *fopen(const char *path, const char *how) {
    FILE *(*f)(const char *, const char *) = real("fopen");
    FILE *fp = f(path, how);
    if (fp) track_open(fileno(fp), path, how[0] == 'w' || how[0] == 'a');
    return fp;
}
FILE *fopen64(const char *path, const char *how) {
    FILE *(*f)(const char *, const char *) = real("fopen64");
    FILE *fp = f(path, how);
    if (fp) track_open(fileno(fp), path, how[0] == 'w' || how[0] == 'a');
    return fp;
}
int close(int fd) {
    int (*f)(int) = real("close");
    forget(fd);
    return f(fd);
}
int fclose(FILE *fp) {
    int (*f)(FILE *) = real("fclose");
    forget(fileno(fp));
    return f(fp);
}

// fsync of a watched descriptor: its path is clean from here on.
static void synced(int fd) {
    if (fd < 0 || fd >= MAX_FD) return;
    pthread_mutex_lock(&mu);
    if (fd_path[fd]) {
        mark_clean(fd_path[fd]);
        trace("fsync %s", fd_path[fd]);
    }
    pthread_mutex_unlock(&mu);
}
int fsync(int fd) {
    int (*f)(int) = real("fsync");
    int r = f(fd);
    if (r == 0) synced(fd);
    return r;
}
int fdatasync(int fd) {
    int (*f)(int) = real("fdatasync");
    int r = f(fd);
    if (r == 0) synced(fd);
    return r;
}

// A rename or link under PATH, and the files it puts in place without an fsync since their
// last write. A rename moves the paths written under the old name to the new one.
static void moved(const char *how, const char *from, const char *to, int renamed) {
    if (!under_dir(from) && !under_dir(to)) return;
    char a[8192], b[8192];
    absolute(from, a, sizeof a);
    absolute(to, b, sizeof b);
    pthread_mutex_lock(&mu);
    trace("%s %s %s", how, a, b);
    for (int i = 0; i < n_dirty; i++) {
        if (!at_or_under(dirty[i], a)) continue;
        trace("unsynced %s", dirty[i]);
        if (renamed) {
            char moved_path[8192];
            snprintf(moved_path, sizeof moved_path, "%s%s", b, dirty[i] + strlen(a));
            free(dirty[i]);
            dirty[i] = strdup(moved_path);
        }
    }
    pthread_mutex_unlock(&mu);
}
int rename(const char *from, const char *to) {
    int (*f)(const char *, const char *) = real("rename");
    int r = f(from, to);
    if (r == 0) moved("rename", from, to, 1);
    return r;
}
int link(const char *from, const char *to) {
    int (*f)(const char *, const char *) = real("link");
    int r = f(from, to);
    if (r == 0) moved("link", from, to, 0);
    return r;
}
int fprintf(FILE *fp, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vfprintf(fp, fmt, ap);
    va_end(ap);
    if (n > 0) {
        pthread_mutex_lock(&mu);
        mark_dirty(fileno(fp));
        pthread_mutex_unlock(&mu);
    }
    return n;
}

// write-like calls: the bytes that fit go through; none left is ENOSPC.
#define LIMITED(call, fd, n)                         \
    do {                                             \
        int full_;                                   \
        size_t ok_ = allow(fd, n, &full_);           \
        if (full_ && ok_ == 0) return errno = ENOSPC, -1; \
        n = ok_;                                     \
        return call;                                 \
    } while (0)

ssize_t write(int fd, const void *buf, size_t n) {
    ssize_t (*f)(int, const void *, size_t) = real("write");
    LIMITED(f(fd, buf, n), fd, n);
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t at) {
    ssize_t (*f)(int, const void *, size_t, off_t) = real("pwrite");
    LIMITED(f(fd, buf, n, at), fd, n);
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t at) {
    ssize_t (*f)(int, const void *, size_t, off_t) = real("pwrite64");
    LIMITED(f(fd, buf, n, at), fd, n);
}

size_t fwrite(const void *buf, size_t size, size_t count, FILE *fp) {
    size_t (*f)(const void *, size_t, size_t, FILE *) = real("fwrite");
    if (size == 0 || count == 0) return f(buf, size, count, fp);
    int full;
    size_t ok = allow(fileno(fp), size * count, &full);
    size_t done = f(buf, 1, ok - ok % size, fp) / size;
    if (full) errno = ENOSPC;
    return done;
}
int fputs(const char *s, FILE *fp) {
    int (*f)(const char *, FILE *) = real("fputs");
    size_t n = strlen(s);
    int full;
    size_t ok = allow(fileno(fp), n, &full);
    if (!full) return f(s, fp);
    size_t (*w)(const void *, size_t, size_t, FILE *) = real("fwrite");
    w(s, 1, ok, fp);
    errno = ENOSPC;
    return EOF;
}
int fputc(int c, FILE *fp) {
    int (*f)(int, FILE *) = real("fputc");
    int full;
    if (allow(fileno(fp), 1, &full) == 0 && full) return errno = ENOSPC, EOF;
    return f(c, fp);
}

int statvfs(const char *path, struct statvfs *buf) {
    int (*f)(const char *, struct statvfs *) = real("statvfs");
    int r = f(path, buf);
    const char *free_bytes = getenv("BERTPRE_FAULT_FREE");
    if (r == 0 && free_bytes && under_dir(path) && buf->f_frsize)
        buf->f_bavail = buf->f_bfree = (fsblkcnt_t)(atoll(free_bytes) / (long long)buf->f_frsize);
    return r;
}
int statvfs64(const char *path, struct statvfs64 *buf) {
    int (*f)(const char *, struct statvfs64 *) = real("statvfs64");
    int r = f(path, buf);
    const char *free_bytes = getenv("BERTPRE_FAULT_FREE");
    if (r == 0 && free_bytes && under_dir(path) && buf->f_frsize)
        buf->f_bavail = buf->f_bfree = (fsblkcnt64_t)(atoll(free_bytes) / (long long)buf->f_frsize);
    return r;
}
