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
#include "kernels/common/clock.h"
#include "data/prep.h"
#include "tokenizer/tokenizer.h"

static const char *about_bench =
    "Measures prep (MB/s of text) on INPUT, then the loader (batches/s) on the shards written.\n";
#if BERTPRE_HAVE_HDF5
#include <dirent.h>
#include <stdlib.h>
#include <sys/resource.h>
#include "data/loader.h"
#include "data/masking.h"
#include "data/synthetic.h"
#include "kernels/common/files.h"

// CPU seconds of the whole process (all threads): unlike wall time, not inflated when other
// work shares the cores.
static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

// masking: the tokenizer's special ids (for the dynamic masks).
static void bench_loader(const char *dir, int B, int S, int P, int batches, int dynamic, masking_params masking) {
    int vocab = masking.vocab;
    loader_options lo = {.batch_size = B, .rank = 0, .world_size = 1, .seed = 1, .vocab_size = vocab,
                         .seq_length = S, .max_predictions = P, .shuffle = 1, .prefetch = 4,
                         .dynamic_masking = dynamic, .masking = masking};
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

#endif

static double cpu_thread_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// `bench tokenizer`: encode every line of a text file on this one thread, REPEAT times after
// one untimed pass; the best pass's CPU seconds (of this thread: unaffected by other work on
// the cores) give MB/s and tokens/s.
static int bench_tokenizer(int argc, char **argv) {
    const char *model = NULL;
    int repeat = 3;
    cli_casing casing = {0};
    const cli_option options[] = {
        {"--model", CLI_STRING, &model, "MODEL", .help = "a SentencePiece FILE.model, a WordPiece vocab.txt or a BPE tokenizer.json",
         .required = 1},
        {"--repeat", CLI_INT, &repeat, "N", .help = "timed passes over the text (the best one counts)", 1, 1000},
        CLI_CASING_OPTIONS(casing),
        {NULL},
    };
    const cli_command command = {"bench tokenizer", "bench tokenizer --model MODEL [--repeat N] [casing] TEXT_FILE",
                                 "Encodes each line of TEXT_FILE, one thread; prints MB/s and tokens/s of CPU time.\n",
                                 NULL, options, "TEXT_FILE", 1, 1};
    char *operands[1];
    int n_operands = 0;
    if (cli_parse(&command, argc, argv, operands, &n_operands)) return 0;
    tokenizer_options topt;
    cli_tokenizer_options("bench tokenizer", &casing, &topt.lower_case, &topt.strip_accents);
    tokenizer *tok;
    tokenizer_status s = tokenizer_load_with(&tok, model, &topt);
    if (!s.ok) fatal("bench tokenizer: %s", s.message);
    FILE *f = fopen(operands[0], "rb");
    check_file(f, operands[0], "opening");
    char *text = NULL;
    size_t size = 0, cap = 0, got;
    do {
        if (cap - size < 65536) {
            cap = 2 * cap + 65536;
            text = realloc(text, cap);
            check_alloc(text, cap);
        }
        got = fread(text + size, 1, cap - size, f);
        size += got;
    } while (got > 0);
    check_file(!ferror(f), operands[0], "reading");
    fclose(f);
    int *ids = NULL;
    size_t n = 0, ids_cap = 0;
    long lines = 0, tokens = 0;
    double best = 1e30;
    for (int pass = 0; pass <= repeat; pass++) {
        double t0 = cpu_thread_seconds();
        lines = tokens = 0;
        for (size_t at = 0; at < size;) {
            const char *nl = memchr(text + at, '\n', size - at);
            size_t end = nl ? (size_t)(nl - text) : size;
            s = tokenizer_encode(tok, text + at, end - at, &ids, &n, &ids_cap);
            if (!s.ok) fatal("bench tokenizer: %s", s.message);
            tokens += (long)n;
            lines++;
            at = end + 1;
        }
        double dt = cpu_thread_seconds() - t0;
        if (pass > 0 && dt < best) best = dt;
    }
    printf("bench tokenizer: %s (%s), %ld lines, %.2f MB, %ld tokens: best of %d passes %.3f CPU s = %.2f MB/s, "
           "%.0f tokens/s on one thread\n",
           model, tokenizer_type(tok) == TOKENIZER_WORDPIECE ? "WordPiece"
           : tokenizer_type(tok) == TOKENIZER_BPE ? "byte-level BPE" : "SentencePiece", lines, size / 1e6,
           tokens, repeat, best, size / 1e6 / best, tokens / best);
    free(ids);
    free(text);
    tokenizer_free(tok);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    if (argc >= 1 && !strcmp(argv[0], "tokenizer")) return bench_tokenizer(argc - 1, argv + 1);
    prep_options o = {.prefix = "train", .shards = 4, .seq_length = 128, .max_predictions = 20,
                      .masked_lm_prob = 0.15, .short_seq_prob = 0.1, .dupe_factor = 5, .seed = 12345, .threads = 2,
                      .chunk_bytes = 1000000, .gzip_level = 4, .text = {TEXT_SENTENCE_LINES, 1},
                      .lower_case = -1, .strip_accents = -1};
    const char *work = NULL;
    int B = 64, batches = 2000, format = 0, doc_per = 0;
    const cli_option options[] = {
        {"--tokenizer", CLI_STRING, &o.tokenizer_model, "MODEL",
         .help = "a SentencePiece FILE.model, a WordPiece vocab.txt or a BPE tokenizer.json", .required = 1},
        {"--format", CLI_CHOICE, &format, NULL, .help = "as for 'bertpre prep'", .choices = "lines|text"},
        {"--doc-per", CLI_CHOICE, &doc_per, NULL, .help = "as for 'bertpre prep'", .choices = "file|block"},
        {"--pattern", CLI_STRING, &o.pattern, "GLOB", .help = "as for 'bertpre prep'", .shown_default = "all"},
        {"--threads", CLI_INT, &o.threads, "N", .help = "prep threads", 1, 1024},
        {"--work", CLI_STRING, &work, "DIR", .help = "where the shards go",
         .shown_default = "a new directory under /tmp, removed after"},
        {"--batch-size", CLI_INT, &B, "N", .help = "loader micro-batch", 1, 1 << 16},
        {"--seq-length", CLI_INT, &o.seq_length, "N", .help = "sequence length", 5, 1 << 16},
        {"--batches", CLI_INT, &batches, "N", .help = "batches timed per loader run", 1, 1 << 30},
        {NULL},
    };
    const cli_command command = {"bench data", "bench data --tokenizer MODEL [options] INPUT...", about_bench,
                                 NULL, options, "INPUT", 1, -1};
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        cli_print_usage(&command, stdout);
        return 0;
    }
    if (argc < 1 || strcmp(argv[0], "data") != 0)
        fatal("bench: expected 'bench data' or 'bench tokenizer'; see 'bertpre bench --help'");
    char **inputs = xcalloc((size_t)argc, sizeof(char *));
    int n = 0;
    if (cli_parse(&command, argc - 1, argv + 1, inputs, &n)) return 0;
#if BERTPRE_HAVE_HDF5
    o.text = (text_options){format ? TEXT_PLAIN : TEXT_SENTENCE_LINES, doc_per == 0, NULL, 0, 0, 0};
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
    tokenizer *tok;
    tokenizer_status ts = tokenizer_load(&tok, o.tokenizer_model);
    if (!ts.ok) fatal("bench: %s", ts.message);
    masking_params mp = masking_for_tokenizer(tokenizer_specials(tok), s.vocab_size, 0.15, o.max_predictions);
    tokenizer_free(tok);
    bench_loader(work, B, o.seq_length, o.max_predictions, batches, 0, mp);
    bench_loader(work, B, o.seq_length, o.max_predictions, batches, 1, mp);
    if (own) remove_flat_dir(work, NULL, 0);
    free(inputs);
    return 0;
#else
    (void)B, (void)batches, (void)format, (void)doc_per;
    fatal("bench: this bertpre was built without HDF5 (install libhdf5-dev, then rebuild)");
#endif
}
