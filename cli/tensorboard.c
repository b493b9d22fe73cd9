// TensorBoard event files (cli/tensorboard.h).
#include "cli/tensorboard.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include "kernels/common/check.h"
#include "kernels/common/files.h"

struct tb_writer {
    FILE *f;
    char path[1400];
};

uint32_t tb_crc32c(const void *data, size_t n) {
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;  // the reflected polynomial
            table[i] = c;
        }
    uint32_t crc = 0xFFFFFFFFu;
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

uint32_t tb_masked_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

// A growing protocol-buffer encoding.
typedef struct {
    unsigned char *b;
    size_t n, cap;
} pb;

static void pb_bytes(pb *p, const void *data, size_t n) {
    if (p->n + n > p->cap) {
        p->cap = (p->n + n) * 2 + 64;
        p->b = realloc(p->b, p->cap);
        check_alloc(p->b, p->cap);
    }
    memcpy(p->b + p->n, data, n);
    p->n += n;
}

static void pb_varint(pb *p, uint64_t v) {
    unsigned char out[10];
    int k = 0;
    do {
        out[k++] = (unsigned char)((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_bytes(p, out, (size_t)k);
}

static void pb_le(pb *p, uint64_t v, int bytes) {
    unsigned char out[8];
    for (int i = 0; i < bytes; i++) out[i] = (unsigned char)(v >> (8 * i));
    pb_bytes(p, out, (size_t)bytes);
}

// Field `field` of wire type 2 (length-delimited): a string or an embedded message.
static void pb_field_bytes(pb *p, int field, const void *data, size_t n) {
    pb_varint(p, (uint64_t)field << 3 | 2);
    pb_varint(p, n);
    pb_bytes(p, data, n);
}

// One TFRecord around the encoded event; flushed.
static int write_record(tb_writer *w, const pb *event) {
    pb r = {0};
    pb_le(&r, event->n, 8);
    pb_le(&r, tb_masked_crc(tb_crc32c(r.b, 8)), 4);
    pb_bytes(&r, event->b, event->n);
    pb_le(&r, tb_masked_crc(tb_crc32c(event->b, event->n)), 4);
    int err = fwrite(r.b, 1, r.n, w->f) == r.n ? 0 : errno ? errno : EIO;
    if (fflush(w->f) != 0 && !err) err = errno;
    free(r.b);
    return err;
}

// Event fields: wall_time (1, double), step (2, int64), file_version (3), summary (5).
static void event_head(pb *e, long step) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    double now = (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
    uint64_t bits;
    memcpy(&bits, &now, 8);
    pb_varint(e, 1 << 3 | 1);
    pb_le(e, bits, 8);
    pb_varint(e, 2 << 3 | 0);
    pb_varint(e, (uint64_t)step);
}

void tb_check(const char *dir) {
    char at[1100];
    snprintf(at, sizeof at, "%s", dir);
    struct stat st;
    while (stat(at, &st) != 0) {  // up to the nearest existing path
        char *slash = strrchr(at, '/');
        if (!slash) {
            snprintf(at, sizeof at, ".");
            continue;
        }
        if (slash == at) slash[1] = 0;
        else *slash = 0;
    }
    if (!S_ISDIR(st.st_mode)) fatal("train.tensorboard_dir '%s': '%s' is not a directory", dir, at);
    if (access(at, W_OK) != 0) fatal("train.tensorboard_dir '%s': '%s' is not writable", dir, at);
}

tb_writer *tb_open(const char *dir) {
    char failed[1100];
    int made = make_dirs_noted(dir, NULL, 0, NULL, failed, sizeof failed);  // DIR and its parents
    if (made) fatal("train.tensorboard_dir '%s': creating '%s' failed: %s", dir, failed, strerror(made));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        fatal("train.tensorboard_dir '%s': not a directory", dir);
    tb_writer *w = xcalloc(1, sizeof *w);
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    // A new file, never one that is there (another file of that name, a link, a FIFO): the name
    // with .1, .2, ... added where it is taken.
    for (int k = 0; k < 100; k++) {
        int n = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%ld.%s.%ld", dir, (long)tv.tv_sec, host,
                         (long)getpid());
        if (k) snprintf(w->path + n, sizeof w->path - (size_t)n, ".%d", k);
        w->f = fopen(w->path, "wbx");
        if (w->f || errno != EEXIST) break;
    }
    check_file(w->f, w->path, "creating the TensorBoard event file (train.tensorboard_dir)");
    pb e = {0};
    event_head(&e, 0);
    static const char version[] = "brain.Event:2";
    pb_field_bytes(&e, 3, version, sizeof version - 1);
    int err = write_record(w, &e);
    free(e.b);
    if (err) {
        errno = err;
        check_file(0, w->path, "writing the TensorBoard event file (train.tensorboard_dir)");
    }
    return w;
}

int tb_write_line(tb_writer *w, const json_t *line) {
    const char *prefix = json_is_true(json_object_get(line, "eval")) ? "eval/" : "train/";
    long step = (long)json_integer_value(json_object_get(line, "step"));
    pb summary = {0};
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)line, key, value) {
        if (!json_is_number(value) || !strcmp(key, "step")) continue;
        char tag[160];
        snprintf(tag, sizeof tag, "%s%s", prefix, key);
        float v = (float)json_number_value(value);
        uint32_t bits;
        memcpy(&bits, &v, 4);
        pb one = {0};  // Summary.Value: tag (1), simple_value (2, float)
        pb_field_bytes(&one, 1, tag, strlen(tag));
        pb_varint(&one, 2 << 3 | 5);
        pb_le(&one, bits, 4);
        pb_field_bytes(&summary, 1, one.b, one.n);  // Summary.value (1, repeated)
        free(one.b);
    }
    pb e = {0};
    event_head(&e, step);
    pb_field_bytes(&e, 5, summary.b, summary.n);
    int err = write_record(w, &e);
    free(e.b);
    free(summary.b);
    return err;
}

int tb_close(tb_writer *w) {
    if (!w) return 0;
    int err = close_written(w->f);
    free(w);
    return err;
}

const char *tb_path(const tb_writer *w) { return w->path; }
