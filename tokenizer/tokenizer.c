// tokenizer.h: the file given picks the tokenizer. A SentencePiece model (a protocol buffer,
// whose first byte is 0x0A, field 1 "pieces") or any file named *.model goes to
// sentencepiece.cc; a JSON object (a tokenizer.json, first non-blank byte '{') to bpe.c;
// anything else is read as a WordPiece vocab.txt (wordpiece.c), which cannot start with 0x0A
// since its first line cannot be empty (nor with '{', which BERT's vocabularies do not).
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bertpre_config.h"
#include "tokenizer/bpe.h"
#include "tokenizer/wordpiece.h"
#if BERTPRE_HAVE_SENTENCEPIECE
#include "tokenizer/sentencepiece.h"
#endif

struct tokenizer {
    wordpiece *wp;  // one of the three
    bpe_model *bpe;
#if BERTPRE_HAVE_SENTENCEPIECE
    spm_model *spm;
#endif
};

static tokenizer_status status_error(const char *what, const char *path) {
    tokenizer_status s = {0, ""};
    snprintf(s.message, sizeof s.message, "%s: %s", path, what);
    return s;
}

#if !BERTPRE_HAVE_SENTENCEPIECE
static const char no_spm[] = "a SentencePiece model, and this bertpre was built without SentencePiece (install "
                             "libsentencepiece-dev and rebuild)";
#endif

tokenizer_status tokenizer_train(const tokenizer_train_options *options, const char *files,
                                 tokenizer_next_sentence next, void *ctx) {
#if BERTPRE_HAVE_SENTENCEPIECE
    return spm_train(options, files, next, ctx);
#else
    (void)options, (void)next, (void)ctx;
    return status_error("cannot train: this bertpre was built without SentencePiece (install "
                        "libsentencepiece-dev and rebuild)", files ? files : "tokenizer train");
#endif
}

int tokenizer_file_is_sentencepiece(const char *path) {
    size_t len = strlen(path);
    if (len >= 6 && !strcmp(path + len - 6, ".model")) return 1;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int c = fgetc(f);
    fclose(f);
    return c == 0x0A;
}

tokenizer_status tokenizer_load_with(tokenizer **out, const char *path, const tokenizer_options *options) {
    *out = NULL;
    tokenizer_options o = options ? *options : (tokenizer_options){-1, -1};
    FILE *f = fopen(path, "rb");
    if (!f) return status_error(strerror(errno), path);
    fclose(f);
    tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return status_error("out of host memory", path);
    tokenizer_status s;
    if (tokenizer_file_is_sentencepiece(path)) {
        if (o.lower_case >= 0 || o.strip_accents >= 0) {
            free(tok);
            return status_error("a SentencePiece model: its casing is part of the model, so lower-casing and "
                                "accent options apply to a WordPiece vocab.txt only", path);
        }
#if BERTPRE_HAVE_SENTENCEPIECE
        s = spm_load(&tok->spm, path);
#else
        s = status_error(no_spm, path);
#endif
    } else if (bpe_file_is_json(path)) {
        if (o.lower_case >= 0 || o.strip_accents >= 0) {
            free(tok);
            return status_error("a tokenizer.json: its normalization is part of the file, so lower-casing and "
                                "accent options apply to a WordPiece vocab.txt only", path);
        }
        s = bpe_load(&tok->bpe, path);
    } else {
        s = wordpiece_load(&tok->wp, path, o.lower_case, o.strip_accents);
    }
    if (!s.ok) {
        free(tok);
        return s;
    }
    *out = tok;
    return s;
}

tokenizer_status tokenizer_load(tokenizer **out, const char *path) { return tokenizer_load_with(out, path, NULL); }

void tokenizer_free(tokenizer *tok) {
    if (!tok) return;
    wordpiece_free(tok->wp);
    bpe_free(tok->bpe);
#if BERTPRE_HAVE_SENTENCEPIECE
    if (tok->spm) spm_free(tok->spm);
#endif
    free(tok);
}

// Each call below goes to WordPiece or BPE when the tokenizer is one, else to SentencePiece
// (which a tokenizer can only be when it was built).
#if BERTPRE_HAVE_SENTENCEPIECE
#define SPM(call) return call
#else
#define SPM(call) abort()
#endif

tokenizer_kind tokenizer_type(const tokenizer *tok) {
    return tok->wp ? TOKENIZER_WORDPIECE : tok->bpe ? TOKENIZER_BPE : TOKENIZER_SENTENCEPIECE;
}
int tokenizer_lower_case(const tokenizer *tok) { return tok->wp ? wordpiece_lower_case(tok->wp) : -1; }

int tokenizer_casing_warning(const tokenizer *tok, const char *path, char *msg, size_t size) {
    if (!tok->wp) return 0;
    int lower = wordpiece_lower_case(tok->wp), from = wordpiece_lower_from(tok->wp);
    int json_lower = wordpiece_json_lower(tok->wp);
    if (from != CASING_FROM_OPTION && json_lower >= 0 && json_lower != lower) {
        char json_path[4096];
        wordpiece_beside(path, "tokenizer.json", json_path, sizeof json_path);
        snprintf(msg, size,
                 "%s says lowercase %s, but %s: the text is %s, as transformers' AutoTokenizer "
                 "does for a BERT (it follows tokenizer_config.json's do_lower_case, true when absent). If the model "
                 "was trained %s, give %s (and set do_lower_case in tokenizer_config.json, so that fine-tuning "
                 "agrees)",
                 json_path, json_lower ? "true" : "false",
                 from == CASING_FROM_CONFIG ? (lower ? "tokenizer_config.json says do_lower_case true"
                                                     : "tokenizer_config.json says do_lower_case false")
                 : from == CASING_FROM_CONFIG_DEFAULT ? "tokenizer_config.json beside it has no do_lower_case"
                                                      : "there is no tokenizer_config.json beside it",
                 lower ? "lower-cased" : "kept cased", json_lower ? "uncased" : "cased",
                 json_lower ? "--lower-case" : "--cased");
        return 1;
    }
    if (!lower || !wordpiece_lower_by_default(tok->wp)) return 0;
    int upper = wordpiece_upper_tokens(tok->wp), n = tokenizer_vocab_size(tok);
    if (upper * 100 <= n) return 0;
    snprintf(msg, size,
             "%s looks cased (%d of its %d tokens hold capitals) but is used uncased, the default without a "
             "tokenizer_config.json beside it: give --cased if it is a cased vocabulary (its capitalised tokens are "
             "otherwise never used), or --lower-case to say it is meant",
             path, upper, n);
    return 1;
}
int tokenizer_strip_accents(const tokenizer *tok) { return tok->wp ? wordpiece_strip_accents(tok->wp) : -1; }

tokenizer_status tokenizer_fast_json(const tokenizer *tok, struct json_t **out) {
    *out = NULL;
    if (tok->wp) return wordpiece_fast_json(tok->wp, out);
    if (tok->bpe) return bpe_fast_json(tok->bpe, out);
    SPM(spm_fast_json(tok->spm, out));
}

int tokenizer_vocab_size(const tokenizer *tok) {
    if (tok->wp) return wordpiece_vocab_size(tok->wp);
    if (tok->bpe) return bpe_vocab_size(tok->bpe);
    SPM(spm_vocab_size(tok->spm));
}

tokenizer_special_ids tokenizer_specials(const tokenizer *tok) {
    if (tok->wp) return wordpiece_specials(tok->wp);
    if (tok->bpe) return bpe_specials(tok->bpe);
    SPM(spm_specials(tok->spm));
}

int tokenizer_piece_to_id(const tokenizer *tok, const char *piece) {
    if (tok->wp) return wordpiece_piece_to_id(tok->wp, piece);
    if (tok->bpe) return bpe_piece_to_id(tok->bpe, piece);
    SPM(spm_piece_to_id(tok->spm, piece));
}

tokenizer_status tokenizer_id_to_piece(const tokenizer *tok, int id, char *buf, size_t size) {
    if (tok->wp || tok->bpe) {
        const char *piece = tok->wp ? wordpiece_id_to_piece(tok->wp, id) : bpe_id_to_piece(tok->bpe, id);
        if (!piece) {
            tokenizer_status s = {0, ""};
            snprintf(s.message, sizeof s.message, "id %d is outside the vocabulary [0, %d)", id,
                     tokenizer_vocab_size(tok));
            return s;
        }
        snprintf(buf, size, "%s", piece);
        return (tokenizer_status){1, ""};
    }
    SPM(spm_id_to_piece(tok->spm, id, buf, size));
}

tokenizer_status tokenizer_encode_append(const tokenizer *tok, const char *text, size_t len, int **ids, size_t *n,
                                         size_t *cap) {
    if (tok->wp) return wordpiece_encode_append(tok->wp, text, len, ids, n, cap);
    if (tok->bpe) return bpe_encode_append(tok->bpe, text, len, ids, n, cap);
    SPM(spm_encode_append(tok->spm, text, len, ids, n, cap));
}

tokenizer_status tokenizer_encode(const tokenizer *tok, const char *text, size_t len, int **ids, size_t *n,
                                  size_t *cap) {
    *n = 0;
    return tokenizer_encode_append(tok, text, len, ids, n, cap);
}

tokenizer_status tokenizer_decode(const tokenizer *tok, const int *ids, size_t n, char **text) {
    if (tok->wp) return wordpiece_decode(tok->wp, ids, n, text);
    if (tok->bpe) return bpe_decode(tok->bpe, ids, n, text);
    SPM(spm_decode(tok->spm, ids, n, text));
}
