// HDF5 shard writer and reader (see shard.h). Writing stores whole chunks that were
// converted and gzip-compressed (by libdeflate where built in, else zlib) outside the HDF5
// lock; reading converts any integer dtype to int and checks every value, naming the file,
// dataset and row of the first bad one.
#include "data/shard.h"
#include <hdf5.h>
#if BERTPRE_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <zlib.h>
#include "kernels/common/check.h"
#include "data/synthetic.h"

const char *const shard_dataset_names[SHARD_DATASETS] = {
    "input_ids",     "input_mask",           "segment_ids",     "masked_lm_positions",
    "masked_lm_ids", "next_sentence_labels", "document_starts",
};

static pthread_mutex_t h5_mutex = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int h5_quiet_here;

// Every HDF5 call happens between h5_lock and h5_unlock; HDF5's own error printing is off
// because each failure is reported by the caller with the file, dataset and rows. A
// thread-safe HDF5 keeps an error stack, and its automatic printing, per thread: it is
// turned off in every thread that calls HDF5 (the loader's prefetch thread, prep's writers).
static void h5_lock(void) {
    pthread_mutex_lock(&h5_mutex);
    if (!h5_quiet_here) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        h5_quiet_here = 1;
    }
}
static void h5_unlock(void) { pthread_mutex_unlock(&h5_mutex); }

// The innermost message of HDF5's error stack, to say why a call failed. A failed system
// call is said by its errno ("No space left on device (ENOSPC)"), not by HDF5's dump of
// the call (several lines: time, file descriptor, buffer address, sizes).
static herr_t h5_error_walk(unsigned n, const H5E_error2_t *err, void *data) {
    char *out = data;
    if (n != 0) return 0;
    const char *desc = err->desc ? err->desc : "unknown HDF5 error", *at = strstr(desc, "errno = ");
    int code;
    if (at && sscanf(at, "errno = %d", &code) == 1 && code > 0) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
        const char *name = strerrorname_np(code);
#else
        const char *name = NULL;
#endif
        if (name) snprintf(out, 256, "%s (%s)", strerror(code), name);
        else snprintf(out, 256, "%s (errno %d)", strerror(code), code);
    } else {
        snprintf(out, 256, "%.*s", (int)strcspn(desc, "\n"), desc);
    }
    return 0;
}
static const char *h5_reason(char *buf) {
    snprintf(buf, 256, "unknown HDF5 error");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_error_walk, buf);  // innermost first
    return buf;
}

#define h5_check(call, ...)                                                \
    do {                                                                   \
        if ((call) < 0) {                                                  \
            char what_[1024], reason_[256];                                \
            snprintf(what_, sizeof what_, __VA_ARGS__);                    \
            fatal("%s (HDF5: %s)", what_, h5_reason(reason_));             \
        }                                                                  \
    } while (0)

static int dataset_rank(int d) { return d == SHARD_NEXT_SENTENCE_LABELS ? 1 : 2; }
// The columns of dataset d in a file of S, P and D (document_starts' columns, 0 when absent).
static int dataset_width(int d, int S, int P, int D) {
    return d <= SHARD_SEGMENT_IDS ? S : d == SHARD_NEXT_SENTENCE_LABELS ? 1 : d == SHARD_DOCUMENT_STARTS ? D : P;
}
// The columns of dataset d's rows in a batch of S and P: document_starts has S there, however
// few the file stores (the rest zeros).
static int batch_width(int d, int S, int P) { return dataset_width(d, S, P, S); }
// The datasets a file of D document_starts columns holds: the required ones, and
// document_starts when D > 0.
static int dataset_count(int D) { return D > 0 ? SHARD_DATASETS : SHARD_REQUIRED_DATASETS; }
static const int *dataset_column(const batch_t *b, int d) {
    const int *cols[SHARD_DATASETS] = {b->input_ids,           b->input_mask,    b->segment_ids,
                                       b->masked_lm_positions, b->masked_lm_ids, b->next_sentence_labels,
                                       b->document_starts};
    return cols[d];
}

struct shard_writer {
    char *path;
    shard_writer *next_open;  // the process's writers not yet closed (open_writers)
    hid_t file, dset[SHARD_DATASETS];
    int S, P, D, gzip_level;  // D: document_starts' columns, 0 = not written
    long rows;        // rows appended
    batch_t block;    // the chunk being filled: SHARD_CHUNK_ROWS rows
    int block_rows;
    unsigned char *typed, *packed;  // one dataset's chunk as stored, and compressed
    size_t typed_cap, packed_cap;
#if BERTPRE_HAVE_LIBDEFLATE
    struct libdeflate_compressor *deflater;  // NULL: zlib's compress2
#endif
};

// Writers not yet closed, under h5_mutex: their files are incomplete until closed, so a
// failed write removes them all before the process ends.
static shard_writer *open_writers;

// Ends the process after a failed HDF5 call of writer w (called under h5_lock): one line
// naming the file and the reason, the files of the process's open writers removed, and the
// caller's fatal_cleanup run (prep's removes its closed shards not yet renamed).
#define writer_check(w, call, ...)                                                                 \
    do {                                                                                         \
        if ((call) < 0) {                                                                        \
            char what_[1024], reason_[256];                                                      \
            snprintf(what_, sizeof what_, __VA_ARGS__);                                          \
            h5_reason(reason_);                                                                  \
            for (shard_writer *o_ = open_writers; o_; o_ = o_->next_open) unlink(o_->path);      \
            fatal("%s: %s; every unfinished shard file was removed", what_, reason_);            \
        }                                                                                        \
    } while (0)
// Whether the shards' deflate goes through zlib although libdeflate is built in
// (BERTPRE_DEFLATE=zlib): both write the zlib-format streams of HDF5's deflate filter.
static int deflate_with_zlib(void) {
    const char *e = getenv("BERTPRE_DEFLATE");
    if (!e || !*e || !strcmp(e, "libdeflate")) return !BERTPRE_HAVE_LIBDEFLATE;
    if (!strcmp(e, "zlib")) return 1;
    fatal("BERTPRE_DEFLATE='%s': expected 'zlib' or 'libdeflate'", e);
}

// Compresses `bytes` of w->typed into w->packed as one zlib stream (RFC 1950, what HDF5's
// deflate filter stores and inflates); returns its size, or 0 on failure.
static size_t deflate_chunk(shard_writer *w, size_t bytes) {
#if BERTPRE_HAVE_LIBDEFLATE
    if (w->deflater) return libdeflate_zlib_compress(w->deflater, w->typed, bytes, w->packed, w->packed_cap);
#endif
    uLongf packed = (uLongf)w->packed_cap;
    return compress2(w->packed, &packed, w->typed, (uLong)bytes, w->gzip_level) == Z_OK ? (size_t)packed : 0;
}

static int dataset_is_byte(int d) {
    return d == SHARD_INPUT_MASK || d == SHARD_SEGMENT_IDS || d == SHARD_NEXT_SENTENCE_LABELS;
}

shard_writer *shard_writer_create(const char *path, int S, int P, int D, int gzip_level) {
    if (D < 0 || D > S) fatal("%s: document_starts of %d columns in a shard of S=%d (0..S)", path, D, S);
    shard_writer *w = xcalloc(1, sizeof *w);
    w->path = strdup(path);
    w->S = S;
    w->P = P;
    w->D = D;
    w->gzip_level = gzip_level;
    batch_alloc(&w->block, SHARD_CHUNK_ROWS, S, P);
    w->typed_cap = (size_t)SHARD_CHUNK_ROWS * (S > P ? S : P) * sizeof(int32_t);
    w->packed_cap = compressBound((uLong)w->typed_cap);
#if BERTPRE_HAVE_LIBDEFLATE
    if (gzip_level > 0 && !deflate_with_zlib()) {
        w->deflater = libdeflate_alloc_compressor(gzip_level);
        if (!w->deflater) fatal("%s: cannot set up libdeflate at level %d", path, gzip_level);
        size_t bound = libdeflate_zlib_compress_bound(w->deflater, w->typed_cap);
        if (bound > w->packed_cap) w->packed_cap = bound;
    }
#else
    (void)deflate_with_zlib();  // still refuses a misspelt BERTPRE_DEFLATE
#endif
    w->typed = xmalloc(w->typed_cap);
    w->packed = xmalloc(w->packed_cap);
    h5_lock();
    w->next_open = open_writers;
    open_writers = w;
    w->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    writer_check(w, w->file, "%s: cannot create the HDF5 file", path);
    for (int d = 0; d < dataset_count(D); d++) {
        int r = dataset_rank(d);
        hsize_t dims[2] = {0, (hsize_t)dataset_width(d, S, P, D)};
        hsize_t maxdims[2] = {H5S_UNLIMITED, dims[1]};
        hsize_t chunk[2] = {SHARD_CHUNK_ROWS, dims[1]};
        hid_t space = H5Screate_simple(r, dims, maxdims);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        writer_check(w, H5Pset_chunk(dcpl, r, chunk), "%s: chunking '%s'", path, shard_dataset_names[d]);
        if (gzip_level > 0) writer_check(w, H5Pset_deflate(dcpl, (unsigned)gzip_level), "%s: gzip for '%s'", path,
                                         shard_dataset_names[d]);
        hid_t type = dataset_is_byte(d) ? H5T_STD_I8LE : H5T_STD_I32LE;
        w->dset[d] = H5Dcreate2(w->file, shard_dataset_names[d], type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        writer_check(w, w->dset[d], "%s: cannot create dataset '%s'", path, shard_dataset_names[d]);
        H5Pclose(dcpl);
        H5Sclose(space);
    }
    h5_unlock();
    return w;
}

// Writes the filled block as one chunk per dataset. The conversion to the stored types and
// the gzip compression (the costly part) run outside the HDF5 lock, so writers of
// different shards compress in parallel; HDF5 only stores the finished bytes
// (H5Dwrite_chunk). The block is zero-padded to a whole chunk, as HDF5 stores edge chunks.
static void flush_block(shard_writer *w) {
    int n = w->block_rows;
    if (n == 0) return;
    long first = w->rows - n;
    for (int d = 0; d < dataset_count(w->D); d++) {
        // The block's rows hold `stride` columns, of which the file stores the first `width`
        // (document_starts: D of S).
        int width = dataset_width(d, w->S, w->P, w->D), stride = batch_width(d, w->S, w->P);
        size_t count = (size_t)n * width, total = (size_t)SHARD_CHUNK_ROWS * width;
        const int *src = dataset_column(&w->block, d);
        size_t bytes;
#define STORED(i) ((i) >= count ? 0 : stride == width ? src[i] : src[(i) / width * stride + (i) % width])
        if (dataset_is_byte(d)) {
            int8_t *dst = (int8_t *)w->typed;
            for (size_t i = 0; i < total; i++) dst[i] = (int8_t)STORED(i);
            bytes = total;
        } else {
            int32_t *dst = (int32_t *)w->typed;  // little-endian host, as the dataset type
            for (size_t i = 0; i < total; i++) dst[i] = STORED(i);
            bytes = total * sizeof(int32_t);
        }
#undef STORED
        const unsigned char *out = w->typed;
        if (w->gzip_level > 0) {
            bytes = deflate_chunk(w, bytes);
            if (bytes == 0)
                fatal("%s: gzip of rows %ld..%ld of '%s' failed", w->path, first, w->rows - 1, shard_dataset_names[d]);
            out = w->packed;
        }
        hsize_t extent[2] = {(hsize_t)w->rows, (hsize_t)width}, offset[2] = {(hsize_t)first, 0};
        h5_lock();
        writer_check(w, H5Dset_extent(w->dset[d], extent), "%s: growing '%s'", w->path, shard_dataset_names[d]);
        writer_check(w, H5Dwrite_chunk(w->dset[d], H5P_DEFAULT, 0, offset, bytes, out),
                     "%s: writing rows %ld..%ld of '%s'", w->path, first, w->rows - 1, shard_dataset_names[d]);
        h5_unlock();
    }
    w->block_rows = 0;
}

void shard_writer_append(shard_writer *w, const batch_t *rows, int row) {
    if (rows->T != w->S || rows->P != w->P)
        fatal("%s: appending a row of shape S=%d P=%d to a shard of S=%d P=%d", w->path, rows->T, rows->P, w->S,
              w->P);
    int k = w->block_rows++, S = w->S, P = w->P;
    batch_t *b = &w->block;
    memcpy(b->input_ids + (size_t)k * S, rows->input_ids + (size_t)row * S, sizeof(int) * S);
    memcpy(b->input_mask + (size_t)k * S, rows->input_mask + (size_t)row * S, sizeof(int) * S);
    memcpy(b->segment_ids + (size_t)k * S, rows->segment_ids + (size_t)row * S, sizeof(int) * S);
    memcpy(b->masked_lm_positions + (size_t)k * P, rows->masked_lm_positions + (size_t)row * P, sizeof(int) * P);
    memcpy(b->masked_lm_ids + (size_t)k * P, rows->masked_lm_ids + (size_t)row * P, sizeof(int) * P);
    b->next_sentence_labels[k] = rows->next_sentence_labels[row];
    const int *starts = rows->document_starts + (size_t)row * S;
    for (int j = w->D; j < S; j++)
        if (starts[j] != 0)
            fatal("%s: row %ld: document start %d at column %d, beyond the %d columns of dataset 'document_starts'",
                  w->path, w->rows, starts[j], j, w->D);
    memcpy(b->document_starts + (size_t)k * S, starts, sizeof(int) * S);
    w->rows++;
    if (w->block_rows == SHARD_CHUNK_ROWS) flush_block(w);
}

long shard_writer_rows(const shard_writer *w) { return w->rows; }

void shard_writer_set_attr(shard_writer *w, const char *name, const char *value) {
    h5_lock();
    hid_t type = H5Tcopy(H5T_C_S1);
    writer_check(w, type, "%s: writing the '%s' attribute", w->path, name);
    H5Tset_size(type, strlen(value));
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(w->file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    writer_check(w, attr, "%s: writing the '%s' attribute", w->path, name);
    writer_check(w, H5Awrite(attr, type, value) | H5Aclose(attr) | H5Sclose(space) | H5Tclose(type),
                 "%s: writing the '%s' attribute", w->path, name);
    h5_unlock();
}

int shard_mlm_only(const shard_file *f) { return strcmp(f->packing, "pairs") != 0; }

void shard_writer_close(shard_writer *w) {
    flush_block(w);
    h5_lock();
    herr_t closed = 0;
    for (int d = 0; d < dataset_count(w->D); d++) closed |= H5Dclose(w->dset[d]);
    writer_check(w, closed | H5Fclose(w->file), "%s: closing the HDF5 file", w->path);
    for (shard_writer **o = &open_writers; *o; o = &(*o)->next_open)
        if (*o == w) {
            *o = w->next_open;
            break;
        }
    h5_unlock();
    batch_free(&w->block);
#if BERTPRE_HAVE_LIBDEFLATE
    if (w->deflater) libdeflate_free_compressor(w->deflater);
#endif
    free(w->typed);
    free(w->packed);
    free(w->path);
    free(w);
}

// What a path is when it is not a regular file, for the error that refuses it.
static const char *file_kind(mode_t mode) {
    return S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISDIR(mode) ? "a directory" : "a special file";
}

// A string attribute of the file into value[size]: 1 when read, 0 when absent (value as it
// was), -1 when it is not a string that fits. A fixed-length string (prep writes one) or a
// variable-length one (h5py's attrs[...] = str). Called under the HDF5 lock.
static int read_string_attr(hid_t file, const char *name, char *value, size_t size) {
    if (H5Aexists(file, name) <= 0) return 0;
    hid_t attr = H5Aopen(file, name, H5P_DEFAULT), type = attr >= 0 ? H5Aget_type(attr) : -1;
    int is_string = type >= 0 && H5Tget_class(type) == H5T_STRING;
    char *read = calloc(1, size);
    check_alloc(read, size);
    herr_t got = -1;
    if (is_string && H5Tis_variable_str(type) > 0) {
        char *text = NULL;
        got = H5Aread(attr, type, &text);
        if (got >= 0 && (!text || strlen(text) >= size)) got = -1;
        if (got >= 0) snprintf(read, size, "%s", text);
        if (text) H5free_memory(text);
    } else if (is_string && H5Tget_size(type) < size) {
        got = H5Aread(attr, type, read);
    }
    if (type >= 0) H5Tclose(type);
    if (attr >= 0) H5Aclose(attr);
    if (got >= 0) snprintf(value, size, "%s", read);
    free(read);
    return got < 0 ? -1 : 1;
}

void shard_open(shard_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    // Only a regular file: HDF5 would wait forever on a FIFO with no writer.
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        fatal("%s: is %s, not a regular file; a shard must be an HDF5 file", path, file_kind(st.st_mode));
    f->path = strdup(path);
    h5_lock();
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    h5_check(file, "%s: cannot open as an HDF5 file (missing, truncated or not HDF5)", path);
    f->file = file;
    // How the rows were made: a short string attribute, "pairs" when absent.
    snprintf(f->packing, sizeof f->packing, "pairs");
    int got = read_string_attr(file, "packing", f->packing, sizeof f->packing);
    if (got < 0 || (strcmp(f->packing, "pairs") && strcmp(f->packing, "full-sentences") &&
                    strcmp(f->packing, "doc-sentences") && strcmp(f->packing, "contiguous"))) {
        h5_unlock();
        fatal("%s: attribute 'packing' is not \"pairs\", \"full-sentences\", \"doc-sentences\" or \"contiguous\" "
              "(a string)", path);
    }
    if (read_string_attr(file, "tokenizer_sha256", f->tokenizer_sha256, sizeof f->tokenizer_sha256) < 0) {
        h5_unlock();
        fatal("%s: attribute 'tokenizer_sha256' is not a string of 64 hexadecimal digits", path);
    }
    hsize_t rows[SHARD_DATASETS] = {0}, width[SHARD_DATASETS] = {0};
    for (int d = 0; d < SHARD_DATASETS; d++) {
        const char *name = shard_dataset_names[d];
        if (d == SHARD_DOCUMENT_STARTS && H5Lexists(file, name, H5P_DEFAULT) <= 0) break;  // optional
        if (H5Lexists(file, name, H5P_DEFAULT) <= 0) {
            h5_unlock();
            fatal("%s: dataset '%s' is missing (a shard needs input_ids, input_mask, segment_ids, "
                  "masked_lm_positions, masked_lm_ids, next_sentence_labels)",
                  path, name);
        }
        hid_t dset = H5Dopen2(file, name, H5P_DEFAULT);
        h5_check(dset, "%s: cannot open dataset '%s'", path, name);
        f->dset[d] = dset;
        hid_t type = H5Dget_type(dset);
        H5T_class_t cls = H5Tget_class(type);
        // Stored wider than int (or unsigned 32-bit): read as 64 bits, so a value beyond int
        // is reported as it is stored rather than clamped by HDF5's conversion.
        f->wide[d] = cls == H5T_INTEGER && (H5Tget_size(type) > 4 || (H5Tget_size(type) == 4 &&
                                                                    H5Tget_sign(type) == H5T_SGN_NONE))
                         ? (H5Tget_sign(type) == H5T_SGN_NONE ? SHARD_WIDE_UNSIGNED : SHARD_WIDE_SIGNED)
                         : 0;
        H5Tclose(type);
        if (cls != H5T_INTEGER) {
            h5_unlock();
            fatal("%s: dataset '%s' has a non-integer dtype (class %d); shards hold integers", path, name, (int)cls);
        }
        hid_t space = H5Dget_space(dset);
        int r = H5Sget_simple_extent_ndims(space);
        hsize_t dims[2] = {0, 1};
        if (r == dataset_rank(d)) H5Sget_simple_extent_dims(space, dims, NULL);
        H5Sclose(space);
        if (r != dataset_rank(d)) {
            h5_unlock();
            fatal("%s: dataset '%s' has %d dimensions, expected %d", path, name, r, dataset_rank(d));
        }
        rows[d] = dims[0];
        width[d] = r == 2 ? dims[1] : 1;
    }
    h5_unlock();
    f->N = (long)rows[SHARD_INPUT_IDS];
    f->S = (int)width[SHARD_INPUT_IDS];
    f->P = (int)width[SHARD_MASKED_LM_POSITIONS];
    if (f->dset[SHARD_DOCUMENT_STARTS]) {
        // Any width from 1 to S: a row holds at most S starts, and a writer may store fewer
        // columns (prep: S / 3, the most pieces [CLS] x [SEP] a row holds).
        f->D = (int)width[SHARD_DOCUMENT_STARTS];
        if (width[SHARD_DOCUMENT_STARTS] < 1 || width[SHARD_DOCUMENT_STARTS] > (hsize_t)f->S)
            fatal("%s: dataset 'document_starts' has %llu columns, expected 1 to %d (the sequence length of "
                  "'input_ids')", path, (unsigned long long)width[SHARD_DOCUMENT_STARTS], f->S);
    }
    for (int d = 0; d < dataset_count(f->D); d++) {
        if ((long)rows[d] != f->N)
            fatal("%s: dataset '%s' has %llu rows but 'input_ids' has %ld", path, shard_dataset_names[d],
                  (unsigned long long)rows[d], f->N);
        int expect = dataset_width(d, f->S, f->P, f->D);
        if ((int)width[d] != expect)
            fatal("%s: dataset '%s' has %llu columns, expected %d (like '%s')", path, shard_dataset_names[d],
                  (unsigned long long)width[d], expect,
                  d <= SHARD_SEGMENT_IDS ? "input_ids" : "masked_lm_positions");
    }
    if (f->N == 0) fatal("%s: dataset 'input_ids' has no rows", path);
}

void shard_close(shard_file *f) {
    shard_release(f);
    free(f->path);
    memset(f, 0, sizeof *f);
}

void shard_release(shard_file *f) {
    if (!f->file) return;
    h5_lock();
    for (int d = 0; d < dataset_count(f->D); d++) H5Dclose(f->dset[d]);
    H5Fclose(f->file);
    h5_unlock();
    memset(f->dset, 0, sizeof f->dset);
    f->file = 0;
}

void shard_reopen(shard_file *f) {
    if (f->file) return;
    shard_file again;
    shard_open(&again, f->path);
    if (again.N != f->N || again.S != f->S || again.P != f->P || again.D != f->D)
        fatal("%s: changed while being read (now %ld rows, S=%d, P=%d, %d document_starts columns; was %ld rows, "
              "S=%d, P=%d, %d)", f->path, again.N, again.S, again.P, again.D, f->N, f->S, f->P, f->D);
    free(again.path);
    f->file = again.file;
    memcpy(f->dset, again.dset, sizeof f->dset);
}

int shard_is_open(const shard_file *f) { return f->file != 0; }

static void check_range(const shard_file *f, int d, const int *v, int count, int width, long first, int lo, int hi,
                        const char *what) {
    for (int i = 0; i < count; i++)
        for (int j = 0; j < width; j++) {
            int x = v[(size_t)i * width + j];
            if (x < lo || x >= hi)
                fatal("%s: dataset '%s' row %ld column %d: value %d is out of range [%d, %d) (%s)", f->path,
                      shard_dataset_names[d], first + i, j, x, lo, hi, what);
        }
}

// What the model assumes of a row beyond each value's range (NVIDIA's layout): the real
// tokens come first, so input_mask is a prefix of ones whose count is the row's length (the
// unpadded layout and the attention lengths are built from it), and at least [CLS] is real;
// the masked positions ascend from column 0, lie among the real tokens, and end with zeros
// (a 0 ends the list: positions after a leading 0 would be ignored; a row of zeros has no
// prediction, only its next-sentence label).
static void check_row_meaning(const shard_file *f, const batch_t *b, int i, long row) {
    int S = b->T, P = b->P;
    const int *mask = b->input_mask + (size_t)i * S, *pos = b->masked_lm_positions + (size_t)i * P;
    int len = 0;
    while (len < S && mask[len] == 1) len++;
    if (len == 0) {
        int one = 0;
        while (one < S && mask[one] == 0) one++;
        if (one == S)
            fatal("%s: dataset 'input_mask' row %ld: every value is 0 (a row holds at least [CLS]: its real tokens "
                  "come first, marked 1)", f->path, row);
        fatal("%s: dataset 'input_mask' row %ld column 0: value %d, then %d at column %d: the mask must start with a "
              "1 (column 0 is [CLS], always real), ones for the real tokens, then zeros", f->path, row, mask[0],
              mask[one], one);
    }
    for (int j = len; j < S; j++)
        if (mask[j] != 0)
            fatal("%s: dataset 'input_mask' row %ld column %d: value %d after the 0 at column %d (the mask must be "
                  "ones for the real tokens, then zeros: a row's tokens come first, its length is the count of ones)",
                  f->path, row, j, mask[j], len);
    int k = 0;
    for (; k < P && pos[k] != 0; k++) {
        if (k > 0 && pos[k] <= pos[k - 1])
            fatal("%s: dataset 'masked_lm_positions' row %ld column %d: position %d after %d (positions must "
                  "ascend, then be zero-padded)",
                  f->path, row, k, pos[k], pos[k - 1]);
        if (pos[k] >= len)
            fatal("%s: dataset 'masked_lm_positions' row %ld column %d: value %d is in the padding ('input_mask' is "
                  "0 there; the row has %d real tokens)", f->path, row, k, pos[k], len);
    }
    for (int j = k; j < P; j++) {
        if (pos[j] == 0) continue;
        if (k == 0)
            fatal("%s: dataset 'masked_lm_positions' row %ld column 0: value 0 before position %d at column %d "
                  "(position 0 is [CLS], never masked; a 0 ends the list, so this row's masked positions would be "
                  "ignored)", f->path, row, pos[j], j);
        fatal("%s: dataset 'masked_lm_positions' row %ld column %d: value %d after the 0 at column %d that ends "
              "the list (positions ascend, then are zero-padded)", f->path, row, j, pos[j], k);
    }
    if (!f->D) return;
    // Documents of a packed row: the first begins at [CLS] (0), each later one strictly after
    // the one before and among the real tokens; a 0 ends the list (the model restarts positions
    // and keeps attention inside each document from these starts).
    const int *starts = b->document_starts + (size_t)i * S;
    if (starts[0] != 0)
        fatal("%s: dataset 'document_starts' row %ld column 0: value %d (the first document begins at 0, the row's "
              "[CLS])", f->path, row, starts[0]);
    int n = 1;
    for (; n < f->D && starts[n] != 0; n++) {
        if (starts[n] <= starts[n - 1])
            fatal("%s: dataset 'document_starts' row %ld column %d: value %d after start %d (starts must ascend, "
                  "then be zero-padded)", f->path, row, n, starts[n], starts[n - 1]);
        if (starts[n] >= len)
            fatal("%s: dataset 'document_starts' row %ld column %d: value %d is in the padding ('input_mask' is 0 "
                  "there; the row has %d real tokens)", f->path, row, n, starts[n], len);
    }
    for (int j = n; j < f->D; j++)
        if (starts[j] != 0)
            fatal("%s: dataset 'document_starts' row %ld column %d: value %d after the 0 at column %d that ends the "
                  "list (starts ascend, then are zero-padded)", f->path, row, j, starts[j], n);
}

// Reads rows [first, first + count) of dataset d into dst, in the memory type `type`; a
// negative result on failure, with HDF5's reason in `reason` (taken before any other call
// clears the error stack).
static herr_t read_dataset_rows(shard_file *f, int d, long first, int count, hid_t type, void *dst, char *reason) {
    int r = dataset_rank(d);
    hsize_t width = (hsize_t)dataset_width(d, f->S, f->P, f->D);
    hid_t file_space = H5Dget_space(f->dset[d]);
    hsize_t start[2] = {(hsize_t)first, 0}, cnt[2] = {(hsize_t)count, width};
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, cnt, NULL);
    hid_t mem_space = H5Screate_simple(r, cnt, NULL);
    herr_t st = H5Dread(f->dset[d], type, mem_space, file_space, H5P_DEFAULT, dst);
    if (st < 0) h5_reason(reason);
    H5Sclose(mem_space);
    H5Sclose(file_space);
    return st;
}

void shard_read_rows(shard_file *f, long first, int count, batch_t *dst, int vocab_size) {
    if (dst->T != f->S || dst->P != f->P || count > dst->B)
        fatal("%s: reading %d rows of S=%d P=%d into a batch of %d rows, S=%d P=%d", f->path, count, f->S, f->P,
              dst->B, dst->T, dst->P);
    int S = f->S, P = f->P, D = f->D;
    const struct {
        int hi;
        const char *what;
    } range[SHARD_DATASETS] = {{vocab_size, "token ids below the vocabulary size"}, {2, "0 or 1"}, {2, "0 or 1"},
                               {S, "positions below the sequence length"},
                               {vocab_size, "token ids below the vocabulary size"}, {2, "0 or 1"},
                               {S, "document starts below the sequence length"}};
    int64_t *wide = NULL;
    // document_starts' D columns are read here, then widened to the batch's S.
    int *starts = D ? xmalloc(sizeof(int) * (size_t)count * D) : NULL;
    h5_lock();
    for (int d = 0; d < dataset_count(D); d++) {
        int *column = d == SHARD_DOCUMENT_STARTS ? starts : (int *)dataset_column(dst, d);
        int width = dataset_width(d, S, P, D);
        hid_t type = f->wide[d] == SHARD_WIDE_UNSIGNED ? H5T_NATIVE_UINT64
                     : f->wide[d] == SHARD_WIDE_SIGNED ? H5T_NATIVE_INT64 : H5T_NATIVE_INT;
        void *into = column;
        if (f->wide[d]) into = wide = wide ? wide : xmalloc(sizeof(int64_t) * (size_t)dst->B * (S > P ? S : P));
        char reason[256];
        if (read_dataset_rows(f, d, first, count, type, into, reason) >= 0) {
            for (size_t i = 0; f->wide[d] && i < (size_t)count * width; i++) {
                int64_t v = wide[i];
                int unsigned_big = f->wide[d] == SHARD_WIDE_UNSIGNED && (uint64_t)v > INT32_MAX;
                if (unsigned_big || v < INT32_MIN || v > INT32_MAX) {
                    h5_unlock();
                    char value[32];
                    if (unsigned_big) snprintf(value, sizeof value, "%llu", (unsigned long long)(uint64_t)v);
                    else snprintf(value, sizeof value, "%lld", (long long)v);
                    fatal("%s: dataset '%s' row %ld column %d: value %s is out of range [0, %d) (%s)", f->path,
                          shard_dataset_names[d], first + (long)(i / width), (int)(i % width), value, range[d].hi,
                          range[d].what);
                }
                column[i] = (int)v;
            }
            continue;
        }
        // Name the first unreadable row: re-read the rows one at a time.
        long bad = first;
        for (long row = first; row < first + count; row++) {
            char ignored[256];
            if (read_dataset_rows(f, d, row, 1, type, into, ignored) < 0) {
                bad = row;
                break;
            }
        }
        h5_unlock();
        fatal("%s: dataset '%s': cannot read row %ld (reading rows %ld..%ld; corrupt or truncated file; HDF5: %s)",
              f->path, shard_dataset_names[d], bad, first, first + count - 1, reason);
    }
    h5_unlock();
    free(wide);
    for (int i = 0; i < count; i++) {
        int *row = dst->document_starts + (size_t)i * S;
        memset(row, 0, sizeof(int) * S);
        if (D) memcpy(row, starts + (size_t)i * D, sizeof(int) * D);
    }
    free(starts);
    for (int d = 0; d < dataset_count(D); d++)
        check_range(f, d, dataset_column(dst, d), count, batch_width(d, S, P), first, 0, range[d].hi,
                    range[d].what);
    for (int i = 0; i < count; i++) check_row_meaning(f, dst, i, first + i);
}
