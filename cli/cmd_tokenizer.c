// `bertpre tokenizer train|encode|decode|info`: SentencePiece through tokenizer/tokenizer.h.
// Training reads the same inputs and formats as `bertpre prep` (data/text.h), so the
// tokenizer sees the sentences that prep will encode.
#include <stdio.h>
#include <string.h>
#include "bertpre_config.h"
#include "cli/commands.h"
#include "kernels/common/check.h"

static const char *usage_tokenizer =
    "usage: bertpre tokenizer train --model-prefix PREFIX --vocab-size N [options] INPUT...\n"
    "       bertpre tokenizer encode --model FILE.model [--pieces] [TEXT_FILE]\n"
    "       bertpre tokenizer decode --model FILE.model [IDS_FILE]\n"
    "       bertpre tokenizer info --model FILE.model\n"
    "\n"
    "train: a SentencePiece model with <pad>=0, <unk>=1, [CLS]=2, [SEP]=3, [MASK]=4 (ALBERT's\n"
    "  convention); writes PREFIX.model and PREFIX.vocab. INPUT: files or directories.\n"
    "  --format lines|text   lines: a sentence per line, blank line between documents;\n"
    "                        text: running text split into sentences (default lines)\n"
    "  --pattern GLOB        files to take inside directories (e.g. '*.rst.gz'; default all)\n"
    "  --model-type unigram|bpe|char|word (default unigram)\n"
    "  --input-sentence-size N  sentences sampled for training (default 2000000; 0 = all)\n"
    "  --character-coverage F, --threads N (default 2), --seed N (default 42)\n"
    "  --verbose             SentencePiece's training log on stderr\n"
    "encode: each input line (stdin without a file) to one line of ids, or pieces with --pieces.\n"
    "decode: each line of space-separated ids back to text.\n"
    "info: vocabulary size and special ids.\n";

#if BERTPRE_HAVE_SENTENCEPIECE
#include <stdlib.h>
#include "data/text.h"
#include "tokenizer/tokenizer.h"

static tokenizer *load_or_die(const char *path) {
    if (!path) fatal("tokenizer: --model FILE.model is required\n%s", usage_tokenizer);
    tokenizer *tok;
    tokenizer_status s = tokenizer_load(&tok, path);
    if (!s.ok) fatal("tokenizer: cannot load: %s", s.message);
    return tok;
}

typedef struct {
    text_reader *reader;
    text_document doc;
    int next;
    long given;  // sentences handed to the trainer
} sentence_source;

static int next_sentence(void *ctx, const char **text, size_t *len) {
    sentence_source *src = ctx;
    while (src->next >= src->doc.n) {
        if (!text_reader_next(src->reader, &src->doc)) return 0;
        src->next = 0;
    }
    *text = src->doc.text + src->doc.start[src->next++];
    *len = strlen(*text);
    src->given++;
    return 1;
}

static int tokenizer_train_main(int argc, char **argv) {
    tokenizer_train_options o = {.model_type = "unigram", .input_sentence_size = 2000000, .num_threads = 2, .seed = 42};
    text_options text = {TEXT_SENTENCE_LINES, 1};
    const char *pattern = NULL;
    char **inputs = xcalloc((size_t)argc + 1, sizeof(char *));
    int n_inputs = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--model-prefix")) o.model_prefix = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--vocab-size")) o.vocab_size = cli_int(a, cli_value(argc, argv, &i), 6, 1 << 24);
        else if (!strcmp(a, "--model-type")) o.model_type = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--input-sentence-size")) o.input_sentence_size = cli_int(a, cli_value(argc, argv, &i), 0, 2000000000);
        else if (!strcmp(a, "--character-coverage")) o.character_coverage = cli_real(a, cli_value(argc, argv, &i), 0.5, 1.0);
        else if (!strcmp(a, "--threads")) o.num_threads = cli_int(a, cli_value(argc, argv, &i), 1, 1024);
        else if (!strcmp(a, "--seed")) o.seed = cli_int(a, cli_value(argc, argv, &i), 0, 2147483647);
        else if (!strcmp(a, "--pattern")) pattern = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--verbose")) o.verbose = 1;
        else if (!strcmp(a, "--format")) {
            const char *v = cli_value(argc, argv, &i);
            if (!strcmp(v, "lines")) text.format = TEXT_SENTENCE_LINES;
            else if (!strcmp(v, "text")) text.format = TEXT_PLAIN;
            else fatal("option --format: '%s' is not lines or text", v);
        } else if (a[0] == '-') fatal("tokenizer train: unknown option '%s'\n%s", a, usage_tokenizer);
        else inputs[n_inputs++] = argv[i];
    }
    if (!o.model_prefix || !o.vocab_size || !n_inputs)
        fatal("tokenizer train: --model-prefix, --vocab-size and at least one INPUT are required\n%s", usage_tokenizer);
    sentence_source src = {text_reader_open(inputs, n_inputs, pattern, text), {0}, 0, 0};
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

static int tokenizer_encode_main(const char *model, const char *path, int pieces) {
    tokenizer *tok = load_or_die(model);
    FILE *in = open_input(path);
    char *line = NULL, piece[1024];
    size_t line_cap = 0, n = 0, cap = 0;
    int *ids = NULL;
    ssize_t len;
    while ((len = getline(&line, &line_cap, in)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        tokenizer_status s = tokenizer_encode(tok, line, (size_t)len, &ids, &n, &cap);
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
            long v = strtol(p, &end, 10);
            if (end == p) fatal("%s:%ld: '%.20s' is not an id", path ? path : "stdin", line_no, p);
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
    tokenizer_free(tok);
    return 0;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        fputs(usage_tokenizer, argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_tokenizer, stdout);
            return 0;
        }
    const char *verb = argv[0];
    if (!strcmp(verb, "train")) return tokenizer_train_main(argc - 1, argv + 1);
    const char *model = NULL, *path = NULL;
    int pieces = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model")) model = cli_value(argc, argv, &i);
        else if (!strcmp(argv[i], "--pieces")) pieces = 1;
        else if (argv[i][0] == '-' && argv[i][1]) fatal("tokenizer %s: unknown option '%s'\n%s", verb, argv[i], usage_tokenizer);
        else path = argv[i];
    }
    if (!strcmp(verb, "encode")) return tokenizer_encode_main(model, path, pieces);
    if (!strcmp(verb, "decode")) return tokenizer_decode_main(model, path);
    if (!strcmp(verb, "info")) return tokenizer_info_main(model);
    fatal("tokenizer: unknown command '%s' (train, encode, decode, info)\n%s", verb, usage_tokenizer);
}
#else
int cmd_tokenizer(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        fputs(usage_tokenizer, stdout);
        return 0;
    }
    fatal("tokenizer: this bertpre was built without SentencePiece (install libsentencepiece-dev and rebuild)");
}
#endif
