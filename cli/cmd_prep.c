// `bertpre prep`: text to HDF5 shards through data/prep.h.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "bertpre_config.h"
#include "cli/commands.h"
#include "kernels/common/check.h"
#include "data/masking.h"
#include "data/prep.h"
#include "engine/sha256.h"

static const char *about_prep =
    "Writes DIR/PREFIX-NNNNN.hdf5 (train shards) and, with --eval-fraction, DIR/eval-NNNNN.hdf5,\n"
    "in NVIDIA's BERT layout (input_ids, input_mask, segment_ids, masked_lm_positions,\n"
    "masked_lm_ids, next_sentence_labels; with --separate-documents also document_starts; gzip).\n"
    "INPUT: files or directories, plain, gzip or zstd.\n"
    "--tokenizer: a SentencePiece FILE.model, a WordPiece vocab.txt (BERT's) or a byte-level BPE\n"
    "tokenizer.json (ModernBERT's); the shards get its own [CLS]/[SEP]/[MASK]/[PAD] ids.\n";
static const char *notes_prep =
    "Under mpirun each rank (OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/SIZE) takes every W-th chunk\n"
    "and writes its own shards, numbered rank * shards + k.\n"
    "One prep at a time per DIR: each rank locks its byte of DIR/.bertpre-prep-lock, and a\n"
    "second prep is refused, naming the first (a prep of one rank removes the file at its end).\n"
    "Each shard is written as DIR/.tmp-NAME.partial and renamed when complete. A DIR holding\n"
    "shards this run does not write is refused; input with no usable text (no instance, or\n"
    "over 20% <unk>) is an error and writes nothing. Text that gives poor instances, mostly\n"
    "one-sentence documents or over 5% of the tokens in sentences longer than a sequence (a\n"
    "paragraph per line in --format lines), is a warning naming the likely fix (--strict: an\n"
    "error, nothing written).\n";

int cmd_prep(int argc, char **argv) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    prep_options o = {.prefix = "train", .shards = 1, .seq_length = 128, .max_predictions = 20,
                      .masked_lm_prob = MASK_PROB_DEFAULT, .short_seq_prob = 0.1, .dupe_factor = 5, .seed = 12345,
                      .threads = cores > 0 ? (int)cores : 1, .chunk_bytes = 1000000, .gzip_level = 4,
                      .progress = 1, .text = {TEXT_SENTENCE_LINES, 1}, .lower_case = -1,
                      .strip_accents = -1};
    int doc_per = 0, seed = 12345, no_progress = 0, packing = 0, eval_masking = 0;
    cli_text_input input = {0};
    double chunk_mb = 1.0;
    cli_casing casing = {0};
    const cli_option options[] = {
        {"--tokenizer", CLI_STRING, &o.tokenizer_model, "MODEL",
         .help = "a SentencePiece FILE.model, a WordPiece vocab.txt or a BPE tokenizer.json", .required = 1},
        {"--output", CLI_STRING, &o.output_dir, "DIR", .help = "where the shards go", .required = 1},
        CLI_TEXT_OPTIONS(input),
        {"--doc-per", CLI_CHOICE, &doc_per, NULL, .help = "text format: a document per file or per blank-line block",
         .choices = "file|block"},
        {"--shards", CLI_INT, &o.shards, "N", .help = "train shards per rank, of balanced size", 1, 1 << 20},
        {"--prefix", CLI_STRING, &o.prefix, "NAME", .help = "train shard name prefix"},
        {"--eval-fraction", CLI_REAL, &o.eval_fraction, "F", .help = "share of documents held out for the eval shard", 0, 0.5},
        {"--seq-length", CLI_INT, &o.seq_length, "N", .help = "max sequence length", 5, 1 << 16},
        {"--max-predictions", CLI_INT, &o.max_predictions, "N", .help = "max masked positions per sequence", 1, 1 << 16},
        {"--masked-lm-prob", CLI_REAL, &o.masked_lm_prob, "F", .help = "share of tokens masked", 0, 1},
        {"--packing", CLI_CHOICE, &packing, NULL,
         .help = "pairs: BERT's next-sentence pairs (train.objective mlm+nsp or mlm); full-sentences: RoBERTa's "
                 "rows of whole sentences in document order, across documents with a [SEP] between them; "
                 "doc-sentences: the same within one document (rows may be shorter); contiguous: every row full, "
                 "sentences cut where a row ends (run_mlm.py's group_texts). The last three are MLM-only "
                 "(train.objective mlm), no token dropped",
         .choices = "pairs|full-sentences|doc-sentences|contiguous"},
        {"--separate-documents", CLI_FLAG, &o.separate_documents, NULL,
         .help = "with --packing full-sentences or contiguous (ModernBERT's packing): each document, or piece of "
                 "one, its own [CLS] ... [SEP] inside the row, where they begin recorded in the shards' "
                 "document_starts, so that training can keep attention inside each document"},
        {"--whole-word-mask", CLI_FLAG, &o.whole_word_mask, NULL,
         .help = "mask whole words (a piece and the WordPiece ## or SentencePiece pieces that continue it), as "
                 "create_pretraining_data.py's do_whole_word_mask; 80/10/10 per token"},
        {"--eval-masking", CLI_CHOICE, &eval_masking, NULL,
         .help = "the held-out rows (--eval-fraction): masked as the train rows, or as BERT's (15% of tokens, token "
                 "by token), so that runs masked otherwise are evaluated alike",
         .choices = "train|bert"},
        {"--short-seq-prob", CLI_REAL, &o.short_seq_prob, "F", .help = "share of shorter target lengths", 0, 1},
        {"--dupe-factor", CLI_INT, &o.dupe_factor, "N", .help = "passes over the text with different masks", 1, 1000},
        {"--seed", CLI_INT, &seed, "N", .help = "seed of every draw", 0, 2147483647},
        {"--threads", CLI_INT, &o.threads, "N", .help = "worker threads", 1, 1024, .shown_default = "online cores"},
        {"--chunk-mb", CLI_REAL, &chunk_mb, "F", .help = "MB of text per chunk: the pool for random next segments", 0.001,
         1e4},
        {"--gzip", CLI_INT, &o.gzip_level, "N", .help = "compression level", 0, 9},
        {"--no-progress", CLI_FLAG, &no_progress, NULL, .help = "no progress bar on stderr"},
        CLI_CASING_OPTIONS(casing),
        {"--strict", CLI_FLAG, &o.strict, NULL,
         .help = "text that gives poor instances (mostly one-sentence documents, sentences cut at --seq-length) is "
                 "an error, not a warning"},
        {NULL},
    };
    const cli_command command = {"prep", "prep --tokenizer MODEL --output DIR [options] INPUT...", about_prep,
                                 notes_prep, options, "INPUT", 1, -1};
    char **inputs = xcalloc((size_t)argc + 1, sizeof(char *));
    int n = 0;
    if (cli_parse(&command, argc, argv, inputs, &n)) return 0;
    cli_tokenizer_options("prep", &casing, &o.lower_case, &o.strip_accents);
#if BERTPRE_HAVE_HDF5
    const char *refused = o.separate_documents ? prep_separate_documents_refusal((prep_packing)packing) : NULL;
    if (refused) fatal("prep: %s", refused);  // before any work: the tokenizer, the inputs, the output
    o.text = cli_text_options(&input, doc_per == 0, o.strict, &o.pattern);
    o.seed = (uint64_t)seed;
    o.packing = (prep_packing)packing;
    o.eval_bert_masking = eval_masking == 1;
    o.chunk_bytes = (long)(1e6 * chunk_mb);
    o.progress = !no_progress && isatty(2);
    o.inputs = inputs;
    o.n_inputs = n;
    cli_mpi_rank(&o.rank, &o.world_size);
    char tokenizer_sha256[65];  // recorded in the shards: train compares train.tokenizer with it
    if (sha256_file(o.tokenizer_model, tokenizer_sha256) == 0) o.tokenizer_sha256 = tokenizer_sha256;
    // create_pretraining_data.py's count, round(len x rate), is capped at --max-predictions: a rate
    // that a full row cannot reach is said before the work, with the columns it needs.
    int asked = (int)nearbyint(o.seq_length * o.masked_lm_prob);
    if (asked > o.max_predictions && o.rank == 0)
        fprintf(stderr, "bertpre: warning: prep --masked-lm-prob %g of --seq-length %d asks for %d masked positions "
                "per full row, but --max-predictions %d caps it: at most %.1f%% of a full row is masked; "
                "--max-predictions %d masks the rate asked\n", o.masked_lm_prob, o.seq_length, asked,
                o.max_predictions, 100.0 * o.max_predictions / o.seq_length, asked);
    prep_stats s = prep_run(&o);
    printf("prep: rank %d/%d: %ld documents (%ld held out), %ld sentences, %ld tokens, %.1f MB of text in %.1f s "
           "(%.2f MB/s, %d threads) -> %ld train instances in %d shard(s)",
           o.rank, o.world_size, s.documents, s.eval_documents, s.sentences, s.tokens, s.text_bytes / 1e6, s.seconds,
           s.text_bytes / 1e6 / s.seconds, o.threads, s.train_instances, o.shards);
    if (o.eval_fraction > 0) printf(", %ld eval instances", s.eval_instances);
    if (s.skipped_lines > 0) printf(", %ld bad JSONL lines skipped", s.skipped_lines);
    printf(" in %s; %ld tokens dropped (%.1f%% of the tokens of %d passes: truncated to --seq-length, or in a pair "
           "left out)\n", o.output_dir, s.dropped_tokens,
           s.tokens ? 100.0 * s.dropped_tokens / ((double)s.tokens * o.dupe_factor) : 0.0, o.dupe_factor);
    long rows = s.train_instances + s.eval_instances;
    printf("prep: %s rows; real tokens fill %.1f%% of their %d positions ([CLS] and [SEP] included; unpadded "
           "training computes only those); %.1f%% of the real tokens masked\n", prep_packing_names[o.packing],
           rows ? 100.0 * s.real_tokens / ((double)rows * o.seq_length) : 0.0, o.seq_length,
           s.real_tokens ? 100.0 * s.masked / s.real_tokens : 0.0);
    if (s.unmasked_rows)
        fprintf(stderr, "bertpre: warning: %ld of the %ld rows (%.1f%%) have no masked position: they add nothing to "
                "the masked-LM loss\n", s.unmasked_rows, rows, 100.0 * (double)s.unmasked_rows / (double)rows);
    free(inputs);
    return 0;
#else
    (void)input, (void)doc_per, (void)seed, (void)chunk_mb, (void)no_progress, (void)packing;
    fatal("prep: this bertpre was built without HDF5 (install libhdf5-dev, then rebuild)");
#endif
}
