// Masked-LM masking of one sequence, as google-research/bert's create_pretraining_data.py
// does it: choose round(len * prob) positions (at least 1, at most P) uniformly among the
// tokens that are not [CLS]/[SEP]/padding; replace 80% with [MASK], 10% with a random
// ordinary token, keep 10%. With whole-word masking (its do_whole_word_mask) the candidates
// are words, a word-initial piece and the pieces that continue it, in a random order: each
// is taken whole while it fits the budget (a word that would pass it is skipped, so a row may
// mask fewer; a word longer than the whole budget is taken as its pieces instead, which the
// script never masks), and the 80/10/10 is drawn per token. Positions are stored ascending and zero-padded
// (docs/ARCHITECTURE.md §6). Draws come from Philox keyed by (seed, stream, site), so the result depends only on
// the key: prep is deterministic whatever the thread count, and the loader's dynamic
// masking is reproducible per (epoch, sample).
#pragma once
#include <stdint.h>
#include "tokenizer/tokenizer.h"

// BERT's rate (create_pretraining_data.py's masked_lm_prob default): prep's and train's default.
#define MASK_PROB_DEFAULT 0.15

typedef struct {
    double prob;          // MASK_PROB_DEFAULT, or train.mask_prob / prep --masked-lm-prob
    int max_predictions;  // P
    int cls_id, sep_id, pad_id, mask_id;
    int vocab;           // random replacements are drawn from [0, vocab) ...
    int n_specials;      // ... less these ids, ascending and distinct
    int specials[5];
    // Whole-word masking: continues[id] is 1 for the pieces that continue the word before them
    // (masking_whole_words); NULL: piece by piece. A word never spans [CLS] or [SEP].
    unsigned char *continues;
} masking_params;

// Ints of scratch masking_apply needs for a row of len tokens.
#define MASKING_SCRATCH(len) (3 * (size_t)(len))

// The masking of a tokenizer's data: its [CLS]/[SEP]/[MASK] ids, [PAD] (0 without one), and
// random replacements drawn uniformly from every id of its vocabulary of size V but its
// special tokens ([PAD], [UNK], [CLS], [SEP], [MASK]), wherever in the vocabulary they sit
// (create_pretraining_data.py draws from the whole vocabulary).
masking_params masking_for_tokenizer(tokenizer_special_ids sp, int V, double prob, int max_predictions);
// Turns on whole-word masking with tok's pieces: WordPiece's "##" pieces continue a word;
// SentencePiece's pieces without a leading U+2581 (the word-initial mark) do, except the
// special ids. Allocates mp->continues (masking_free releases it).
void masking_whole_words(masking_params *mp, const tokenizer *tok);
void masking_free(masking_params *mp);

// A Philox stream: successive draws of (seed, step, site, 0), (.., 1), ... Draws 4g .. 4g+3
// are the four words of one Philox call (philox_draw), which the stream keeps: one call per
// four draws. Made by rng_stream_at.
typedef struct {
    uint64_t seed;
    uint32_t step, site;
    uint64_t counter;
    uint64_t block_group;  // the call held in block, valid when has_block
    uint32_t block[4];
    int has_block;
} rng_stream;

// The stream of (seed, step, site) from draw `counter` on.
static inline rng_stream rng_stream_at(uint64_t seed, uint32_t step, uint32_t site, uint64_t counter) {
    rng_stream r = {.seed = seed, .step = step, .site = site, .counter = counter, .block_group = 0, .block = {0, 0, 0, 0},
                    .has_block = 0};
    return r;
}

uint32_t rng_next(rng_stream *r);
// Uniform integer in [lo, hi] (inclusive), hi >= lo.
int rng_range(rng_stream *r, int lo, int hi);
// Uniform in [0, 1).
double rng_uniform(rng_stream *r);

// A uniform random ordinary id: one of the vocab - n_specials ids that are not special.
int masking_random_token(const masking_params *mp, rng_stream *r);

// Masks ids[0..len) in place (len counts real tokens, padding excluded) and writes the
// masked positions and their original ids to positions[0..P) and labels[0..P), zero-padded.
// Returns the number of masked positions. scratch holds MASKING_SCRATCH(len) ints.
int masking_apply(const masking_params *mp, rng_stream *r, int *ids, int len, int *positions, int *labels,
                  int *scratch);

// Undoes a stored masking: puts the original ids back at the masked positions (the list
// ends at the first zero position, as in NVIDIA's reader).
void masking_restore(int *ids, const int *positions, const int *labels, int P);
