// One micro-batch on the host, in the schema of the HDF5 shards (docs/ARCHITECTURE.md §6), int32.
#pragma once

typedef struct {
    int B, T, P;               // sequences, sequence length, max masked positions per sequence
    int *input_ids;            // [B,T]
    int *input_mask;           // [B,T] 1 = real token, 0 = padding
    int *segment_ids;          // [B,T]
    int *masked_lm_positions;  // [B,P] ascending, zero-padded (position 0 is [CLS], never masked)
    int *masked_lm_ids;        // [B,P]
    int *next_sentence_labels; // [B] 1 = random next segment
    // [B,T] where the documents of a packed row begin (shard dataset "document_starts",
    // docs/DATA.md): 0 first, then the later starts ascending, then zeros; all zeros: the row
    // is one document (NULL: every row is). Attention stays inside each document and
    // positions restart at each start (engine/model.c).
    int *document_starts;
} batch_t;

// The masked slots that count, as NVIDIA's loader reads them: slot p of sequence b is valid
// when every position before it and itself are non-zero (the list ends at the first zero).
static inline int batch_masked_count(const batch_t *batch, int b) {
    int p = 0;
    while (p < batch->P && batch->masked_lm_positions[b * batch->P + p] != 0) p++;
    return p;
}

// The real tokens of sequence b: the ones of its input_mask (the loader admits only masks
// that are a prefix of ones).
static inline int batch_length(const batch_t *batch, int b) {
    int n = 0;
    for (int t = 0; t < batch->T; t++) n += batch->input_mask[b * batch->T + t] != 0;
    return n;
}

// The documents of sequence b (1 when it records no later start, or the batch no starts).
static inline int batch_documents(const batch_t *batch, int b) {
    if (!batch->document_starts) return 1;
    const int *s = batch->document_starts + b * batch->T;
    int n = 1;
    while (n < batch->T && s[n] != 0) n++;
    return n;
}

// Sequences [first, first + count) of a batch, as a view sharing its memory.
static inline batch_t batch_slice(const batch_t *batch, int first, int count) {
    batch_t view = *batch;
    int T = batch->T, P = batch->P;
    view.B = count;
    view.input_ids += first * T;
    view.input_mask += first * T;
    view.segment_ids += first * T;
    view.masked_lm_positions += first * P;
    view.masked_lm_ids += first * P;
    view.next_sentence_labels += first;
    if (view.document_starts) view.document_starts += first * T;
    return view;
}
