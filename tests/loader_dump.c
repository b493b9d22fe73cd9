// Prints what the loader delivers, for the Python tests that compare it with h5py and feed
// it bad files: usage: loader_dump SPEC BATCH_SIZE VOCAB BATCHES SHUFFLE [RANK WORLD]
// One line per sequence: input_ids | input_mask | segment_ids | masked_lm_positions |
// masked_lm_ids | next_sentence_label. Without HDF5 support it exits 77 (skip).
#include <stdio.h>
#include <stdlib.h>
#include "bertpre_config.h"

#if !BERTPRE_HAVE_HDF5
int main(void) {
    printf("SKIP: bertpre was built without HDF5 (libhdf5-dev not found)\n");
    return 77;
}
#else
#include "data/loader.h"
#include "data/synthetic.h"

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
    return 0;
}
#endif
