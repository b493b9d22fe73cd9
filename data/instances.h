// The instances of prep (prep.h): tokenized documents made into rows of the shard layout,
// either as BERT's next-sentence pairs (google-research/bert's create_instances_from_document)
// or packed as RoBERTa's FULL-SENTENCES / DOC-SENTENCES or run_mlm.py's contiguous blocks,
// each row masked as it is made. Pure functions of their inputs and their draws: prep's
// threads, files and ranks are prep.c's.
#pragma once
#include <stddef.h>
#include "data/batch.h"
#include "data/masking.h"
#include "data/prep.h"

// A document after tokenization: sentence i is ids[start[i] .. start[i + 1]).
typedef struct {
    int *ids;
    size_t n_ids, cap_ids;
    long *start;
    int n_sent, cap_sent;
} token_doc;

// Instances in the shard layout, growable (rows.document_starts included: zeros but for rows of
// separate documents).
typedef struct {
    batch_t rows;
    int cap;
    int *perm;           // write order
    double real_tokens;  // of the rows: their input_mask ones
    double masked;       // of the rows: their masked positions
    long unmasked_rows;  // rows with no masked position
} instances_t;

// Scratch buffers of one builder (one thread); mask_scratch holds MASKING_SCRATCH(seq_length).
typedef struct {
    int *a, *b;
    int cap_a, cap_b;
    int *mask_scratch;
} instance_scratch;

// What every row is made under: prep's options and the tokenizer's special ids.
typedef struct {
    int seq_length, max_predictions;
    double short_seq_prob;  // pairs: a shorter target length this often
    prep_packing packing;
    const masking_params *mp;
    int separate_documents;  // packed rows: each document's piece its own [CLS] ... [SEP] (prep.h)
} instance_rules;

void token_doc_reserve(token_doc *d, size_t ids, int sentences);
static inline int sentence_len(const token_doc *d, int i) { return (int)(d->start[i + 1] - d->start[i]); }

void instances_reserve(instances_t *in, int S, int P, int need);
// in->perm = a random permutation of its rows (the order they are written in).
void instances_shuffle(instances_t *in, rng_stream *r);

// The packed rows (rules->packing, not PREP_PAIRS) of the documents docs[i] whose is_eval[i]
// equals eval, in order, into rows of seq_length - 2 tokens; with rules->separate_documents
// (full-sentences or contiguous) the rows' document_starts record where each piece begins.
void instances_pack(const instance_rules *rules, const token_doc *docs, const char *is_eval, int n_docs, int eval,
                    rng_stream *r, instance_scratch *w, instances_t *out);
// The next-sentence pairs of docs[doc], random next segments drawn from docs[pool[..n_pool)];
// returns the tokens of the document left out (truncated, or in a pair not made).
long instances_pairs(const instance_rules *rules, const token_doc *docs, int doc, const int *pool, int n_pool,
                     rng_stream *r, instance_scratch *w, instances_t *out);
