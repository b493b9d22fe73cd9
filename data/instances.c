// The instances of prep (instances.h): the algorithms, moved out of prep.c's pipeline.
#include "data/instances.h"
#include <stdlib.h>
#include <string.h>
#include "kernels/common/check.h"

void instances_reserve(instances_t *in, int S, int P, int need) {
    if (need <= in->cap) return;
    int cap = in->cap ? in->cap : 256;
    while (cap < need) cap *= 2;
    batch_t *b = &in->rows;
    b->input_ids = realloc(b->input_ids, sizeof(int) * (size_t)cap * S);
    b->input_mask = realloc(b->input_mask, sizeof(int) * (size_t)cap * S);
    b->segment_ids = realloc(b->segment_ids, sizeof(int) * (size_t)cap * S);
    b->masked_lm_positions = realloc(b->masked_lm_positions, sizeof(int) * (size_t)cap * P);
    b->masked_lm_ids = realloc(b->masked_lm_ids, sizeof(int) * (size_t)cap * P);
    b->next_sentence_labels = realloc(b->next_sentence_labels, sizeof(int) * (size_t)cap);
    b->document_starts = realloc(b->document_starts, sizeof(int) * (size_t)cap * S);
    in->perm = realloc(in->perm, sizeof(int) * (size_t)cap);
    if (!b->input_ids || !b->input_mask || !b->segment_ids || !b->masked_lm_positions || !b->masked_lm_ids ||
        !b->next_sentence_labels || !b->document_starts || !in->perm)
        fatal("prep: out of host memory for %d instances", cap);
    b->T = S;
    b->P = P;
    in->cap = cap;
}

void token_doc_reserve(token_doc *d, size_t ids, int sentences) {
    if (ids > d->cap_ids) {
        d->cap_ids = 2 * ids;
        d->ids = realloc(d->ids, sizeof(int) * d->cap_ids);
        check_alloc(d->ids, sizeof(int) * d->cap_ids);
    }
    if (sentences + 1 > d->cap_sent) {
        d->cap_sent = 2 * (sentences + 1);
        d->start = realloc(d->start, sizeof(long) * (size_t)d->cap_sent);
        check_alloc(d->start, sizeof(long) * (size_t)d->cap_sent);
    }
}

static void append_sentences(int **buf, int *cap, int *len, const token_doc *d, int from, int to) {
    int need = *len + (int)(d->start[to] - d->start[from]);
    if (need > *cap) {
        *cap = 2 * need;
        *buf = realloc(*buf, sizeof(int) * (size_t)*cap);
        check_alloc(*buf, sizeof(int) * (size_t)*cap);
    }
    memcpy(*buf + *len, d->ids + d->start[from], sizeof(int) * (size_t)(need - *len));
    *len = need;
}

// A row [CLS] a [SEP] b [SEP] (segments 0 then 1; lb < 0: [CLS] a [SEP] alone), masked.
// starts[0..n_starts): the row positions where its later documents begin (the [CLS] of each
// piece after the first), its document_starts after the 0 of the first; n_starts 0: one document.
static void emit_instance(const instance_rules *ru, instances_t *out, const int *a, int la, const int *b, int lb,
                          int is_random, const int *starts, int n_starts, rng_stream *r, int *scratch) {
    int S = ru->seq_length, P = ru->max_predictions;
    instances_reserve(out, S, P, out->rows.B + 1);
    int k = out->rows.B++;
    int *ids = out->rows.input_ids + (size_t)k * S, *mask = out->rows.input_mask + (size_t)k * S;
    int *seg = out->rows.segment_ids + (size_t)k * S;
    int t = 0;
    ids[t] = ru->mp->cls_id, seg[t++] = 0;
    for (int i = 0; i < la; i++) ids[t] = a[i], seg[t++] = 0;
    ids[t] = ru->mp->sep_id, seg[t++] = 0;
    if (lb >= 0) {
        for (int i = 0; i < lb; i++) ids[t] = b[i], seg[t++] = 1;
        ids[t] = ru->mp->sep_id, seg[t++] = 1;
    }
    for (int i = 0; i < S; i++) mask[i] = i < t;
    for (int i = t; i < S; i++) ids[i] = ru->mp->pad_id, seg[i] = 0;
    int *doc = out->rows.document_starts + (size_t)k * S;
    memset(doc, 0, sizeof(int) * S);
    for (int i = 0; i < n_starts; i++) doc[1 + i] = starts[i];
    // The masking takes the ids alone: [CLS] and [SEP] are never candidates, wherever in the row
    // (the inner ones of separate documents too), and a whole word never spans them.
    int masked = masking_apply(ru->mp, r, ids, t, out->rows.masked_lm_positions + (size_t)k * P,
                               out->rows.masked_lm_ids + (size_t)k * P, scratch);
    out->rows.next_sentence_labels[k] = is_random;
    out->real_tokens += t;
    out->masked += masked;
    out->unmasked_rows += masked == 0;
}

// RoBERTa's FULL-SENTENCES or DOC-SENTENCES, or contiguous blocks (prep.h).
void instances_pack(const instance_rules *ru, const token_doc *docs, const char *is_eval, int n_docs, int eval,
                    rng_stream *r, instance_scratch *w, instances_t *out) {
    prep_packing packing = ru->packing;
    int room = ru->seq_length - 2, len = 0, pending_sep = 0, cross = packing != PREP_DOC_SENTENCES;
    // A document boundary inside a row is a [SEP] (one stream of text), or with separate
    // documents [SEP] [CLS]: each piece of a document is its own [CLS] ... [SEP], its [CLS]
    // recorded as a document start. A piece holds at least one token, so a row holds at most
    // seq_length / 3 of them (the shards' document_starts columns).
    int separate = ru->separate_documents, boundary = separate ? 2 : 1, n_starts = 0;
    int *starts = separate ? xmalloc(sizeof(int) * (size_t)(ru->seq_length / 3 + 1)) : NULL;
    if (w->cap_a < room) {
        w->cap_a = room;
        w->a = realloc(w->a, sizeof(int) * (size_t)w->cap_a);
        check_alloc(w->a, sizeof(int) * (size_t)w->cap_a);
    }
    int *row = w->a;
#define EMIT_ROW()                                                                                    \
    (emit_instance(ru, out, row, len, NULL, -1, 0, starts, n_starts, r, w->mask_scratch), len = 0, \
     pending_sep = 0, n_starts = 0)
    for (int i = 0; i < n_docs; i++) {
        const token_doc *d = &docs[i];
        if (d->n_sent == 0 || is_eval[i] != eval) continue;
        pending_sep = len > 0;  // a row carried over from the document before: a boundary between them
        for (int k = 0; k < d->n_sent; k++) {
            const int *s = d->ids + d->start[k];
            int n = sentence_len(d, k);
            // Full (or room for the boundary but no token after it: a [SEP] would separate
            // nothing, a [CLS] [SEP] piece would be empty), or, whole sentences per row, no room
            // for this one.
            if (packing == PREP_CONTIGUOUS ? len + pending_sep * boundary >= room
                                           : len > 0 && len + pending_sep * boundary + n > room)
                EMIT_ROW();
            if (pending_sep) {
                row[len++] = ru->mp->sep_id;
                // The [CLS] at row position len (row[] follows the row's own [CLS]).
                if (separate) row[len++] = ru->mp->cls_id, starts[n_starts++] = len;
                pending_sep = 0;
            }
            while (n > 0) {  // a sentence longer than the room left: cut where the row fills
                int take = n < room - len ? n : room - len;
                memcpy(row + len, s, sizeof(int) * (size_t)take);
                len += take, s += take, n -= take;
                if (n > 0) EMIT_ROW();
            }
        }
        if (!cross && len > 0) EMIT_ROW();
    }
    if (len > 0) EMIT_ROW();
#undef EMIT_ROW
    free(starts);
}

// google-research/bert's create_instances_from_document.
long instances_pairs(const instance_rules *ru, const token_doc *docs, int doc, const int *pool, int n_pool,
                     rng_stream *r, instance_scratch *w, instances_t *out) {
    const token_doc *d = &docs[doc];
    int max_tokens = ru->seq_length - 3;
    int target = max_tokens;
    if (rng_uniform(r) < ru->short_seq_prob) target = rng_range(r, 2, max_tokens);
    int cur_start = 0, cur_len = 0;
    long dropped = 0;
    for (int i = 0; i < d->n_sent; i++) {
        cur_len += sentence_len(d, i);
        if (i != d->n_sent - 1 && cur_len < target) continue;
        int n_cur = i + 1 - cur_start;
        int a_end = n_cur >= 2 ? rng_range(r, 1, n_cur - 1) : 1;
        int la = 0, lb = 0, is_random;
        append_sentences(&w->a, &w->cap_a, &la, d, cur_start, cur_start + a_end);
        // google's script always gives a one-sentence chunk a random next segment, which
        // skews the labels towards 1 on text with long sentences; here such a sentence is
        // split at a random token into A and its actual continuation B half of the time.
        is_random = n_cur == 1 ? la < 2 || rng_uniform(r) < 0.5 : rng_uniform(r) < 0.5;
        if (is_random) {
            int target_b = target - la;
            int other = doc;
            for (int tries = 0; tries < 10 && other == doc; tries++) other = pool[rng_range(r, 0, n_pool - 1)];
            const token_doc *od = &docs[other];
            int from = rng_range(r, 0, od->n_sent - 1);
            for (int k = from; k < od->n_sent; k++) {
                append_sentences(&w->b, &w->cap_b, &lb, od, k, k + 1);
                if (lb >= target_b) break;
            }
            // The segments not used for A go back to the document for the next instance.
            i -= n_cur - a_end;
        } else if (n_cur == 1) {
            int cut = rng_range(r, 1, la - 1);
            lb = la - cut;
            if (lb > w->cap_b) {
                w->cap_b = 2 * lb;
                w->b = realloc(w->b, sizeof(int) * (size_t)w->cap_b);
                check_alloc(w->b, sizeof(int) * (size_t)w->cap_b);
            }
            memcpy(w->b, w->a + cut, sizeof(int) * (size_t)lb);
            la = cut;
        } else {
            append_sentences(&w->b, &w->cap_b, &lb, d, cur_start + a_end, i + 1);
        }
        int own = la + (is_random ? 0 : lb);  // a random B is another document's filler
        // Truncate the longer segment, from a random end, until the pair fits.
        int a_lo = 0, b_lo = 0;
        while (la + lb > max_tokens) {
            int trunc_a = la > lb;
            int front = rng_uniform(r) < 0.5;
            if (trunc_a) a_lo += front, la--;
            else b_lo += front, lb--;
        }
        int emitted = la >= 1 && lb >= 1;
        if (emitted)
            emit_instance(ru, out, w->a + a_lo, la, w->b + b_lo, lb, is_random, NULL, 0, r, w->mask_scratch);
        dropped += own - (emitted ? la + (is_random ? 0 : lb) : 0);
        cur_start = i + 1;
        cur_len = 0;
    }
    return dropped;
}

void instances_shuffle(instances_t *in, rng_stream *r) {
    for (int i = 0; i < in->rows.B; i++) in->perm[i] = i;
    for (int i = in->rows.B - 1; i > 0; i--) {
        int j = rng_range(r, 0, i), t = in->perm[i];
        in->perm[i] = in->perm[j];
        in->perm[j] = t;
    }
}
