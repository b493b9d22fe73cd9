#include "engine/safetensors.h"
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "kernels/common/check.h"

static size_t dtype_size(const char *dtype) {
    static const struct { const char *name; size_t size; } sizes[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
        {"I16", 2}, {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {NULL, 0}};
    for (int i = 0; sizes[i].name; i++)
        if (strcmp(sizes[i].name, dtype) == 0) return sizes[i].size;
    return 0;
}

static float half_to_float(uint16_t h) {
    int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
    float v;
    if (exponent == 0) v = ldexpf((float)mantissa, -24);
    else if (exponent == 31) v = mantissa ? NAN : INFINITY;
    else v = ldexpf((float)(mantissa | 1024), exponent - 25);
    return sign ? -v : v;
}

static size_t tensor_bytes(const st_tensor *t) { return t->numel * dtype_size(t->dtype); }

static int compare_ranges(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->data != y->data) return x->data < y->data ? -1 : 1;
    return (tensor_bytes(x) > tensor_bytes(y)) - (tensor_bytes(x) < tensor_bytes(y));
}

// The format's layout rule, as its reference implementation checks it: the tensors' byte
// ranges, in offset order, tile the data section (data[0, size)) from its first byte to its
// last, with no overlap (two tensors reading the same bytes) and no gap (bytes of no tensor).
static void check_layout(const st_file *f, const unsigned char *data, size_t size) {
    const st_tensor **order = xcalloc((size_t)f->n_tensors, sizeof *order);
    for (int i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, compare_ranges);
    size_t at = 0;  // where the ranges so far end
    for (int i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = order[i];
        size_t begin = (size_t)(t->data - data), end = begin + tensor_bytes(t);
        if (begin < at)
            fatal("%s: tensor '%s': data_offsets [%zu, %zu] overlap those of tensor '%s' (which end at %zu): two "
                  "tensors would read the same bytes; the file is damaged or wrongly written",
                  f->path, t->name, begin, end, order[i - 1]->name, at);
        if (begin > at)
            fatal("%s: tensor '%s': data_offsets [%zu, %zu] leave bytes [%zu, %zu) of the data section to no tensor "
                  "(the tensors must cover it without gaps); the file is damaged or wrongly written",
                  f->path, t->name, begin, end, at, begin);
        at = end;
    }
    if (at != size)
        fatal("%s: the tensors cover %zu of the %zu bytes of the data section (the format has no bytes after the "
              "last tensor); the file is damaged or wrongly written", f->path, at, size);
    free(order);
}

void st_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    FILE *fp = fopen(path, "rb");
    check_file(fp, path, "opening");
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    if (size < 8) fatal("%s: not a safetensors file (only %ld bytes)", path, size);
    f->bytes = xmalloc((size_t)size);
    if (fread(f->bytes, 1, (size_t)size, fp) != (size_t)size) fatal("%s: short read", path);
    fclose(fp);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--) header_len = header_len << 8 | f->bytes[i];
    if (header_len > (uint64_t)size - 8) fatal("%s: header length %llu exceeds the file size %ld", path,
                                               (unsigned long long)header_len, size);
    json_error_t err;
    // A key given twice names two tensors, one of which would be dropped silently.
    f->header = json_loadb((const char *)f->bytes + 8, header_len, JSON_REJECT_DUPLICATES, &err);
    if (!f->header) {
        // jansson stops just after the key given twice: name it.
        const char *text = (const char *)f->bytes + 8;
        int end = err.position, start = end - 1;
        while (start > 0 && !(text[start - 1] == '"' && (start < 2 || text[start - 2] != '\\'))) start--;
        if (strstr(err.text, "duplicate") && end >= 2 && end <= (int)header_len && text[end - 1] == '"' && start > 0)
            fatal("%s: invalid header JSON: tensor '%.*s' is named twice (a duplicate key; one of the two would "
                  "be dropped)", path, end - 1 - start, text + start);
        fatal("%s: invalid header JSON: %s (byte %d of the header)", path, err.text, err.position);
    }
    if (!json_is_object(f->header)) fatal("%s: invalid header JSON: not an object", path);
    const unsigned char *data = f->bytes + 8 + header_len;
    size_t data_size = (size_t)size - 8 - header_len;
    f->tensors = xcalloc(json_object_size(f->header), sizeof(st_tensor));
    const char *key;
    json_t *value;
    json_object_foreach(f->header, key, value) {
        if (strcmp(key, "__metadata__") == 0) continue;
        st_tensor *t = &f->tensors[f->n_tensors++];
        t->name = key;
        json_t *dtype = json_object_get(value, "dtype"), *shape = json_object_get(value, "shape");
        json_t *offsets = json_object_get(value, "data_offsets");
        if (!json_is_string(dtype) || !dtype_size(json_string_value(dtype)))
            fatal("%s: tensor '%s': missing or unsupported dtype", path, key);
        snprintf(t->dtype, sizeof t->dtype, "%s", json_string_value(dtype));
        if (!json_is_array(shape) || json_array_size(shape) > 8)
            fatal("%s: tensor '%s': invalid shape", path, key);
        t->ndim = (int)json_array_size(shape);
        t->numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            json_int_t s = json_integer_value(json_array_get(shape, d));
            if (!json_is_integer(json_array_get(shape, d)) || s < 0)
                fatal("%s: tensor '%s': invalid shape", path, key);
            t->shape[d] = s;
            t->numel *= (size_t)s;
        }
        if (!json_is_array(offsets) || json_array_size(offsets) != 2)
            fatal("%s: tensor '%s': invalid data_offsets", path, key);
        json_int_t begin = json_integer_value(json_array_get(offsets, 0));
        json_int_t end = json_integer_value(json_array_get(offsets, 1));
        if (begin < 0 || end < begin || (size_t)end > data_size ||
            (size_t)(end - begin) != t->numel * dtype_size(t->dtype))
            fatal("%s: tensor '%s': data_offsets [%lld, %lld] do not match its shape and dtype %s "
                  "(data section %zu bytes)",
                  path, key, (long long)begin, (long long)end, t->dtype, data_size);
        t->data = data + begin;
    }
    check_layout(f, data, data_size);
}

void st_close(st_file *f) {
    json_decref(f->header);
    free(f->bytes);
    free(f->tensors);
    memset(f, 0, sizeof *f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

void st_read_float(const st_file *f, const st_tensor *t, float *dst) {
    for (size_t i = 0; i < t->numel; i++) {
        const unsigned char *p = t->data + i * dtype_size(t->dtype);
        if (strcmp(t->dtype, "F32") == 0) {
            memcpy(&dst[i], p, 4);
        } else if (strcmp(t->dtype, "F64") == 0) {
            double v;
            memcpy(&v, p, 8);
            dst[i] = (float)v;
        } else if (strcmp(t->dtype, "F16") == 0) {
            dst[i] = half_to_float((uint16_t)(p[0] | p[1] << 8));
        } else if (strcmp(t->dtype, "BF16") == 0) {
            uint32_t bits = (uint32_t)(p[0] | p[1] << 8) << 16;
            memcpy(&dst[i], &bits, 4);
        } else {
            fatal("%s: tensor '%s' has dtype %s, expected a floating-point type", f->path, t->name, t->dtype);
        }
    }
}

void st_read_int(const st_file *f, const st_tensor *t, int *dst) {
    for (size_t i = 0; i < t->numel; i++) {
        const unsigned char *p = t->data + i * dtype_size(t->dtype);
        if (strcmp(t->dtype, "I32") == 0) memcpy(&dst[i], p, 4);
        else if (strcmp(t->dtype, "I64") == 0) { int64_t v; memcpy(&v, p, 8); dst[i] = (int)v; }
        else if (strcmp(t->dtype, "I16") == 0) { int16_t v; memcpy(&v, p, 2); dst[i] = v; }
        else if (strcmp(t->dtype, "I8") == 0) dst[i] = (int8_t)p[0];
        else if (strcmp(t->dtype, "U8") == 0 || strcmp(t->dtype, "BOOL") == 0) dst[i] = p[0];
        else fatal("%s: tensor '%s' has dtype %s, expected an integer type", f->path, t->name, t->dtype);
    }
}

void st_write(const char *path, const st_entry *entries, int n, json_t *metadata) {
    check_file(st_write_file(path, entries, n, metadata) == 0, path, "writing");
}

int st_write_file(const char *path, const st_entry *entries, int n, json_t *metadata) {
    json_t *header = json_object();
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        const st_entry *e = &entries[i];
        size_t numel = 1;
        json_t *shape = json_array();
        for (int d = 0; d < e->ndim; d++) {
            numel *= (size_t)e->shape[d];
            json_array_append_new(shape, json_integer(e->shape[d]));
        }
        size_t bytes = numel * dtype_size(e->dtype);
        json_object_set_new(header, e->name, json_pack("{s:s, s:o, s:[I,I]}", "dtype", e->dtype, "shape", shape,
                                                       "data_offsets", (json_int_t)offset,
                                                       (json_int_t)(offset + bytes)));
        offset += bytes;
    }
    if (metadata) json_object_set(header, "__metadata__", metadata);
    char *text = json_dumps(header, JSON_COMPACT);
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;

    FILE *fp = fopen(path, "wb");
    if (!fp) {
        free(text);
        json_decref(header);
        return -1;
    }
    unsigned char len_bytes[8];
    for (int i = 0; i < 8; i++) len_bytes[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = fwrite(len_bytes, 1, 8, fp) == 8 && fwrite(text, 1, len, fp) == len;
    for (size_t i = len; i < padded && ok; i++) ok = fputc(' ', fp) != EOF;
    for (int i = 0; i < n && ok; i++) {
        size_t numel = 1;
        for (int d = 0; d < entries[i].ndim; d++) numel *= (size_t)entries[i].shape[d];
        size_t bytes = numel * dtype_size(entries[i].dtype);
        ok = fwrite(entries[i].data, 1, bytes, fp) == bytes;
    }
    int err = ok ? 0 : errno ? errno : EIO;  // the failed write's (a full disk: ENOSPC)
    int closed = close_written(fp);
    if (!err) err = closed;
    if (err) {
        unlink(path);
        errno = err;
        ok = 0;
    }
    free(text);
    json_decref(header);
    return ok ? 0 : -1;
}
