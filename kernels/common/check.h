// Check macros: every call that can fail goes through one of these. On failure they print
// file, line, the failing expression and a hint, then exit non-zero.
// fatal() flushes every stdio stream and ends the process with _exit: exit() would run the
// libraries' exit handlers (HDF5's among them) while another thread, such as the loader's
// prefetch thread, may still be inside that library, and crash after the message.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#define fatal(...)                                                           \
    do {                                                                     \
        fprintf(stderr, "bertpre: error: ");                                 \
        fprintf(stderr, __VA_ARGS__);                                        \
        fprintf(stderr, "\n");                                               \
        fflush(NULL);                                                        \
        _exit(1);                                                            \
    } while (0)

#define check_alloc(ptr, bytes)                                                      \
    do {                                                                             \
        if ((ptr) == NULL && (bytes) != 0)                                           \
            fatal("%s:%d: out of host memory allocating %zu bytes for %s", __FILE__, \
                  __LINE__, (size_t)(bytes), #ptr);                                  \
    } while (0)

#define check_file(ok, path, what)                                                   \
    do {                                                                             \
        if (!(ok))                                                                   \
            fatal("%s:%d: %s '%s' failed: %s", __FILE__, __LINE__, what, path,      \
                  strerror(errno));                                                  \
    } while (0)

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
