// Shared by the test drivers that take a batch from a safetensors file written by a Python
// test (tensors named as the HDF5 datasets, any integer dtype).
#pragma once
#include "data/batch.h"
#include "kernels/common/check.h"
#include "engine/safetensors.h"

static int *read_ints(const st_file *f, const char *name, int ndim, int *dims) {
    const st_tensor *t = st_find(f, name);
    if (!t) fatal("%s: missing tensor '%s'", f->path, name);
    if (t->ndim != ndim) fatal("%s: tensor '%s' has %d dimensions, expected %d", f->path, name, t->ndim, ndim);
    for (int d = 0; d < ndim; d++) dims[d] = (int)t->shape[d];
    int *out = xmalloc(t->numel * sizeof(int));
    st_read_int(f, t, out);
    return out;
}

// The six tensors of a batch; B, T and P from their shapes.
static void read_batch(const st_file *f, batch_t *batch) {
    int dims[2];
    batch->input_ids = read_ints(f, "input_ids", 2, dims);
    batch->B = dims[0], batch->T = dims[1];
    batch->input_mask = read_ints(f, "input_mask", 2, dims);
    batch->segment_ids = read_ints(f, "segment_ids", 2, dims);
    batch->masked_lm_positions = read_ints(f, "masked_lm_positions", 2, dims);
    batch->P = dims[1];
    batch->masked_lm_ids = read_ints(f, "masked_lm_ids", 2, dims);
    batch->next_sentence_labels = read_ints(f, "next_sentence_labels", 1, dims);
}
