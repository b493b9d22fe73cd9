// Reading and writing the safetensors format (8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the raw data).
// Used for test fixtures now and for export/import and checkpoints.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

typedef struct {
    const char *name;
    char dtype[8];  // "F32", "F16", "BF16", "F64", "I32", "I64", "I8", "U8", ...
    int ndim;
    int64_t shape[8];
    size_t numel;
    const unsigned char *data;  // into the file's data section
} st_tensor;

typedef struct {
    char path[1024];
    unsigned char *bytes;
    json_t *header;
    st_tensor *tensors;
    int n_tensors;
} st_file;

// Reads and validates the whole file; exits with a message naming the file on error: a header
// that is not a JSON object or names a tensor twice, a tensor whose data_offsets do not fit
// its shape and dtype, and tensors that overlap, leave a gap or end before the file does (the
// format's reference implementation refuses the same layouts).
void st_open(st_file *f, const char *path);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
// Converts a floating-point tensor to FP32 / an integer tensor to int32 into dst[numel].
void st_read_float(const st_file *f, const st_tensor *t, float *dst);
void st_read_int(const st_file *f, const st_tensor *t, int *dst);

typedef struct {
    const char *name;
    const char *dtype;  // "F32" or "I32"
    int ndim;
    int64_t shape[4];
    const void *data;
} st_entry;

// Writes the file at `path`, which for an output of bertpre lies in a directory being
// written beside its final name (kernels/common/files.h: staged_dir_begin): that directory's
// commit fsyncs the file and moves it into place, so the file is not written twice here.
void st_write(const char *path, const st_entry *entries, int n, json_t *metadata);
// The same, returning -1 with errno set (and the partial file removed) instead of exiting.
int st_write_file(const char *path, const st_entry *entries, int n, json_t *metadata);
