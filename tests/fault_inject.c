// A write-failure injector for the fault tests, loaded with LD_PRELOAD: it makes the file
// system under one directory look full without root or a real small disk.
//   BERTPRE_FAULT_DIR=PATH    files opened under PATH (by open, openat, creat, fopen) are watched
//   BERTPRE_FAULT_SPACE=N     N bytes may still be written to them (by write, pwrite, fwrite,
//                             fputs, fputc); a write past that writes what fits and fails with
//                             ENOSPC, as a full disk does
//   BERTPRE_FAULT_FREE=N      statvfs under PATH reports N bytes available
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

static void track(int fd, const char *path) {
    if (fd >= 0 && fd < MAX_FD) watched[fd] = (unsigned char)under_dir(path);
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

static int tracked(int fd, const char *path) {
    track(fd, path);
    return fd;
}

int open(const char *path, int flags, ...) {
    int (*f)(const char *, int, ...) = real("open");
    return tracked(f(path, flags, MODE_ARG(flags)), path);
}
int open64(const char *path, int flags, ...) {
    int (*f)(const char *, int, ...) = real("open64");
    return tracked(f(path, flags, MODE_ARG(flags)), path);
}
int openat(int dirfd, const char *path, int flags, ...) {
    int (*f)(int, const char *, int, ...) = real("openat");
    return tracked(f(dirfd, path, flags, MODE_ARG(flags)), path);
}
int creat(const char *path, mode_t mode) { return open(path, O_CREAT | O_WRONLY | O_TRUNC, mode); }

FILE *fopen(const char *path, const char *how) {
    FILE *(*f)(const char *, const char *) = real("fopen");
    FILE *fp = f(path, how);
    if (fp) track(fileno(fp), path);
    return fp;
}
FILE *fopen64(const char *path, const char *how) {
    FILE *(*f)(const char *, const char *) = real("fopen64");
    FILE *fp = f(path, how);
    if (fp) track(fileno(fp), path);
    return fp;
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
