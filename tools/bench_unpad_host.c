// The host time per micro-batch of unpadded training (train.unpad): the input preparation
// that bert_forward runs before its uploads (bert_unpad_rows: each row's count of ones in
// input_mask, the sequence offsets, the compacted ids, segments and positions, the dropout
// row map), unpadded against padded, on micro-batches whose lengths are drawn from a
// histogram file ('LENGTH COUNT' lines, as docs/lengths/ holds). Also counts the distinct
// real-token counts N_real (one cuBLASLt plan per token-wise GEMM each, on a GPU) a run of
// a given number of micro-batches meets. A benchmark (meson's `benchmark`), not a test:
//   bench_unpad_host LENGTHS B T [--batches N] [--reps N] [--draws N]
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "data/batch.h"
#include "engine/model.h"
#include "kernels/common/check.h"
#include "kernels/common/clock.h"

// CPU seconds of this thread: not inflated when other work shares the core.
static double thread_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// The histogram as a cumulative table over lengths 0..T: cum[l] = rows of length <= l.
static uint64_t *read_lengths(const char *path, int T) {
    FILE *f = fopen(path, "r");
    if (!f) fatal("%s: cannot open the length histogram", path);
    uint64_t *cum = xcalloc((size_t)T + 1, sizeof(uint64_t));
    char line[256];
    for (int n = 1; fgets(line, sizeof line, f); n++) {
        if (line[0] == '#' || line[0] == '\n') continue;
        long len;
        unsigned long long count;
        if (sscanf(line, "%ld %llu", &len, &count) != 2)
            fatal("%s:%d: expected 'LENGTH COUNT', got \"%.*s\"", path, n, (int)strcspn(line, "\n"), line);
        if (len < 1 || len > T) fatal("%s:%d: length %ld is outside [1, %d] (the sequence length T)", path, n, len, T);
        cum[len] += count;
    }
    fclose(f);
    for (int l = 1; l <= T; l++) cum[l] += cum[l - 1];
    if (cum[T] == 0) fatal("%s: no rows in the length histogram", path);
    return cum;
}

static int draw_length(const uint64_t *cum, int T, uint64_t *rng) {
    uint64_t r = splitmix64(rng) % cum[T];
    int lo = 1, hi = T;  // the first length whose cumulative count exceeds r
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cum[mid] > r) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

static int compare_ints(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s LENGTHS B T [--batches N] [--reps N] [--draws N]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    int B = atoi(argv[2]), T = atoi(argv[3]), batches = 64, reps = 7;
    long draws = 225000;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batches")) batches = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--draws")) draws = atol(argv[i + 1]);
        else fatal("unknown option %s", argv[i]);
    }
    if (B < 1 || T < 1 || batches < 1 || reps < 1 || draws < 1)
        fatal("B = %d, T = %d, --batches %d, --reps %d, --draws %ld: each must be at least 1", B, T, batches, reps,
              draws);
    uint64_t *cum = read_lengths(path, T);
    uint64_t rng = 12345;
    size_t N = (size_t)B * T;

    // The micro-batches: each row's real tokens first (mask ones), then padding.
    batch_t *mb = xcalloc(batches, sizeof(batch_t));
    long real = 0;
    for (int i = 0; i < batches; i++) {
        mb[i] = (batch_t){.B = B, .T = T, .P = 0};
        mb[i].input_ids = xcalloc(N, sizeof(int));
        mb[i].input_mask = xcalloc(N, sizeof(int));
        mb[i].segment_ids = xcalloc(N, sizeof(int));
        mb[i].document_starts = xcalloc(N, sizeof(int));  // one document per row
        for (int b = 0; b < B; b++) {
            int len = draw_length(cum, T, &rng);
            real += len;
            for (int t = 0; t < T; t++) {
                mb[i].input_ids[b * T + t] = t < len ? 5 + (int)(splitmix64(&rng) % 8000) : 0;
                mb[i].input_mask[b * T + t] = t < len;
                mb[i].segment_ids[b * T + t] = t < len && t >= len / 2;
            }
        }
    }
    int *off = xcalloc((size_t)B + 1, sizeof(int)), *ids = xcalloc(N, sizeof(int)), *seg = xcalloc(N, sizeof(int)),
        *pos = xcalloc(N, sizeof(int)), *row_map = xcalloc(N, sizeof(int));

    // Best of `reps` passes over the micro-batches, padded and unpadded, one core.
    const unpad_mode modes[2] = {UNPAD_OFF, UNPAD_ON};
    double best_wall[2] = {1e30, 1e30}, best_cpu[2] = {1e30, 1e30};
    long checked = 0;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < 2; k++) {
            double w0 = now_seconds(), c0 = thread_seconds();
            long rows = 0;
            for (int i = 0; i < batches; i++) {
                int packed = bert_unpad_rows(&mb[i], modes[k], off, ids, seg, pos, row_map);
                rows += packed ? off[B] : (long)N;
            }
            double w = (now_seconds() - w0) / batches, c = (thread_seconds() - c0) / batches;
            if (w < best_wall[k]) best_wall[k] = w;
            if (c < best_cpu[k]) best_cpu[k] = c;
            if (k == 1) checked = rows;
        }
    if (checked != real)
        fatal("the unpadded micro-batches hold %ld rows where their lengths add up to %ld", checked, real);

    // Distinct real-token counts over `draws` micro-batches (lengths only).
    int *counts = xcalloc(draws, sizeof(int));
    for (long i = 0; i < draws; i++) {
        int n = 0;
        for (int b = 0; b < B; b++) n += draw_length(cum, T, &rng);
        counts[i] = n;
    }
    qsort(counts, draws, sizeof(int), compare_ints);
    long distinct = 0;
    for (long i = 0; i < draws; i++) distinct += i == 0 || counts[i] != counts[i - 1];

    printf("bench unpad_host: %s, micro-batch %d x %d, %d micro-batches, best of %d\n", path, B, T, batches, reps);
    printf("  real-token fraction %.3f (mean N_real %.0f of %zu)\n", (double)real / ((double)batches * N),
           (double)real / batches, N);
    printf("  input preparation per micro-batch: padded %.1f us (CPU %.1f), unpadded %.1f us (CPU %.1f), "
           "added %.1f us\n",
           1e6 * best_wall[0], 1e6 * best_cpu[0], 1e6 * best_wall[1], 1e6 * best_cpu[1],
           1e6 * (best_wall[1] - best_wall[0]));
    printf("  distinct N_real over %ld micro-batches: %ld (range %d..%d)\n", draws, distinct, counts[0],
           counts[draws - 1]);
    for (int i = 0; i < batches; i++) {
        free(mb[i].input_ids);
        free(mb[i].input_mask);
        free(mb[i].segment_ids);
        free(mb[i].document_starts);
    }
    free(mb);
    free(off), free(ids), free(seg), free(pos), free(row_map), free(counts), free(cum);
    return 0;
}
