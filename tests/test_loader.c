// The loader's sampling contract on shards written by data/shard.c, with each row carrying
// its global sample number in input_ids[1..2]:
// - partition: for world sizes 1-8 and shard counts 1-10, the ranks' slices of an epoch
//   are disjoint and together hold every sample exactly once (also with fewer shards than
//   ranks), and the order is a permutation that changes from epoch to epoch;
// - resume: a loader set to a stored cursor yields exactly the batches that the original
//   loader yields after that point (mid-epoch and across the epoch end, with and without
//   the prefetch thread);
// - dynamic masking: fresh masks per epoch that restore to the stored tokens, never on
//   [CLS]/[SEP], 15% of the tokens;
// - document starts: a shard with the dataset document_starts (S / 3 columns) beside one
//   without: every batch row carries its stored starts widened to S columns (batch_documents
//   counts them), zeros for the rows of the other shard, shuffled, with and without the
//   prefetch thread and dynamic masking.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "bertpre_config.h"
#include "kernels/common/check.h"
#include "tests/test_util.h"

#if !BERTPRE_HAVE_HDF5
int main(void) {
    printf("SKIP: bertpre was built without HDF5 (libhdf5-dev not found), so there is no loader to test\n");
    return 77;
}
#else
#include "data/loader.h"
#include "data/shard.h"
#include "data/synthetic.h"

enum { S = 16, P = 3, VOCAB = 2000 };

static int sample_of(const batch_t *b, int i) {
    return (b->input_ids[i * S + 1] - 5) + 1000 * (b->input_ids[i * S + 2] - 5);
}

// Shard sizes: varied, some spanning several loader blocks.
static long shard_rows(int s) { return 1 + (s * 397 + 131) % 700; }

// The document starts of sample `sample` in a shard that stores them: one, two or three
// documents (0, then starts on either side of the [SEP] at S / 2), zeros after.
static void sample_starts(long sample, int *starts) {
    memset(starts, 0, sizeof(int) * S);
    if (sample % 4 == 0) return;
    starts[1] = 4 + (int)(sample % 3);
    if (sample % 4 >= 2) starts[2] = 10 + (int)(sample % 5);
}

// n rows numbered from `sample` on; D > 0: with document_starts of D columns (sample_starts).
static void write_shard(const char *path, long sample, long n, int D) {
    shard_writer *w = shard_writer_create(path, S, P, D, 1);
    batch_t b;
    batch_alloc(&b, (int)n, S, P);
    for (long r = 0; r < n; r++, sample++) {
        int *ids = b.input_ids + r * S;
        ids[0] = SYNTH_CLS;
        ids[1] = 5 + (int)(sample % 1000);
        ids[2] = 5 + (int)(sample / 1000);
        for (int t = 3; t < S - 1; t++) ids[t] = 5 + (int)((sample * 7 + t) % (VOCAB - 5));
        ids[S - 1] = SYNTH_SEP;
        for (int t = 0; t < S; t++) b.input_mask[r * S + t] = 1, b.segment_ids[r * S + t] = t > S / 2;
        ids[S / 2] = SYNTH_SEP;
        // Stored masking: position 4 holds [MASK], its original id in masked_lm_ids.
        b.masked_lm_positions[r * P] = 4;
        b.masked_lm_ids[r * P] = ids[4];
        ids[4] = SYNTH_MASK;
        b.next_sentence_labels[r] = (int)(sample & 1);
        if (D) sample_starts(sample, b.document_starts + r * S);
    }
    for (int r = 0; r < (int)n; r++) shard_writer_append(w, &b, r);
    shard_writer_close(w);
    batch_free(&b);
}

static void write_shards(const char *dir, int n_shards) {
    long sample = 0;
    for (int s = 0; s < n_shards; s++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/part-%05d.hdf5", dir, s);
        write_shard(path, sample, shard_rows(s), 0);
        sample += shard_rows(s);
    }
}

static loader_options options(int B, int rank, int world, int prefetch) {
    return (loader_options){.batch_size = B, .rank = rank, .world_size = world, .seed = 7, .vocab_size = VOCAB,
                            .shuffle = 1, .prefetch = prefetch, .check_on_open = 1,
                            .masking = synth_masking(VOCAB, MASK_PROB_DEFAULT, P)};
}

// The first `count` samples of a rank's stream (batches of B).
static void read_stream(loader *l, int B, long count, int *out) {
    batch_t b;
    batch_alloc(&b, B, S, P);
    for (long k = 0; k < count;) {
        loader_next_batch(l, &b);
        for (int i = 0; i < B && k < count; i++) out[k++] = sample_of(&b, i);
    }
    batch_free(&b);
}

static void test_partition(const char *dir) {
    int bad = 0, combos = 0;
    for (int n_shards = 1; n_shards <= 10; n_shards++) {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/p%d", dir, n_shards);
        mkdir(sub, 0777);
        write_shards(sub, n_shards);
        long N = 0;
        for (int s = 0; s < n_shards; s++) N += shard_rows(s);
        int *seen = xcalloc((size_t)N, sizeof(int));
        int *epoch0 = xcalloc((size_t)N, sizeof(int)), *epoch1 = xcalloc((size_t)N, sizeof(int));
        for (int world = 1; world <= 8; world++) {
            combos++;
            memset(seen, 0, sizeof(int) * (size_t)N);
            long total = 0, changed = 0;
            for (int rank = 0; rank < world; rank++) {
                loader_options o = options(5, rank, world, rank % 2 ? 2 : 0);
                loader *l = loader_open(sub, &o);
                long share = loader_rank_samples(l);
                int *stream = xcalloc((size_t)(2 * share), sizeof(int));
                read_stream(l, 5, 2 * share, stream);
                for (long k = 0; k < share; k++) {
                    if (stream[k] < 0 || stream[k] >= N) bad++;
                    else seen[stream[k]]++;
                    epoch0[total + k] = stream[k];
                    epoch1[total + k] = stream[share + k];
                    changed += stream[k] != stream[share + k];
                }
                total += share;
                if (share < N / world || share > N / world + 1) bad++;
                free(stream);
                loader_close(l);
            }
            for (long i = 0; i < N; i++) bad += seen[i] != 1;
            if (total != N) bad++;
            // Epoch 1 is again a permutation of all samples, in another order (when N > 1).
            memset(seen, 0, sizeof(int) * (size_t)N);
            for (long i = 0; i < N; i++)
                if (epoch1[i] >= 0 && epoch1[i] < N) seen[epoch1[i]]++;
            for (long i = 0; i < N; i++) bad += seen[i] != 1;
            if (N > 8 && changed == 0) bad++;
            (void)epoch0;
        }
        free(seen);
        free(epoch0);
        free(epoch1);
    }
    char what[128];
    snprintf(what, sizeof what, "partition: %d (world size, shard count) pairs disjoint, complete, reshuffled", combos);
    expect_true(what, bad == 0);
}

static int batches_equal(const batch_t *a, const batch_t *b) {
    return !memcmp(a->input_ids, b->input_ids, sizeof(int) * a->B * S) &&
           !memcmp(a->input_mask, b->input_mask, sizeof(int) * a->B * S) &&
           !memcmp(a->segment_ids, b->segment_ids, sizeof(int) * a->B * S) &&
           !memcmp(a->masked_lm_positions, b->masked_lm_positions, sizeof(int) * a->B * P) &&
           !memcmp(a->masked_lm_ids, b->masked_lm_ids, sizeof(int) * a->B * P) &&
           !memcmp(a->next_sentence_labels, b->next_sentence_labels, sizeof(int) * a->B);
}

static void test_resume(const char *dir, int dynamic) {
    char sub[512];
    snprintf(sub, sizeof sub, "%s/p3", dir);
    for (int prefetch_a = 0; prefetch_a <= 3; prefetch_a += 3) {
        int B = 7, before = 40, after = 150;  // the rank's share is ~550: 'after' crosses an epoch end
        loader_options oa = options(B, 1, 3, prefetch_a), ob = options(B, 1, 3, 3 - prefetch_a);
        oa.dynamic_masking = ob.dynamic_masking = dynamic;
        loader *a = loader_open(sub, &oa);
        batch_t x, y;
        batch_alloc(&x, B, S, P);
        batch_alloc(&y, B, S, P);
        for (int i = 0; i < before; i++) loader_next_batch(a, &x);
        loader_cursor c = loader_cursor_get(a);
        loader *b = loader_open(sub, &ob);
        loader_next_batch(b, &y);  // b has read ahead; the cursor must override that
        loader_cursor_set(b, c);
        int same = 1;
        for (int i = 0; i < after; i++) {
            loader_next_batch(a, &x);
            loader_next_batch(b, &y);
            same &= batches_equal(&x, &y);
        }
        loader_cursor ca = loader_cursor_get(a), cb = loader_cursor_get(b);
        char what[160];
        snprintf(what, sizeof what, "resume%s: %d batches after a cursor (epoch %lld, position %lld), prefetch %d/%d",
                 dynamic ? " with dynamic masking" : "", after, (long long)c.epoch, (long long)c.position,
                 prefetch_a, 3 - prefetch_a);
        expect_true(what, same && ca.epoch == cb.epoch && ca.position == cb.position && ca.epoch >= 1);
        batch_free(&x);
        batch_free(&y);
        loader_close(a);
        loader_close(b);
    }
}

static void test_dynamic_masking(const char *dir) {
    char sub[512];
    snprintf(sub, sizeof sub, "%s/p10", dir);
    loader_options o = options(1, 0, 1, 0);
    o.dynamic_masking = 1;
    loader *l = loader_open(sub, &o);
    long N = loader_samples(l);
    int *first_mask = xcalloc((size_t)N * P, sizeof(int));
    batch_t b;
    batch_alloc(&b, 1, S, P);
    long masked = 0, tokens = 0, as_mask = 0, kept = 0, on_special = 0, bad_restore = 0, differ = 0;
    for (int epoch = 0; epoch < 2; epoch++)
        for (long k = 0; k < N; k++) {
            loader_next_batch(l, &b);
            int ids[S];
            memcpy(ids, b.input_ids, sizeof ids);
            for (int p = 0; p < P && b.masked_lm_positions[p]; p++) {
                int pos = b.masked_lm_positions[p], orig = b.masked_lm_ids[p];
                masked++;
                as_mask += ids[pos] == SYNTH_MASK;
                kept += ids[pos] == orig;
                on_special += orig == SYNTH_CLS || orig == SYNTH_SEP || pos == 0;
                ids[pos] = orig;
            }
            batch_t restored = b;
            restored.input_ids = ids;
            long s = sample_of(&restored, 0);
            // Restored, the sequence is the stored one: sample tokens at 3.., [SEP]s in place.
            for (int t = 3; t < S - 1; t++)
                if (t != S / 2 && ids[t] != 5 + (int)((s * 7 + t) % (VOCAB - 5)) && t != 4) bad_restore++;
            if (ids[S / 2] != SYNTH_SEP || ids[S - 1] != SYNTH_SEP) bad_restore++;
            tokens += S;
            if (epoch == 0) memcpy(first_mask + s * P, b.masked_lm_positions, sizeof(int) * P);
            else differ += memcmp(first_mask + s * P, b.masked_lm_positions, sizeof(int) * P) != 0;
        }
    double rate = (double)masked / tokens, mask_share = (double)as_mask / masked, keep_share = (double)kept / masked;
    printf("     dynamic masking: %ld masked of %ld tokens (%.4f), [MASK] %.3f, kept %.3f, %ld of %ld samples "
           "re-masked differently in epoch 1\n",
           masked, tokens, rate, mask_share, keep_share, differ, N);
    // round(16 * 0.15) = 2 of 16 tokens = 0.125 per sequence: the rounding of the reference script.
    expect_true("dynamic masking: round(0.15 x 16) = 2 positions per sequence", masked == 2 * tokens / S);
    // Tolerance: binomial sampling error over ~2 x 4,800 draws is below 0.01.
    expect_true("dynamic masking: 80% [MASK] (+-2%), 10% kept (+-2%)",
                mask_share > 0.78 && mask_share < 0.82 && keep_share > 0.08 && keep_share < 0.12);
    expect_true("dynamic masking: [CLS]/[SEP] never masked", on_special == 0);
    expect_true("dynamic masking: restoring the masks gives the stored tokens", bad_restore == 0);
    expect_true("dynamic masking: masks change between epochs", differ > N / 2);
    free(first_mask);
    batch_free(&b);
    loader_close(l);
}

static void test_document_starts(const char *dir) {
    char sub[512], with[600], without[600];
    snprintf(sub, sizeof sub, "%s/docs", dir);
    mkdir(sub, 0777);
    long n_with = 600, n_without = 300;
    snprintf(with, sizeof with, "%s/a-with.hdf5", sub);
    snprintf(without, sizeof without, "%s/b-without.hdf5", sub);
    write_shard(with, 0, n_with, S / 3);
    write_shard(without, n_with, n_without, 0);
    for (int variant = 0; variant < 4; variant++) {
        int prefetch = variant & 1 ? 3 : 0, dynamic = variant >= 2, B = 7;
        loader_options o = options(B, 0, 1, prefetch);
        o.dynamic_masking = dynamic;
        loader *l = loader_open(sub, &o);
        batch_t b;
        batch_alloc(&b, B, S, P);
        long rows = 0, wrong = 0, several = 0, documents = 0, from_with = 0;
        for (long k = 0; k < 2 * (n_with + n_without) / B; k++) {
            loader_next_batch(l, &b);
            // The sample number as stored (dynamic masking may have masked its tokens).
            for (int i = 0; i < B; i++) masking_restore(b.input_ids + i * S, b.masked_lm_positions + i * P,
                                                        b.masked_lm_ids + i * P, P);
            for (int i = 0; i < B; i++, rows++) {
                long sample = sample_of(&b, i);
                int want[S];
                if (sample < n_with) sample_starts(sample, want), from_with++;
                else memset(want, 0, sizeof want);
                int n_docs = 1;
                while (n_docs < S && want[n_docs]) n_docs++;
                wrong += memcmp(b.document_starts + i * S, want, sizeof want) != 0 || batch_documents(&b, i) != n_docs;
                several += n_docs > 1;
                documents += batch_documents(&b, i);
            }
        }
        char what[240];
        snprintf(what, sizeof what, "document starts%s%s: %ld rows (%ld from the shard that stores them, %ld of "
                 "several documents, %ld documents) keep their stored starts, zeros from the other shard",
                 prefetch ? ", prefetch" : "", dynamic ? ", dynamic masking" : "", rows, from_with, several, documents);
        expect_true(what, wrong == 0 && several > rows / 3 && from_with > rows / 2 && from_with < rows);
        batch_free(&b);
        loader_close(l);
    }
}

int main(void) {
    char dir[] = "/tmp/bertpre-test-loader-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_partition(dir);
    test_resume(dir, 0);
    test_resume(dir, 1);
    test_dynamic_masking(dir);
    test_document_starts(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", dir);
    printf("%s\n", test_failures ? "FAILED" : "all passed");
    return test_failures ? 1 : 0;
}
#endif
