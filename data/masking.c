// Masked-LM masking (see masking.h): candidate positions, a partial Fisher-Yates draw of
// round(len * prob) of them (or of whole words, shuffled and taken while they fit), then
// 80/10/10 replacement, all from one Philox stream.
#include "data/masking.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/common/check.h"
#include "kernels/common/philox.h"

uint32_t rng_next(rng_stream *r) {
    uint64_t group = r->counter >> 2;
    if (!r->has_block || r->block_group != group) {
        philox4x32 b = philox_draw4(r->seed, r->step, r->site, group);
        for (int i = 0; i < 4; i++) r->block[i] = b.v[i];
        r->block_group = group;
        r->has_block = 1;
    }
    return r->block[r->counter++ & 3];  // philox_draw(seed, step, site, counter)
}

int rng_range(rng_stream *r, int lo, int hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    uint64_t wide = ((uint64_t)rng_next(r) << 32) | rng_next(r);
    return lo + (int)(wide % span);  // bias below 2^-32 * span: negligible for sequence sizes
}

double rng_uniform(rng_stream *r) { return (rng_next(r) >> 5) * (1.0 / 134217728.0); }

masking_params masking_for_tokenizer(tokenizer_special_ids sp, int V, double prob, int max_predictions) {
    masking_params mp = {prob, max_predictions, sp.cls, sp.sep, sp.pad < 0 ? 0 : sp.pad, sp.mask, V, 0, {0}, NULL};
    int ids[5] = {sp.pad, sp.unk, sp.cls, sp.sep, sp.mask};
    for (int i = 0; i < 5; i++) {  // insert in order, skipping absent (< 0), out-of-range and repeated ids
        int id = ids[i], k = mp.n_specials;
        if (id < 0 || id >= V) continue;
        int seen = 0;
        for (int j = 0; j < mp.n_specials; j++) seen |= mp.specials[j] == id;
        if (seen) continue;
        while (k > 0 && mp.specials[k - 1] > id) mp.specials[k] = mp.specials[k - 1], k--;
        mp.specials[k] = id;
        mp.n_specials++;
    }
    if (V - mp.n_specials < 1) fatal("masking: the vocabulary of %d ids holds no ordinary token to draw", V);
    return mp;
}

void masking_whole_words(masking_params *mp, const tokenizer *tok) {
    int V = tokenizer_vocab_size(tok), kind = tokenizer_type(tok);
    mp->continues = xcalloc((size_t)V, 1);
    char piece[1024];
    for (int id = 0; id < V; id++) {
        int special = 0;
        for (int j = 0; j < mp->n_specials; j++) special |= mp->specials[j] == id;
        if (special || !tokenizer_id_to_piece(tok, id, piece, sizeof piece).ok) continue;
        // WordPiece: ## continues; SentencePiece: a piece without its word-start \u2581;
        // byte-level BPE: one without the byte character of a space, \u0120, before it
        mp->continues[id] = kind == TOKENIZER_WORDPIECE ? !strncmp(piece, "##", 2)
                            : kind == TOKENIZER_BPE     ? strncmp(piece, "\xc4\xa0", 2) != 0
                                                        : strncmp(piece, "\xe2\x96\x81", 3) != 0;
    }
}

void masking_free(masking_params *mp) {
    free(mp->continues);
    mp->continues = NULL;
}

int masking_random_token(const masking_params *mp, rng_stream *r) {
    // The k-th ordinary id: k, moved past each special id at or below it (ascending).
    int k = rng_range(r, 0, mp->vocab - mp->n_specials - 1);
    for (int j = 0; j < mp->n_specials; j++)
        if (k >= mp->specials[j]) k++;
    return k;
}

static int is_candidate(const masking_params *mp, int id) {
    return id != mp->cls_id && id != mp->sep_id && id != mp->pad_id;
}

// Whole words into chosen[0..): returns how many positions. A word is a candidate piece and the
// pieces after it that continue it (never across [CLS]/[SEP]); a word of more pieces than `want`
// (SentencePiece on text without spaces, where a "word" can be a whole sentence) counts as its
// pieces, each a word of its own, so that such a row is masked too; the words are shuffled (full
// Fisher-Yates) and each taken while the count stays within `want`.
static int choose_whole_words(const masking_params *mp, rng_stream *r, const int *ids, int len, int want,
                              int *chosen, int *scratch) {
    int *start = scratch, *count = scratch + len, *order = scratch + 2 * (size_t)len, n_words = 0;
    for (int i = 0; i < len; i++) {
        int id = ids[i];
        if (!is_candidate(mp, id)) continue;
        int joins = n_words && start[n_words - 1] + count[n_words - 1] == i && id >= 0 && id < mp->vocab &&
                    mp->continues[id];
        if (joins) {
            count[n_words - 1]++;
        } else {
            start[n_words] = i, count[n_words] = 1;
            order[n_words] = n_words;
            n_words++;
        }
    }
    for (int w = 0, n = n_words; w < n; w++) {
        if (count[w] <= want) continue;
        for (int i = 1; i < count[w]; i++, n_words++)  // its pieces after the first, as words at the end
            start[n_words] = start[w] + i, count[n_words] = 1, order[n_words] = n_words;
        count[w] = 1;
    }
    for (int k = 0; k + 1 < n_words; k++) {
        int j = rng_range(r, k, n_words - 1), t = order[k];
        order[k] = order[j];
        order[j] = t;
    }
    int got = 0;
    for (int k = 0; k < n_words && got < want; k++) {
        int w = order[k];
        if (got + count[w] > want) continue;
        for (int i = 0; i < count[w]; i++) chosen[got++] = start[w] + i;
    }
    return got;
}

int masking_apply(const masking_params *mp, rng_stream *r, int *ids, int len, int *positions, int *labels,
                  int *scratch) {
    int P = mp->max_predictions, n_cand = 0;
    for (int i = 0; i < P; i++) positions[i] = labels[i] = 0;
    for (int i = 0; i < len; i++)
        if (is_candidate(mp, ids[i])) scratch[n_cand++] = i;
    // Python's round() (half to even), like the reference script: nearbyint in the default mode.
    int want = (int)nearbyint(len * mp->prob);
    if (want < 1) want = 1;
    if (want > P) want = P;
    if (want > n_cand) want = n_cand;
    if (mp->continues) {
        want = choose_whole_words(mp, r, ids, len, want, positions, scratch);
        memcpy(scratch, positions, sizeof(int) * (size_t)want);
    } else {
        // Partial Fisher-Yates: the first `want` candidates become a uniform random subset.
        for (int k = 0; k < want; k++) {
            int j = rng_range(r, k, n_cand - 1);
            int t = scratch[k];
            scratch[k] = scratch[j];
            scratch[j] = t;
        }
    }
    // Ascending order, as the shards store positions (insertion sort: want <= P is small).
    for (int k = 1; k < want; k++) {
        int v = scratch[k], j = k - 1;
        while (j >= 0 && scratch[j] > v) scratch[j + 1] = scratch[j], j--;
        scratch[j + 1] = v;
    }
    for (int k = 0; k < want; k++) {
        int pos = scratch[k];
        positions[k] = pos;
        labels[k] = ids[pos];
        double u = rng_uniform(r);
        if (u < 0.8)
            ids[pos] = mp->mask_id;
        else if (u >= 0.9)
            ids[pos] = masking_random_token(mp, r);
    }
    return want;
}

void masking_restore(int *ids, const int *positions, const int *labels, int P) {
    for (int k = 0; k < P && positions[k] != 0; k++) ids[positions[k]] = labels[k];
}
