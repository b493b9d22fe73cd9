// `bertpre prep`: text to HDF5 shards through data/prep.h.
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "bertpre_config.h"
#include "cli/commands.h"
#include "kernels/common/check.h"

static const char *usage_prep =
    "usage: bertpre prep --tokenizer FILE.model --output DIR [options] INPUT...\n"
    "\n"
    "Writes DIR/PREFIX-NNNNN.hdf5 (train shards) and, with --eval-fraction, DIR/eval-NNNNN.hdf5,\n"
    "in NVIDIA's BERT layout (input_ids, input_mask, segment_ids, masked_lm_positions,\n"
    "masked_lm_ids, next_sentence_labels; gzip). INPUT: files or directories, gzip or plain.\n"
    "  --format lines|text     lines: a sentence per line, blank line between documents (default);\n"
    "                          text: running text, split into sentences here\n"
    "  --doc-per file|block    text format: a document per file (default) or per blank-line block\n"
    "  --pattern GLOB          files to take inside directories (e.g. '*.rst.gz'; default all)\n"
    "  --shards N              train shards per rank, of balanced size (default 1)\n"
    "  --prefix NAME           train shard name prefix (default train)\n"
    "  --eval-fraction F       share of documents held out for the eval shard (default 0: none)\n"
    "  --seq-length N          max sequence length (default 128)\n"
    "  --max-predictions N     max masked positions per sequence (default 20)\n"
    "  --masked-lm-prob F      (default 0.15)     --short-seq-prob F   (default 0.1)\n"
    "  --dupe-factor N         passes over the text with different masks (default 5)\n"
    "  --seed N                (default 12345)    --threads N (default: online cores)\n"
    "  --chunk-mb F            text per chunk: the pool for random next segments (default 1)\n"
    "  --gzip N                compression level 0-9 (default 4)\n"
    "  --no-progress           no progress bar on stderr\n"
    "Under mpirun each rank (OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/SIZE) takes every W-th chunk\n"
    "and writes its own shards, numbered rank * shards + k.\n";

#if BERTPRE_HAVE_HDF5 && BERTPRE_HAVE_SENTENCEPIECE
#include <stdlib.h>
#include "data/prep.h"

int cmd_prep(int argc, char **argv) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    prep_options o = {.prefix = "train", .shards = 1, .seq_length = 128, .max_predictions = 20,
                      .masked_lm_prob = 0.15, .short_seq_prob = 0.1, .dupe_factor = 5, .seed = 12345,
                      .threads = cores > 0 ? (int)cores : 1, .chunk_bytes = 1000000, .gzip_level = 4,
                      .progress = 1, .text = {TEXT_SENTENCE_LINES, 1}};
    char **inputs = xcalloc((size_t)argc + 1, sizeof(char *));
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_prep, stdout);
            return 0;
        } else if (!strcmp(a, "--tokenizer")) o.tokenizer_model = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--output")) o.output_dir = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--prefix")) o.prefix = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--pattern")) o.pattern = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--shards")) o.shards = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--eval-fraction")) o.eval_fraction = cli_real(a, cli_value(argc, argv, &i), 0.0, 0.5);
        else if (!strcmp(a, "--seq-length")) o.seq_length = cli_int(a, cli_value(argc, argv, &i), 5, 1 << 16);
        else if (!strcmp(a, "--max-predictions")) o.max_predictions = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 16);
        else if (!strcmp(a, "--masked-lm-prob")) o.masked_lm_prob = cli_real(a, cli_value(argc, argv, &i), 0.0, 1.0);
        else if (!strcmp(a, "--short-seq-prob")) o.short_seq_prob = cli_real(a, cli_value(argc, argv, &i), 0.0, 1.0);
        else if (!strcmp(a, "--dupe-factor")) o.dupe_factor = cli_int(a, cli_value(argc, argv, &i), 1, 1000);
        else if (!strcmp(a, "--seed")) o.seed = (uint64_t)cli_int(a, cli_value(argc, argv, &i), 0, 2147483647);
        else if (!strcmp(a, "--threads")) o.threads = cli_int(a, cli_value(argc, argv, &i), 1, 1024);
        else if (!strcmp(a, "--chunk-mb")) o.chunk_bytes = (long)(1e6 * cli_real(a, cli_value(argc, argv, &i), 0.001, 1e4));
        else if (!strcmp(a, "--gzip")) o.gzip_level = cli_int(a, cli_value(argc, argv, &i), 0, 9);
        else if (!strcmp(a, "--no-progress")) o.progress = 0;
        else if (!strcmp(a, "--format")) {
            const char *v = cli_value(argc, argv, &i);
            if (!strcmp(v, "lines")) o.text.format = TEXT_SENTENCE_LINES;
            else if (!strcmp(v, "text")) o.text.format = TEXT_PLAIN;
            else fatal("option --format: '%s' is not lines or text", v);
        } else if (!strcmp(a, "--doc-per")) {
            const char *v = cli_value(argc, argv, &i);
            if (!strcmp(v, "file")) o.text.doc_per_file = 1;
            else if (!strcmp(v, "block")) o.text.doc_per_file = 0;
            else fatal("option --doc-per: '%s' is not file or block", v);
        } else if (a[0] == '-') fatal("prep: unknown option '%s'\n%s", a, usage_prep);
        else inputs[n++] = argv[i];
    }
    if (!o.tokenizer_model || !o.output_dir || n == 0)
        fatal("prep: --tokenizer, --output and at least one INPUT are required\n%s", usage_prep);
    o.inputs = inputs;
    o.n_inputs = n;
    cli_mpi_rank(&o.rank, &o.world_size);
    if (o.progress && !isatty(2)) o.progress = 0;
    prep_stats s = prep_run(&o);
    printf("prep: rank %d/%d: %ld documents (%ld held out), %ld sentences, %ld tokens, %.1f MB of text in %.1f s "
           "(%.2f MB/s, %d threads) -> %ld train instances in %d shard(s)",
           o.rank, o.world_size, s.documents, s.eval_documents, s.sentences, s.tokens, s.text_bytes / 1e6, s.seconds,
           s.text_bytes / 1e6 / s.seconds, o.threads, s.train_instances, o.shards);
    if (o.eval_fraction > 0) printf(", %ld eval instances", s.eval_instances);
    printf(" in %s\n", o.output_dir);
    free(inputs);
    return 0;
}
#else
int cmd_prep(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        fputs(usage_prep, stdout);
        return 0;
    }
    fatal("prep: this bertpre was built without HDF5 or SentencePiece (install libhdf5-dev and "
          "libsentencepiece-dev, then rebuild)");
}
#endif
