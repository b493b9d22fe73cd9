// `bertpre bench data`: throughput of the data pipeline. Runs prep on the given text into
// a work directory (MB/s of text), then reads the shards back through the loader as the
// training loop would (batches/s and sequences/s, with stored and with dynamic masks),
// and compares the loader with a GPU that consumes 2,500 sequences/s (BERT-large, seq 128,
// on an H100: docs/ARCHITECTURE.md §9).
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "bertpre_config.h"
#include "cli/commands.h"
#include "kernels/common/check.h"

static const char *usage_bench =
    "usage: bertpre bench data --tokenizer FILE.model [options] INPUT...\n"
    "\n"
    "Measures prep (MB/s of text) on INPUT, then the loader (batches/s) on the shards written.\n"
    "  --format lines|text, --doc-per file|block, --pattern GLOB   as for 'bertpre prep'\n"
    "  --threads N       prep threads (default 2)\n"
    "  --work DIR        where the shards go (default: a new directory under /tmp, removed after)\n"
    "  --batch-size N    loader micro-batch (default 64)    --seq-length N (default 128)\n"
    "  --batches N       batches timed per loader run (default 2000)\n";

#if BERTPRE_HAVE_HDF5 && BERTPRE_HAVE_SENTENCEPIECE
#include <dirent.h>
#include <stdlib.h>
#include <sys/resource.h>
#include "data/loader.h"
#include "data/prep.h"
#include "data/synthetic.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// CPU seconds of the whole process (all threads): unlike wall time, not inflated when other
// work shares the cores.
static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static void bench_loader(const char *dir, int B, int S, int P, int batches, int dynamic, int vocab) {
    loader_options lo = {.batch_size = B, .rank = 0, .world_size = 1, .seed = 1, .vocab_size = vocab,
                         .seq_length = S, .max_predictions = P, .shuffle = 1, .prefetch = 4,
                         .dynamic_masking = dynamic,
                         .masking = {0.15, P, 2, 3, 0, 4, 5, vocab}};
    loader *l = loader_open(dir, &lo);
    batch_t b;
    batch_alloc(&b, B, S, P);
    double t0 = now_seconds(), c0 = cpu_seconds();
    for (int i = 0; i < batches; i++) loader_next_batch(l, &b);
    double dt = now_seconds() - t0, cpu = cpu_seconds() - c0;
    double seq_s = (double)batches * B / dt;
    printf("bench loader (%s masks): %d batches of %d x %d from %ld samples in %d shard(s): %.1f batches/s, "
           "%.0f sequences/s = %.1fx the 2,500 sequences/s a GPU consumes; %.1f us of CPU per batch\n",
           dynamic ? "dynamic" : "stored", batches, B, S, loader_samples(l), loader_shard_count(l), batches / dt,
           seq_s, seq_s / 2500.0, 1e6 * cpu / batches);
    batch_free(&b);
    loader_close(l);
}

int cmd_bench(int argc, char **argv) {
    if (argc < 1 || strcmp(argv[0], "data") != 0) {
        if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
            fputs(usage_bench, stdout);
            return 0;
        }
        fatal("bench: expected 'bench data'\n%s", usage_bench);
    }
    prep_options o = {.prefix = "train", .shards = 4, .seq_length = 128, .max_predictions = 20,
                      .masked_lm_prob = 0.15, .short_seq_prob = 0.1, .dupe_factor = 5, .seed = 12345, .threads = 2,
                      .chunk_bytes = 1000000, .gzip_level = 4, .text = {TEXT_SENTENCE_LINES, 1}};
    const char *work = NULL;
    int B = 64, batches = 2000;
    char **inputs = xcalloc((size_t)argc, sizeof(char *));
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_bench, stdout);
            return 0;
        } else if (!strcmp(a, "--tokenizer")) o.tokenizer_model = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--work")) work = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--pattern")) o.pattern = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--threads")) o.threads = cli_int(a, cli_value(argc, argv, &i), 1, 1024);
        else if (!strcmp(a, "--batch-size")) B = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 16);
        else if (!strcmp(a, "--seq-length")) o.seq_length = cli_int(a, cli_value(argc, argv, &i), 5, 1 << 16);
        else if (!strcmp(a, "--batches")) batches = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 30);
        else if (!strcmp(a, "--format")) {
            const char *v = cli_value(argc, argv, &i);
            if (strcmp(v, "lines") && strcmp(v, "text")) fatal("option --format: '%s' is not lines or text", v);
            o.text.format = !strcmp(v, "text") ? TEXT_PLAIN : TEXT_SENTENCE_LINES;
        } else if (!strcmp(a, "--doc-per")) {
            const char *v = cli_value(argc, argv, &i);
            if (strcmp(v, "file") && strcmp(v, "block")) fatal("option --doc-per: '%s' is not file or block", v);
            o.text.doc_per_file = !strcmp(v, "file");
        }
        else if (a[0] == '-') fatal("bench data: unknown option '%s'\n%s", a, usage_bench);
        else inputs[n++] = argv[i];
    }
    if (!o.tokenizer_model || n == 0) fatal("bench data: --tokenizer and at least one INPUT are required\n%s", usage_bench);
    char tmp[] = "/tmp/bertpre-bench-XXXXXX";
    int own = !work;
    if (own) {
        check_file(mkdtemp(tmp), tmp, "mkdtemp");
        work = tmp;
    }
    o.output_dir = work;
    o.inputs = inputs;
    o.n_inputs = n;
    o.world_size = 1;
    double c0 = cpu_seconds();
    prep_stats s = prep_run(&o);
    double cpu = cpu_seconds() - c0;
    printf("bench prep: %.1f MB of text, %ld documents, %ld tokens -> %ld instances (seq %d, dupe %d) in %.2f s "
           "with %d threads: %.2f MB/s; %.2f CPU s = %.2f MB per CPU second\n",
           s.text_bytes / 1e6, s.documents, s.tokens, s.train_instances, o.seq_length, o.dupe_factor, s.seconds,
           o.threads, s.text_bytes / 1e6 / s.seconds, cpu, s.text_bytes / 1e6 / cpu);
    fflush(stdout);
    bench_loader(work, B, o.seq_length, o.max_predictions, batches, 0, s.vocab_size);
    bench_loader(work, B, o.seq_length, o.max_predictions, batches, 1, s.vocab_size);
    if (own) remove_dir(work);
    free(inputs);
    return 0;
}
#else
int cmd_bench(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        fputs(usage_bench, stdout);
        return 0;
    }
    fatal("bench: this bertpre was built without HDF5 or SentencePiece (install libhdf5-dev and "
          "libsentencepiece-dev, then rebuild)");
}
#endif
