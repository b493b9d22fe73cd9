// `bertpre tokenizer train|encode|decode|info` through tokenizer/tokenizer.h: encode, decode
// and info take a SentencePiece model, a WordPiece vocab.txt or a BPE tokenizer.json; train makes a SentencePiece
// model. Training reads the same inputs and formats as `bertpre prep` (data/text.h), so the
// tokenizer sees the sentences that prep will encode.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "bertpre_config.h"
#include "cli/commands.h"
#include "kernels/common/check.h"
#include "data/text.h"
#include "kernels/common/files.h"
#include <jansson.h>
#include "tokenizer/tokenizer.h"

static const char about_train[] =
    "A SentencePiece model with <pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4 (ALBERT's\n"
    "convention); writes PREFIX.model and PREFIX.vocab (under temporary names, put in place when\n"
    "both are whole; an existing PREFIX.model or PREFIX.vocab is refused). INPUT: files or\n"
    "directories. Every 10 s (BERTPRE_PROGRESS_EVERY seconds) a line on stderr says how far the\n"
    "reading is (sentences, MB, share of the input, time left) and then the pruning of the\n"
    "pieces (pieces now, rounds done and left, time left).\n";
static const char about_use[] =
    "encode: each input line (stdin without a file, or '-') to one line of ids, or pieces with --pieces;\n"
    "with --json-lines each line is a JSON string, so that a text may hold newlines.\n"
    "decode: each line of space-separated ids back to text.\n"
    "info: vocabulary size, special ids, kind and (WordPiece) casing.\n"
    "MODEL: a SentencePiece FILE.model, a WordPiece vocab.txt (BERT's; tokenized exactly as\n"
    "BERT does, with the casing options below) or a byte-level BPE tokenizer.json (ModernBERT's;\n"
    "tokenized exactly as the tokenizers library does).\n";

static tokenizer_train_options train_options = {.model_type = "unigram", .input_sentence_size = 2000000,
                                                .num_threads = 2, .seed = 42};
static cli_text_input train_input;
static double train_coverage = 0.0;
static const cli_option train_table[] = {
    {"--model-prefix", CLI_STRING, &train_options.model_prefix, "PREFIX", .help = "writes PREFIX.model and PREFIX.vocab",
     .required = 1},
    {"--vocab-size", CLI_INT, &train_options.vocab_size, "N", .help = "pieces, the five special ones included", 6, 1 << 24,
     .required = 1},
    CLI_TEXT_OPTIONS(train_input),
    {"--model-type", CLI_STRING, &train_options.model_type, "unigram|bpe|char|word", .help = "SentencePiece's model type"},
    {"--input-sentence-size", CLI_INT, &train_options.input_sentence_size, "N",
     .help = "sentences sampled for training (0: all)", 0, 2000000000},
    {"--max-sentence-length", CLI_INT, &train_options.max_sentence_length, "N",
     .help = "bytes: longer sentences are left out of the tokenizer's training (said in a warning)", 1, 1 << 30,
     .shown_default = "4192, SentencePiece's"},
    {"--character-coverage", CLI_REAL, &train_coverage, "F",
     .help = "share of characters the pieces cover", 0.98, 1.0,
     .shown_default = "0.9995, SentencePiece's"},
    {"--threads", CLI_INT, &train_options.num_threads, "N", .help = "training threads", 1, 1024},
    {"--seed", CLI_INT, &train_options.seed, "N", .help = "SentencePiece's random seed", 0, 2147483647},
    {"--verbose", CLI_FLAG, &train_options.verbose, NULL, .help = "SentencePiece's training log on stderr"},
    {NULL},
};
static const cli_command train_command = {"tokenizer train",
                                          "tokenizer train --model-prefix PREFIX --vocab-size N [options] INPUT...",
                                          about_train, NULL, train_table, "INPUT", 1, -1};

static const char *use_model;
static int use_pieces, use_json_lines;
static cli_casing use_casing;
static const cli_option use_table[] = {
    {"--model", CLI_STRING, &use_model, "MODEL",
     .help = "a SentencePiece FILE.model, a WordPiece vocab.txt or a BPE tokenizer.json", .required = 1},
    {"--pieces", CLI_FLAG, &use_pieces, NULL, .help = "encode: pieces instead of ids"},
    {"--json-lines", CLI_FLAG, &use_json_lines, NULL, .help = "encode: each input line is a JSON string"},
    CLI_CASING_OPTIONS(use_casing),
    {NULL},
};
static const cli_command use_command = {"tokenizer",
                                        "tokenizer encode --model MODEL [--pieces] [--json-lines] [casing] [TEXT_FILE]\n"
                                        "tokenizer decode --model MODEL [IDS_FILE]\n"
                                        "tokenizer info --model MODEL [casing]",
                                        about_use, NULL, use_table, "FILE", 0, 1};

static void print_usage(FILE *out) {
    cli_print_usage(&train_command, out);
    fputc('\n', out);
    cli_print_usage(&use_command, out);
}

static tokenizer *load_or_die(const char *path) {
    tokenizer *tok;
    tokenizer_options o;
    cli_tokenizer_options("tokenizer", &use_casing, &o.lower_case, &o.strip_accents);
    tokenizer_status s = tokenizer_load_with(&tok, path, &o);
    if (!s.ok) fatal("tokenizer: cannot load: %s", s.message);
    char casing[1024];
    if (tokenizer_casing_warning(tok, path, casing, sizeof casing))
        fprintf(stderr, "bertpre: warning: tokenizer: %s\n", casing);
    return tok;
}

typedef struct {
    text_reader *reader;
    text_document doc;
    int next;
    long given;  // sentences handed to the trainer
    // Progress, a line on stderr every PROGRESS_EVERY seconds: the reading, then the pruning.
    time_t start, said, rounds_from;
    long target, first_pieces;
    int rounds, every;  // every: seconds between lines (BERTPRE_PROGRESS_EVERY, default 10)
} sentence_source;

static void say_left(double seconds, char *text, size_t size) {
    if (seconds > 0) snprintf(text, size, ", about %d:%02d left", (int)seconds / 60, (int)seconds % 60);
    else text[0] = '\0';
}

static int next_sentence(void *ctx, const char **text, size_t *len) {
    sentence_source *src = ctx;
    while (src->next >= src->doc.n) {
        if (!text_reader_next(src->reader, &src->doc)) return 0;
        src->next = 0;
    }
    *text = src->doc.text + src->doc.start[src->next++];
    *len = strlen(*text);
    src->given++;
    time_t now;  // looked at every 1,024 sentences, not every one
    if ((src->given & 1023) == 0 && (now = time(NULL)) - src->said >= src->every) {
        double f = text_reader_progress(src->reader), left = f > 0 ? (now - src->start) * (1 - f) / f : 0;
        char eta[48];
        say_left(left, eta, sizeof eta);
        fprintf(stderr, "tokenizer: reading: %ld sentences, %.1f MB of text, %.0f%% of the input%s\n", src->given,
                text_reader_bytes_read(src->reader) / 1e6, 100 * f, eta);
        src->said = now;
    }
    return 1;
}

// The unigram trainer prunes its candidates by about a quarter a round (shrinking_factor 0.75)
// until 1.1 x vocab_size are left, then keeps vocab_size: the rounds left follow, and their time
// from the rounds so far (later rounds, on fewer pieces, are quicker: an upper bound).
static void on_pieces(void *ctx, long pieces, int seed) {
    sentence_source *src = ctx;
    time_t now = time(NULL);
    if (seed || !src->rounds_from) {
        if (seed) src->first_pieces = pieces;
        src->rounds_from = now;
        src->rounds = 0;
        return;
    }
    src->rounds++;
    if (now - src->said < src->every) return;
    double goal = 1.1 * src->target;
    int left = pieces > goal ? (int)ceil(log(pieces / goal) / log(4.0 / 3.0)) : 0;
    char eta[48];
    say_left(left * (double)(now - src->rounds_from) / src->rounds, eta, sizeof eta);
    fprintf(stderr, "tokenizer: training: %ld pieces (from %ld candidates), pruning to %ld: %d round%s done, %d "
            "left%s\n", pieces, src->first_pieces, src->target, src->rounds, src->rounds == 1 ? "" : "s", left, eta);
    src->said = now;
}

static int tokenizer_train_main(int argc, char **argv) {
    char **inputs = xcalloc((size_t)argc + 1, sizeof(char *));
    int n_inputs = 0;
    if (cli_parse(&train_command, argc, argv, inputs, &n_inputs)) return 0;
    if (!BERTPRE_HAVE_SENTENCEPIECE)
        fatal("tokenizer train: this bertpre was built without SentencePiece (install libsentencepiece-dev and "
              "rebuild)");
    tokenizer_train_options o = train_options;
    o.character_coverage = train_coverage;
    // The prefix's directory is created before the training it would otherwise fail after.
    const char *slash = strrchr(o.model_prefix, '/');
    if (slash && slash != o.model_prefix) {
        char dir[1100];
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - o.model_prefix), o.model_prefix);
        make_dirs(dir);
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            fatal("tokenizer train: --model-prefix '%s': '%s' is not a directory", o.model_prefix, dir);
    }
    // An existing model is never replaced: refused now, before the training.
    for (int i = 0; i < 2; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%s.%s", o.model_prefix, i ? "vocab" : "model");
        struct stat st;
        if (lstat(path, &st) == 0)
            fatal("tokenizer train: --model-prefix '%s': %s already exists; a model is never replaced: remove it "
                  "or choose another prefix", o.model_prefix, path);
    }
    const char *pattern;
    text_options text = cli_text_options(&train_input, 1, 0, &pattern);
    sentence_source src = {.reader = text_reader_open(inputs, n_inputs, pattern, text)};
    src.start = src.said = time(NULL);
    src.target = o.vocab_size;
    src.every = progress_every_s();
    o.on_pieces = on_pieces;
    o.pieces_ctx = &src;
    tokenizer_status s = tokenizer_train(&o, NULL, next_sentence, &src);
    text_reader_close(src.reader);
    text_document_free(&src.doc);
    // An input without a sentence is reported as such, not as SentencePiece's internal check.
    if (src.given == 0)
        fatal("tokenizer train: %s%s hold%s no text (no sentence to train on%s)", inputs[0],
              n_inputs > 1 ? " and the other inputs" : "", n_inputs > 1 ? "" : "s",
              pattern ? "; check --pattern" : "");
    free(inputs);
    if (!s.ok) fatal("%s", s.message);
    printf("tokenizer: wrote %s.model and %s.vocab (%d pieces)\n", o.model_prefix, o.model_prefix, o.vocab_size);
    return 0;
}

static FILE *open_input(const char *path) {
    if (!path || !strcmp(path, "-")) return stdin;
    FILE *f = fopen(path, "rb");
    check_file(f, path, "opening");
    return f;
}

static int tokenizer_encode_main(const char *model, const char *path, int pieces, int json_lines) {
    tokenizer *tok = load_or_die(model);
    FILE *in = open_input(path);
    char *line = NULL, piece[1024];
    size_t line_cap = 0, n = 0, cap = 0;
    int *ids = NULL;
    ssize_t len;
    long line_no = 0;
    while ((len = getline(&line, &line_cap, in)) >= 0) {
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        const char *text = line;
        json_t *value = NULL;
        if (json_lines) {
            json_error_t err;
            value = json_loadb(line, (size_t)len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
            if (!json_is_string(value))
                fatal("%s:%ld: not a JSON string (--json-lines)%s%s", path ? path : "stdin", line_no,
                      value ? "" : ": ", value ? "" : err.text);
            text = json_string_value(value), len = (ssize_t)json_string_length(value);
        }
        tokenizer_status s = tokenizer_encode(tok, text, (size_t)len, &ids, &n, &cap);
        json_decref(value);
        if (!s.ok) fatal("%s", s.message);
        for (size_t i = 0; i < n; i++) {
            if (pieces) {
                s = tokenizer_id_to_piece(tok, ids[i], piece, sizeof piece);
                if (!s.ok) fatal("%s", s.message);
                printf(i ? " %s" : "%s", piece);
            } else {
                printf(i ? " %d" : "%d", ids[i]);
            }
        }
        putchar('\n');
    }
    if (in != stdin) fclose(in);
    free(line);
    free(ids);
    tokenizer_free(tok);
    return 0;
}

static int tokenizer_decode_main(const char *model, const char *path) {
    tokenizer *tok = load_or_die(model);
    FILE *in = open_input(path);
    char *line = NULL;
    size_t line_cap = 0, cap = 0;
    int *ids = NULL;
    long line_no = 0;
    while (getline(&line, &line_cap, in) >= 0) {
        line_no++;
        size_t n = 0;
        for (char *p = line, *end; *p; p = end) {
            while (*p == ' ' || *p == '\t') p++;
            if (*p == '\n' || *p == '\r' || !*p) break;
            errno = 0;
            long long v = strtoll(p, &end, 10);
            if (end == p) fatal("%s:%ld: '%.20s' is not an id", path ? path : "stdin", line_no, p);
            if (errno == ERANGE || v < INT_MIN || v > INT_MAX)  // named as written, not as it wrapped
                fatal("%s:%ld: id %.*s at index %zu is outside the vocabulary [0, %d)", path ? path : "stdin",
                      line_no, (int)(end - p), p, n, tokenizer_vocab_size(tok));
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                ids = realloc(ids, cap * sizeof(int));
                check_alloc(ids, cap * sizeof(int));
            }
            ids[n++] = (int)v;
        }
        char *text;
        tokenizer_status s = tokenizer_decode(tok, ids, n, &text);
        if (!s.ok) fatal("%s:%ld: %s", path ? path : "stdin", line_no, s.message);
        puts(text);
        free(text);
    }
    if (in != stdin) fclose(in);
    free(line);
    free(ids);
    tokenizer_free(tok);
    return 0;
}

static int tokenizer_info_main(const char *model) {
    tokenizer *tok = load_or_die(model);
    tokenizer_special_ids s = tokenizer_specials(tok);
    printf("vocab_size %d\npad %d\nunk %d\ncls %d\nsep %d\nmask %d\n", tokenizer_vocab_size(tok), s.pad, s.unk, s.cls,
           s.sep, s.mask);
    if (tokenizer_type(tok) == TOKENIZER_WORDPIECE)
        printf("kind wordpiece\nlower_case %d\nstrip_accents %d\n", tokenizer_lower_case(tok),
               tokenizer_strip_accents(tok));
    else
        printf("kind %s\n", tokenizer_type(tok) == TOKENIZER_BPE ? "bpe" : "sentencepiece");
    tokenizer_free(tok);
    return 0;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        print_usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    const char *verb = argv[0];
    int train = !strcmp(verb, "train");
    if (!train && strcmp(verb, "encode") && strcmp(verb, "decode") && strcmp(verb, "info"))
        fatal("tokenizer: unknown command '%s' (train, encode, decode, info); see 'bertpre tokenizer --help'", verb);
    if (train) return tokenizer_train_main(argc - 1, argv + 1);
    char *operands[1] = {NULL};
    int n = 0;
    if (cli_parse(&use_command, argc - 1, argv + 1, operands, &n)) return 0;
    if (!strcmp(verb, "encode")) return tokenizer_encode_main(use_model, operands[0], use_pieces, use_json_lines);
    if (!strcmp(verb, "decode")) return tokenizer_decode_main(use_model, operands[0]);
    return tokenizer_info_main(use_model);
}
