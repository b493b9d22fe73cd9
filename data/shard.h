// HDF5 shards in the schema of docs/ARCHITECTURE.md §6 (NVIDIA's BERT layout):
//   input_ids [N,S] i4, input_mask [N,S] i1, segment_ids [N,S] i1,
//   masked_lm_positions [N,P] i4 (ascending, zero-padded), masked_lm_ids [N,P] i4,
//   next_sentence_labels [N] i1 (1 = random next segment);
// optionally document_starts [N,D] i4, 1 <= D <= S: where the documents of a packed row begin
//   (prep --separate-documents writes D = S / 3, the most pieces [CLS] x [SEP] a row holds):
//   column 0 is 0, the later starts ascend strictly and lie below the row's length (its
//   input_mask ones), then zeros; a file without it holds rows of one document each.
// The file's attribute "packing" says how the rows were made: "pairs" (NSP sentence pairs,
// also when absent, as in NVIDIA's files) or, for MLM-only rows whose NSP labels mean
// nothing, "full-sentences" / "doc-sentences" / "contiguous" (data/prep.h). The attribute
// "tokenizer_sha256" (prep writes it) is the SHA-256 of the tokenizer file the ids come from:
// train compares it with train.tokenizer's.
// The writer appends rows to gzip-compressed, growable datasets in chunks of
// SHARD_CHUNK_ROWS rows (the loader's read block); the reader checks
// structure on open and values on every read, and reads rows by hyperslab. Every HDF5 call
// of the process goes through one lock, so several loaders and the prep writer can run in
// threads whatever way the HDF5 library was built.
#pragma once
#include <stdint.h>
#include "data/batch.h"

enum { SHARD_CHUNK_ROWS = 256 };

enum {
    SHARD_INPUT_IDS,
    SHARD_INPUT_MASK,
    SHARD_SEGMENT_IDS,
    SHARD_MASKED_LM_POSITIONS,
    SHARD_MASKED_LM_IDS,
    SHARD_NEXT_SENTENCE_LABELS,
    SHARD_DOCUMENT_STARTS,  // optional: the six above are required
    SHARD_DATASETS
};
enum { SHARD_REQUIRED_DATASETS = SHARD_DOCUMENT_STARTS };
extern const char *const shard_dataset_names[SHARD_DATASETS];

typedef struct shard_writer shard_writer;

// gzip_level 0..9 (NVIDIA's h5py files use gzip level 4). The chunks are compressed by
// libdeflate where bertpre is built with it, else by zlib (also chosen by the environment
// variable BERTPRE_DEFLATE=zlib): either way zlib-format streams of HDF5's deflate filter,
// which h5py and any HDF5 reader inflate with zlib. A failed write (a full disk) ends the
// process with one line naming the file and the errno, after removing the files of every
// writer not yet closed: they are incomplete. D: the columns of the dataset document_starts
// (1..S; a row's starts beyond them are an error), 0 = the file has no such dataset.
shard_writer *shard_writer_create(const char *path, int S, int P, int D, int gzip_level);
// Writes a string attribute of the file: "packing" (see above; without it the shard reads as
// "pairs") or "tokenizer_sha256".
void shard_writer_set_attr(shard_writer *w, const char *name, const char *value);
// Appends row `row` of a host batch (of its document_starts, the first D columns). Writers of
// different files may run in parallel threads.
void shard_writer_append(shard_writer *w, const batch_t *rows, int row);
long shard_writer_rows(const shard_writer *w);
void shard_writer_close(shard_writer *w);

enum { SHARD_WIDE_SIGNED = 1, SHARD_WIDE_UNSIGNED = 2 };

typedef struct {
    char *path;
    int64_t file;        // hid_t
    int64_t dset[SHARD_DATASETS];
    unsigned char wide[SHARD_DATASETS];  // stored wider than int: 0, SHARD_WIDE_SIGNED or _UNSIGNED
    long N;
    int S, P;
    int D;             // columns of the optional dataset document_starts; 0 when the file has none
    char packing[32];  // the "packing" attribute: "pairs" (also when absent) or an MLM-only packing
    char tokenizer_sha256[65];  // the "tokenizer_sha256" attribute; empty when absent
} shard_file;

// Whether the shard's rows are MLM-only (packed text, no NSP pairs).
int shard_mlm_only(const shard_file *f);

// Opens and checks the structure: all six required datasets (and document_starts where present),
// integer dtypes, consistent shapes.
// Exits with a message naming the file and the dataset on any problem.
void shard_open(shard_file *f, const char *path);
void shard_close(shard_file *f);
// Closes the HDF5 handles but keeps path and shape, so that a reader of thousands of shards
// holds only a few open; shard_reopen opens again and checks that the shape is unchanged.
void shard_release(shard_file *f);
void shard_reopen(shard_file *f);
int shard_is_open(const shard_file *f);
// Reads rows [first, first + count) into rows 0..count of dst (dst->T == S, dst->P == P),
// converting any integer dtype to int, then checks their values: ids below vocab_size,
// masks/segments/labels 0 or 1, input_mask a non-empty prefix of ones, positions from
// column 0 ascending among the real tokens, then zero (no position after a 0), document starts
// as above. dst->document_starts gets the stored starts widened to S columns with zeros, or
// zeros when the file has none. Exits with the file, dataset, row and value on a read error or
// a bad value.
void shard_read_rows(shard_file *f, long first, int count, batch_t *dst, int vocab_size);
