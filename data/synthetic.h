// Synthetic pretraining batches for the demo and tests, until real shards are used: each
// sequence is [CLS] A [SEP] B [SEP], where A follows a fixed random token chain (so masked
// tokens are predictable from their neighbours) and B continues A's chain (label 0) or
// starts a fresh one (label 1); 15% of the tokens are masked (or a chosen share, to the
// percent), 80/10/10. Deterministic in (seed, step).
#pragma once
#include <stdint.h>
#include "data/batch.h"
#include "data/masking.h"

// Special ids of the synthetic vocabulary: 0 pad, 1 unk, 2 [CLS], 3 [SEP], 4 [MASK].
enum { SYNTH_PAD = 0, SYNTH_UNK = 1, SYNTH_CLS = 2, SYNTH_SEP = 3, SYNTH_MASK = 4, SYNTH_FIRST_WORD = 5 };

// The masking of data in this vocabulary (ALBERT's convention): dynamic masking's without a
// tokenizer.
masking_params synth_masking(int vocab_size, double prob, int max_predictions);

void batch_alloc(batch_t *batch, int B, int T, int P);
void batch_free(batch_t *batch);
void synthetic_batch(batch_t *batch, int vocab_size, uint64_t seed, uint32_t step);
// The same with each word position masked with probability mask_prob, rounded to the percent
// (synthetic_batch: MASK_PROB_DEFAULT), at most P per sequence.
void synthetic_batch_masked(batch_t *batch, int vocab_size, uint64_t seed, uint32_t step, double mask_prob);
