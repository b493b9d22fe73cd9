// Prints what the loader delivers, for the Python tests that compare it with h5py and feed
// it bad files: usage: loader_dump SPEC BATCH_SIZE VOCAB BATCHES SHUFFLE [RANK WORLD]
// One line per sequence: input_ids | input_mask | segment_ids | masked_lm_positions |
// masked_lm_ids | next_sentence_label. Without HDF5 support it exits 77 (skip).
// With LOADER_DUMP_MASKING=TOKENIZER:PROB:P[:wwm] in the environment, the loader masks
// dynamically (train.dynamic_masking) at rate PROB into P columns with TOKENIZER's special ids
// (and whole words with wwm: train.whole_word_mask), as `bertpre train` does; the stored masks
// are undone first.
#include <stdio.h>
#include <stdlib.h>
#include "bertpre_config.h"

#if !BERTPRE_HAVE_HDF5
int main(void) {
    printf("SKIP: bertpre was built without HDF5 (libhdf5-dev not found)\n");
    return 77;
}
#else
#include <string.h>
#include "data/loader.h"
#include "data/synthetic.h"
#include "kernels/common/check.h"
#include "tokenizer/tokenizer.h"

static void print_ints(const int *v, int n, const char *end) {
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", v[i]);
    fputs(end, stdout);
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 8) {
        fprintf(stderr, "usage: loader_dump SPEC BATCH_SIZE VOCAB BATCHES SHUFFLE [RANK WORLD]\n");
        return 2;
    }
    loader_options o = {.batch_size = atoi(argv[2]), .rank = argc == 8 ? atoi(argv[6]) : 0,
                        .world_size = argc == 8 ? atoi(argv[7]) : 1, .seed = 11, .vocab_size = atoi(argv[3]),
                        .shuffle = atoi(argv[5]), .prefetch = 2, .check_on_open = 1};
    const char *masking = getenv("LOADER_DUMP_MASKING");
    if (masking) {
        char path[1024];
        double prob = 0.0;
        const char *colon = strchr(masking, ':');
        if (!colon || sscanf(colon + 1, "%lf:%d", &prob, &o.max_predictions) != 2)
            fatal("LOADER_DUMP_MASKING = '%s': expected TOKENIZER:PROB:P[:wwm]", masking);
        size_t n = strlen(masking);
        int whole_words = n > 4 && !strcmp(masking + n - 4, ":wwm");
        snprintf(path, sizeof path, "%.*s", (int)(colon - masking), masking);
        tokenizer *tok;
        tokenizer_status s = tokenizer_load(&tok, path);
        if (!s.ok) fatal("%s", s.message);
        o.dynamic_masking = 1;
        o.masking = masking_for_tokenizer(tokenizer_specials(tok), tokenizer_vocab_size(tok), prob, o.max_predictions);
        if (whole_words) masking_whole_words(&o.masking, tok);
        tokenizer_free(tok);
    }
    loader *l = loader_open(argv[1], &o);
    int S = loader_seq_length(l), P = loader_max_predictions(l), batches = atoi(argv[4]);
    batch_t b;
    batch_alloc(&b, o.batch_size, S, P);
    for (int k = 0; k < batches; k++) {
        loader_next_batch(l, &b);
        for (int i = 0; i < b.B; i++) {
            print_ints(b.input_ids + i * S, S, " | ");
            print_ints(b.input_mask + i * S, S, " | ");
            print_ints(b.segment_ids + i * S, S, " | ");
            print_ints(b.masked_lm_positions + i * P, P, " | ");
            print_ints(b.masked_lm_ids + i * P, P, " | ");
            print_ints(b.next_sentence_labels + i, 1, "\n");
        }
    }
    batch_free(&b);
    loader_close(l);
    masking_free(&o.masking);
    return 0;
}
#endif
