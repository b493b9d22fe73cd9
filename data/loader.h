// The sharded HDF5 loader: micro-batches for one rank from a set of shard files.
//
// Order: the samples of all shards (in sorted file order) are cut into blocks of
// LOADER_BLOCK consecutive rows. Each epoch permutes the blocks and the rows inside each
// block (Philox keyed by seed and epoch), which gives one global order; rank r of W takes
// the contiguous slice [r*N/W, (r+1)*N/W) of it. The slices are disjoint and together hold
// every sample once per epoch, also when there are fewer shards than ranks; a rank reads
// whole blocks by hyperslab (one block in memory at a time), so memory stays bounded.
// A rank's batches run through its slices epoch after epoch: a batch may span the end of
// an epoch, so every batch is full and no sample is dropped or repeated within an epoch.
//
// The cursor (plain integers) names the next batch exactly: a checkpoint stores it and
// loader_cursor_set resumes with the very next batch. A background thread prepares up to
// `prefetch` batches ahead; the cursor always refers to what the caller has consumed.
#pragma once
#include <stdint.h>
#include "data/batch.h"
#include "data/masking.h"

enum { LOADER_BLOCK = 256 };  // = SHARD_CHUNK_ROWS: one block decompresses one chunk of our shards

typedef struct {
    int64_t epoch;     // epochs completed by this rank's stream
    int64_t position;  // next sample within this rank's slice of that epoch
    uint64_t seed;
    int32_t rank, world_size;
    int64_t samples;   // all samples of all shards, to detect a different data set on resume
} loader_cursor;

typedef struct {
    int batch_size;
    int rank, world_size;
    uint64_t seed;
    int vocab_size;       // token ids must be below it
    int seq_length;       // shards must have S = seq_length (0: take it from the first shard)
    int max_predictions;  // and P <= max_predictions (0: P of the first shard): every shard stores the same
                          // P, and batches hold max_predictions columns (a narrower stored list is
                          // zero-filled: dynamic masking at a higher rate than prep's reads prep's shards)
    int shuffle;          // 0: blocks and rows in file order (evaluation)
    int prefetch;         // batches prepared ahead by a background thread; 0: none
    int check_on_open;    // read and check every row of every shard when opening (else each
                          // block's values are checked as it is read; the structure always at open)
    int skip_heldout;     // directories in the spec leave out eval-* files (prep's held-out shards)
    int heldout_only;     // directories in the spec that hold eval-* files give those alone (evaluation)
    int dynamic_masking;  // fresh masks per epoch and sample instead of the stored ones
    masking_params masking;  // for dynamic masking (max_predictions is set by the loader)
} loader_options;

typedef struct loader loader;

// `spec`: comma-separated entries, each a shard file, a directory (its *.hdf5 and *.h5
// files) or a glob pattern; a file named twice is an error. Exits with a message naming the
// file and dataset on bad input.
loader *loader_open(const char *spec, const loader_options *options);
void loader_close(loader *l);

// Fills `out` (allocated with batch_alloc for batch_size, S, P) with the next batch. Each row
// carries its shard's document_starts (docs/DATA.md), zeros for a shard without the dataset,
// whatever the masking (dynamic masking never takes a [CLS] or [SEP]).
void loader_next_batch(loader *l, batch_t *out);
loader_cursor loader_cursor_get(const loader *l);
// Continues from a stored cursor; exits if it belongs to another seed, rank, world size or
// data set.
void loader_cursor_set(loader *l, loader_cursor c);

long loader_samples(const loader *l);       // all shards
long loader_rank_samples(const loader *l);  // this rank's slice of one epoch
int loader_seq_length(const loader *l);
int loader_max_predictions(const loader *l);
int loader_shard_count(const loader *l);
const char *loader_shard_path(const loader *l, int i);
const char *loader_shard_tokenizer(const loader *l, int i);  // its "tokenizer_sha256" ("" when absent)
// The first shard whose rows are MLM-only (packed text: their NSP labels mean nothing;
// shard_mlm_only), or NULL when every shard holds NSP pairs. *packing gets its packing.
const char *loader_mlm_only_shard(const loader *l, const char **packing);
