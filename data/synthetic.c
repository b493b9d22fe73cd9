#include "data/synthetic.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/common/check.h"
#include "kernels/common/philox.h"

void batch_alloc(batch_t *batch, int B, int T, int P) {
    batch->B = B;
    batch->T = T;
    batch->P = P;
    batch->input_ids = xcalloc((size_t)B * T, sizeof(int));
    batch->input_mask = xcalloc((size_t)B * T, sizeof(int));
    batch->segment_ids = xcalloc((size_t)B * T, sizeof(int));
    batch->masked_lm_positions = xcalloc((size_t)B * P, sizeof(int));
    batch->masked_lm_ids = xcalloc((size_t)B * P, sizeof(int));
    batch->next_sentence_labels = xcalloc((size_t)B, sizeof(int));
    batch->document_starts = xcalloc((size_t)B * T, sizeof(int));  // zeros: one document per row
}

void batch_free(batch_t *batch) {
    free(batch->input_ids);
    free(batch->input_mask);
    free(batch->segment_ids);
    free(batch->masked_lm_positions);
    free(batch->masked_lm_ids);
    free(batch->next_sentence_labels);
    free(batch->document_starts);
}

// The chain: word w is followed by next(w) with probability 7/8, by a random word otherwise.
static int chain_next(int w, int words, uint32_t draw) {
    if ((draw & 7) == 0) return SYNTH_FIRST_WORD + (int)((draw >> 3) % (uint32_t)words);
    return SYNTH_FIRST_WORD + (int)(((uint32_t)(w - SYNTH_FIRST_WORD) * 7u + 3u) % (uint32_t)words);
}

void synthetic_batch(batch_t *batch, int vocab_size, uint64_t seed, uint32_t step) {
    synthetic_batch_masked(batch, vocab_size, seed, step, MASK_PROB_DEFAULT);
}

void synthetic_batch_masked(batch_t *batch, int vocab_size, uint64_t seed, uint32_t step, double mask_prob) {
    uint32_t percent = (uint32_t)nearbyint(mask_prob * 100.0);
    int B = batch->B, T = batch->T, P = batch->P, words = vocab_size - SYNTH_FIRST_WORD;
    if (words < 2) fatal("synthetic data needs a vocabulary of at least %d tokens, got %d", SYNTH_FIRST_WORD + 2,
                         vocab_size);
    memset(batch->masked_lm_positions, 0, sizeof(int) * (size_t)B * P);
    memset(batch->masked_lm_ids, 0, sizeof(int) * (size_t)B * P);
    memset(batch->document_starts, 0, sizeof(int) * (size_t)B * T);  // each row one document (a pair)
    for (int b = 0; b < B; b++) {
        uint32_t site = 7 + (uint32_t)b;
        uint64_t k = 0;
#define DRAW() philox_draw(seed, step, site, k++)
        int *ids = batch->input_ids + (size_t)b * T, *seg = batch->segment_ids + (size_t)b * T;
        int *mask = batch->input_mask + (size_t)b * T;
        // Lengths: the pair fills T - 3 tokens, with 10% short sequences (padding inside the batch).
        int content = T - 3;
        if (DRAW() % 10 == 0) content = 2 + (int)(DRAW() % (uint32_t)(content - 1));
        int len_a = 1 + (int)(DRAW() % (uint32_t)(content - 1));
        int is_random = (int)(DRAW() & 1);
        int w = SYNTH_FIRST_WORD + (int)(DRAW() % (uint32_t)words);
        int t = 0;
        ids[t] = SYNTH_CLS, seg[t++] = 0;
        for (int i = 0; i < len_a; i++, w = chain_next(w, words, DRAW())) ids[t] = w, seg[t++] = 0;
        ids[t] = SYNTH_SEP, seg[t++] = 0;
        if (is_random) w = SYNTH_FIRST_WORD + (int)(DRAW() % (uint32_t)words);
        for (int i = len_a; i < content; i++, w = chain_next(w, words, DRAW())) ids[t] = w, seg[t++] = 1;
        ids[t] = SYNTH_SEP, seg[t++] = 1;
        for (int i = 0; i < T; i++) mask[i] = i < t;
        for (int i = t; i < T; i++) ids[i] = SYNTH_PAD, seg[i] = 0;
        batch->next_sentence_labels[b] = is_random;
        // Mask `percent` % of the word positions (never [CLS]/[SEP]/padding), in ascending order.
        int n_pred = 0;
        for (int i = 1; i < t && n_pred < P; i++) {
            if (ids[i] == SYNTH_SEP || DRAW() % 100 >= percent) continue;
            batch->masked_lm_positions[b * P + n_pred] = i;
            batch->masked_lm_ids[b * P + n_pred++] = ids[i];
            uint32_t r = DRAW() % 10;
            if (r < 8) ids[i] = SYNTH_MASK;
            else if (r == 8) ids[i] = SYNTH_FIRST_WORD + (int)(DRAW() % (uint32_t)words);
        }
#undef DRAW
    }
}

masking_params synth_masking(int vocab_size, double prob, int max_predictions) {
    tokenizer_special_ids sp = {.pad = SYNTH_PAD, .unk = SYNTH_UNK, .cls = SYNTH_CLS, .sep = SYNTH_SEP,
                                .mask = SYNTH_MASK};
    return masking_for_tokenizer(sp, vocab_size, prob, max_predictions);
}
