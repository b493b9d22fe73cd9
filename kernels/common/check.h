// Error exits. Errors a user can meet (bad input, a file that cannot be read or written, no
// memory) go through fatal(), check_file() and check_alloc(): one line "bertpre: error: ..."
// naming the file, field or value, without source locations. CHECK() is for internal
// invariants only (a failure is a bug in bertpre): it adds the source file and line.
// fatal() flushes every stdio stream and ends the process with _exit: exit() would run the
// libraries' exit handlers (HDF5's among them) while another thread, such as the loader's
// prefetch thread, may still be inside that library, and crash after the message. What an
// error exit still owes is run through the hooks below: the command's cleanup before the
// message, the reports after it (the op profile), then the job's abort (NCCL communicators
// aborted and MPI_Abort, so that the other ranks end at once instead of at their timeout).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

// What a command takes back when it ends on an error, such as prep's unfinished shard files:
// the command sets fatal_cleanup, and every error exit (fatal, CHECK, the shard writer's)
// runs it once through fatal_cleanup_run before the process ends, whichever part of bertpre
// stopped it. Weak: one variable however many files include this header.
__attribute__((weak)) void (*fatal_cleanup)(void) = 0;
static inline void fatal_cleanup_run(void) {
    void (*f)(void) = __atomic_exchange_n(&fatal_cleanup, (void (*)(void))0, __ATOMIC_SEQ_CST);
    if (f) f();
}

// After the message: fatal_report (set by the op profiler: its report so far), then
// fatal_abort (set by engine/dist.c on a job of several ranks: the abort hooks, MPI_Abort).
// Each runs at most once, whichever thread fails first.
__attribute__((weak)) void (*fatal_report)(void) = 0;
__attribute__((weak)) void (*fatal_abort)(void) = 0;
static inline void fatal_after_message(void) {
    void (*f)(void) = __atomic_exchange_n(&fatal_report, (void (*)(void))0, __ATOMIC_SEQ_CST);
    if (f) f();
    f = __atomic_exchange_n(&fatal_abort, (void (*)(void))0, __ATOMIC_SEQ_CST);
    if (f) f();
}

// The message is written with one write(2), so that the lines of several processes (ranks)
// writing to one terminal never interleave.
#define fatal(...)                                                                            \
    do {                                                                                      \
        char fatal_text_[4096];                                                               \
        int fatal_len_ = snprintf(fatal_text_, sizeof fatal_text_, "bertpre: error: ");       \
        fatal_len_ += snprintf(fatal_text_ + fatal_len_, sizeof fatal_text_ - 1 - (size_t)fatal_len_, __VA_ARGS__); \
        if (fatal_len_ > (int)sizeof fatal_text_ - 2) fatal_len_ = (int)sizeof fatal_text_ - 2; \
        fatal_text_[fatal_len_++] = '\n';                                                     \
        fatal_cleanup_run();                                                                  \
        fflush(NULL);                                                                         \
        ssize_t fatal_written_ = write(STDERR_FILENO, fatal_text_, (size_t)fatal_len_);       \
        (void)fatal_written_;                                                                 \
        fatal_after_message();                                                                \
        _exit(1);                                                                             \
    } while (0)

// An internal invariant: on failure, the condition and the source location (a bug report).
#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "bertpre: internal error at %s:%d (%s): ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fprintf(stderr, "\n");                                                                \
            fatal_cleanup_run();                                                                  \
            fflush(NULL);                                                                         \
            fatal_after_message();                                                                \
            _exit(1);                                                                             \
        }                                                                                         \
    } while (0)

#define check_alloc(ptr, bytes)                                                                  \
    do {                                                                                         \
        if ((ptr) == NULL && (bytes) != 0)                                                       \
            fatal("out of host memory: allocating %.3g GB failed", (double)(size_t)(bytes) * 1e-9); \
    } while (0)

#define check_file(ok, path, what)                                         \
    do {                                                                   \
        if (!(ok)) fatal("%s '%s' failed: %s", what, path, strerror(errno)); \
    } while (0)

// Flushes and closes a file written through stdio: 0 when everything written reached the
// file, else an errno (the failed flush's or close's; EIO when only the stream's error flag
// says that an earlier write failed). A full disk shows here, not at fprintf.
static inline int close_written(FILE *f) {
    int err = 0;
    if (fflush(f) != 0) err = errno;
    else if (ferror(f)) err = EIO;
    if (fclose(f) != 0 && !err) err = errno;
    return err;
}

// Writes `text` and a newline to a log file and flushes it: 0, or the errno of the failure
// (a full disk), for the caller to report once its work is safe.
static inline int write_line(FILE *f, const char *text) {
    int err = fprintf(f, "%s\n", text) < 0 ? errno : 0;
    if (fflush(f) != 0 && !err) err = errno;
    return err;
}

// Seconds between the progress lines of a long stage (tokenizer training, an evaluation):
// BERTPRE_PROGRESS_EVERY (whole seconds, 0: every line), else 10; anything else is an error.
static inline int progress_every_s(void) {
    const char *every = getenv("BERTPRE_PROGRESS_EVERY");
    if (!every || !*every) return 10;
    char *end = NULL;
    errno = 0;
    long s = strtol(every, &end, 10);
    if (*end || errno || s < 0 || s > 1000000 || end == every)
        fatal("environment variable BERTPRE_PROGRESS_EVERY = '%s': expected whole seconds between progress lines "
              "(0 to 1000000; 0 prints every line)", every);
    return (int)s;
}

static inline void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    check_alloc(p, bytes);
    return p;
}

static inline void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    check_alloc(p, n * size);
    return p;
}
