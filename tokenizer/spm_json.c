// A SentencePiece Unigram or BPE model (and, at the end, a WordPiece vocabulary) as the
// `tokenizers` library's tokenizer.json: the file that
// transformers' fast tokenizer (PreTrainedTokenizerFast; TokenizersBackend in transformers 5)
// loads as it is, without the sentencepiece package, and that gives SentencePiece's ids:
//   normalizer      the model's precompiled charsmap (nmt_nfkc and the like, the same table
//                   SentencePiece applies), then SentencePiece's remove_extra_whitespaces:
//                   runs of spaces made one, a leading and a trailing space dropped
//   pre_tokenizer   Metaspace: spaces as U+2581, one prepended (add_dummy_prefix), split there
//                   (split_by_whitespace: no piece crosses a space)
//   model           Unigram over every piece with its score, unk_id the unknown piece; or BPE
//                   with the merges SentencePiece's BPE makes (bpe_model below)
//   added_tokens    the unknown piece and every control piece, special and matched in the raw
//                   text; [MASK] takes the space before it (lstrip), so that "a [MASK] b" is
//                   the pieces of "a", [MASK], the pieces of "b", as prep writes a masked word
//   post_processor  [CLS] A [SEP] and [CLS] A [SEP] B [SEP] with segment ids 0 then 1
// The model is read from its protocol buffer (sentencepiece_model.proto; field numbers below).
// A model this file cannot express exactly (word or char models, byte fallback, user-defined or
// unused pieces, other whitespace rules) is an error saying which, for the caller to write
// other files.
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/sentencepiece.h"
#include "tokenizer/wordpiece.h"

// ---- protocol buffer wire format -----------------------------------------------------------

typedef struct {
    const unsigned char *p, *end;
    int bad;
} pb_reader;

typedef struct {
    int number, wire;            // field number; 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
    uint64_t value;              // varint
    const unsigned char *bytes;  // length-delimited, fixed32, fixed64
    size_t len;
} pb_field;

static uint64_t pb_varint(pb_reader *r) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) break;
        unsigned char c = *r->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return v;
    }
    r->bad = 1;
    return 0;
}

// The next field of the message, or 0 at its end (r->bad when the bytes are not a message).
static int pb_next(pb_reader *r, pb_field *f) {
    if (r->bad || r->p >= r->end) return 0;
    uint64_t key = pb_varint(r);
    f->number = (int)(key >> 3);
    f->wire = (int)(key & 7);
    f->bytes = NULL;
    f->len = 0;
    f->value = 0;
    size_t left;
    switch (f->wire) {
    case 0: f->value = pb_varint(r); break;
    case 1: f->len = 8; break;
    case 2: f->len = (size_t)pb_varint(r); break;
    case 5: f->len = 4; break;
    default: r->bad = 1;
    }
    if (r->bad) return 0;
    left = (size_t)(r->end - r->p);
    if (f->wire != 0) {
        if (f->len > left) {
            r->bad = 1;
            return 0;
        }
        f->bytes = r->p;
        r->p += f->len;
    }
    return 1;
}

static pb_reader pb_sub(const pb_field *f) { return (pb_reader){f->bytes, f->bytes + f->len, 0}; }

// ---- the model's facts ---------------------------------------------------------------------

enum { PIECE_NORMAL = 1, PIECE_UNKNOWN = 2, PIECE_CONTROL = 3, PIECE_USER_DEFINED = 4, PIECE_UNUSED = 5,
       PIECE_BYTE = 6 };

typedef struct {
    // TrainerSpec (field 2 of ModelProto), with the proto's defaults
    int model_type;                  // 3: 1 unigram, 2 bpe, 3 word, 4 char
    int split_by_whitespace;         // 22
    int treat_whitespace_as_suffix;  // 24
    int byte_fallback;               // 35
    // NormalizerSpec (field 3)
    const unsigned char *charsmap;  // 2
    size_t charsmap_len;
    int add_dummy_prefix;            // 3
    int remove_extra_whitespaces;    // 4
    int escape_whitespaces;          // 5
    int n_types[7];                  // pieces of each type (counted from read_pieces), 0: unknown types
} spm_facts;

static int read_facts(const unsigned char *proto, size_t size, spm_facts *m) {
    *m = (spm_facts){.model_type = 1, .split_by_whitespace = 1, .add_dummy_prefix = 1,
                     .remove_extra_whitespaces = 1, .escape_whitespaces = 1};
    pb_reader r = {proto, proto + size, 0};
    pb_field f, g;
    while (pb_next(&r, &f)) {
        if (f.wire != 2) continue;
        pb_reader sub = pb_sub(&f);
        if (f.number == 2) {
            while (pb_next(&sub, &g)) {
                if (g.wire != 0) continue;
                if (g.number == 3) m->model_type = (int)g.value;
                else if (g.number == 22) m->split_by_whitespace = g.value != 0;
                else if (g.number == 24) m->treat_whitespace_as_suffix = g.value != 0;
                else if (g.number == 35) m->byte_fallback = g.value != 0;
            }
        } else if (f.number == 3) {
            while (pb_next(&sub, &g)) {
                if (g.number == 2 && g.wire == 2) {
                    m->charsmap = g.bytes;
                    m->charsmap_len = g.len;
                } else if (g.wire == 0 && g.number >= 3 && g.number <= 5) {
                    int *flag[] = {&m->add_dummy_prefix, &m->remove_extra_whitespaces, &m->escape_whitespaces};
                    *flag[g.number - 3] = g.value != 0;
                }
            }
        }
        if (sub.bad) return 0;
    }
    return !r.bad;
}

// Why a tokenizer.json would not give SentencePiece's ids for this model, or NULL.
static const char *inexpressible(const spm_facts *m) {
    static const char *types[] = {"?", "Unigram", "BPE", "word", "char"};
    static char why[160];
    if (m->model_type != 1 && m->model_type != 2) {
        snprintf(why, sizeof why, "a %s model (tokenizer.json is written for Unigram and BPE models)",
                 m->model_type >= 1 && m->model_type <= 4 ? types[m->model_type] : "model of unknown type");
        return why;
    }
    if (m->byte_fallback || m->n_types[PIECE_BYTE]) return "a model with byte fallback";
    if (m->n_types[PIECE_USER_DEFINED]) return "a model with user-defined pieces";
    if (m->n_types[PIECE_UNUSED]) return "a model with pieces marked unused";
    if (m->n_types[0]) return "a model with pieces of an unknown type";
    if (m->n_types[PIECE_UNKNOWN] != 1) return "a model without exactly one unknown piece";
    if (!m->escape_whitespaces || !m->remove_extra_whitespaces || m->treat_whitespace_as_suffix ||
        !m->split_by_whitespace)
        return "a model with other whitespace rules than SentencePiece's defaults";
    return NULL;
}

// ---- the pieces ------------------------------------------------------------------------------

typedef struct {
    const char *text;  // in the protocol buffer: not NUL-terminated
    size_t len;
    float score;
    int type, id;
} piece;

// The model's pieces in id order (*n of them), or NULL when one does not parse.
static piece *read_pieces(const unsigned char *proto, size_t size, int *n) {
    pb_reader r = {proto, proto + size, 0};
    pb_field f, g;
    int cap = 1024;
    piece *p = malloc(cap * sizeof *p);
    *n = 0;
    while (p && pb_next(&r, &f)) {
        if (f.number != 1 || f.wire != 2) continue;
        if (*n == cap) {
            piece *grown = realloc(p, 2 * cap * sizeof *p);
            if (!grown) break;
            p = grown, cap *= 2;
        }
        piece *q = &p[*n];
        *q = (piece){"", 0, 0, PIECE_NORMAL, *n};
        pb_reader sub = pb_sub(&f);
        while (pb_next(&sub, &g)) {
            if (g.number == 1 && g.wire == 2) q->text = (const char *)g.bytes, q->len = g.len;
            else if (g.number == 2 && g.wire == 5) memcpy(&q->score, g.bytes, 4);  // little-endian, as the host
            else if (g.number == 3 && g.wire == 0) q->type = (int)g.value;
        }
        if (sub.bad) r.bad = 1;
        ++*n;
    }
    if (!p || r.bad) {
        free(p);
        return NULL;
    }
    return p;
}

static int bytes_cmp(const char *a, size_t na, const char *b, size_t nb) {
    int c = memcmp(a, b, na < nb ? na : nb);
    return c ? c : (na > nb) - (na < nb);
}
static int by_text(const void *a, const void *b) {
    const piece *x = a, *y = b;
    return bytes_cmp(x->text, x->len, y->text, y->len);
}
// Highest score first (the order SentencePiece's BPE merges in), then lowest id.
static int by_priority(const void *a, const void *b) {
    const piece *x = *(piece *const *)a, *y = *(piece *const *)b;
    return x->score != y->score ? (x->score < y->score) - (x->score > y->score) : (x->id > y->id) - (x->id < y->id);
}
// An ordinary piece of exactly these bytes, in the pieces sorted by text.
static int is_normal_piece(const piece *sorted, int n, const char *text, size_t len) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = bytes_cmp(sorted[mid].text, sorted[mid].len, text, len);
        if (c == 0) return sorted[mid].type == PIECE_NORMAL;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return 0;
}

// SentencePiece's BPE as the tokenizers library's: the merges are every split of an ordinary
// piece into two ordinary pieces, ranked as SentencePiece merges (the piece of the higher
// score first). Unknown characters become the unknown piece, a run of them one, as
// SentencePiece joins them.
static json_t *bpe_model(const piece *p, int n, const char *unk) {
    piece *sorted = malloc((size_t)n * sizeof *sorted);
    const piece **order = malloc((size_t)n * sizeof *order);
    json_t *vocab = json_object(), *merges = json_array();
    if (!sorted || !order || !vocab || !merges) {
        free(sorted);
        free(order);
        json_decref(vocab);
        json_decref(merges);
        return NULL;
    }
    memcpy(sorted, p, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, by_text);
    for (int i = 0; i < n; i++) {
        json_object_setn_new(vocab, p[i].text, p[i].len, json_integer(p[i].id));
        order[i] = &p[i];
    }
    qsort(order, (size_t)n, sizeof *order, by_priority);
    char pair[1024];
    for (int i = 0; i < n; i++) {
        const piece *q = order[i];
        if (q->type != PIECE_NORMAL || q->len + 2 > sizeof pair) continue;
        for (size_t k = 1; k < q->len; k++) {
            if (((unsigned char)q->text[k] & 0xc0) == 0x80) continue;  // inside a UTF-8 character
            if (!is_normal_piece(sorted, n, q->text, k) || !is_normal_piece(sorted, n, q->text + k, q->len - k))
                continue;
            snprintf(pair, sizeof pair, "%.*s %.*s", (int)k, q->text, (int)(q->len - k), q->text + k);
            json_array_append_new(merges, json_string(pair));
        }
    }
    free(sorted);
    free(order);
    return json_pack("{s:s, s:n, s:s, s:n, s:n, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout", "unk_token", unk,
                     "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 1, "byte_fallback", 0, "vocab",
                     vocab, "merges", merges);
}

static json_t *unigram_model(const piece *p, int n, int unk_id) {
    json_t *vocab = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(vocab, json_pack("[s%, f]", p[i].text, p[i].len, (double)p[i].score));
    return json_pack("{s:s, s:i, s:o, s:b}", "type", "Unigram", "unk_id", unk_id, "vocab", vocab, "byte_fallback", 0);
}

static char *base64(const unsigned char *in, size_t n) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc(4 * ((n + 2) / 3) + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        *o++ = digits[v >> 18 & 63];
        *o++ = digits[v >> 12 & 63];
        *o++ = i + 1 < n ? digits[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? digits[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

// The Metaspace pre-tokenizer and decoder, in the form both tokenizers 0.15 (transformers 4.38's)
// and current releases read.
static json_t *metaspace(int prepend) {
    return json_pack("{s:s, s:s, s:b, s:s}", "type", "Metaspace", "replacement", "\xe2\x96\x81", "add_prefix_space",
                     prepend, "prepend_scheme", prepend ? "always" : "never");
}

static json_t *replace(const char *regex, const char *content) {
    return json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "Regex", regex, "content", content);
}

static json_t *special_ids(const char *piece, int id) {
    return json_pack("{s:s, s:[i], s:[s]}", "id", piece, "ids", id, "tokens", piece);
}

// BERT's post-processor: [CLS] A [SEP] and [CLS] A [SEP] B [SEP], segment ids 0 then 1.
static json_t *bert_template(const char *cls, int cls_id, const char *sep, int sep_id) {
    return json_pack(
        "{s:s, s:[{s:{s:s,s:i}}, {s:{s:s,s:i}}, {s:{s:s,s:i}}],"
        " s:[{s:{s:s,s:i}}, {s:{s:s,s:i}}, {s:{s:s,s:i}}, {s:{s:s,s:i}}, {s:{s:s,s:i}}], s:{s:o, s:o}}",
        "type", "TemplateProcessing",
        "single", "SpecialToken", "id", cls, "type_id", 0, "Sequence", "id", "A", "type_id", 0, "SpecialToken", "id",
        sep, "type_id", 0,
        "pair", "SpecialToken", "id", cls, "type_id", 0, "Sequence", "id", "A", "type_id", 0, "SpecialToken", "id",
        sep, "type_id", 0, "Sequence", "id", "B", "type_id", 1, "SpecialToken", "id", sep, "type_id", 1,
        "special_tokens", cls, special_ids(cls, cls_id), sep, special_ids(sep, sep_id));
}

tokenizer_status spm_fast_json(const spm_model *model, struct json_t **out) {
    tokenizer_status s = {0, ""};
    *out = NULL;
    size_t size;
    const unsigned char *proto = spm_model_proto(model, &size);
    spm_facts m;
    int n = 0, unk_id = -1;
    piece *p = read_facts(proto, size, &m) ? read_pieces(proto, size, &n) : NULL;
    if (!p) {
        snprintf(s.message, sizeof s.message, "the model's protocol buffer does not parse");
        return s;
    }
    for (int i = 0; i < n; i++) m.n_types[p[i].type >= 1 && p[i].type <= 6 ? p[i].type : 0]++;
    tokenizer_special_ids sp = spm_specials(model);
    const char *why = inexpressible(&m);
    if (!why && (sp.cls < 0 || sp.sep < 0 || sp.mask < 0)) why = "a model without [CLS], [SEP] and [MASK]";
    if (why) {
        free(p);
        snprintf(s.message, sizeof s.message, "%s", why);
        return s;
    }
    char cls[128], sep[128];
    spm_id_to_piece(model, sp.cls, cls, sizeof cls);
    spm_id_to_piece(model, sp.sep, sep, sizeof sep);

    json_t *added = json_array();
    for (int i = 0; i < n; i++) {
        json_t *text = json_stringn(p[i].text, p[i].len);  // NULL when not UTF-8
        json_decref(text);
        if (!text) {
            free(p);
            json_decref(added);
            snprintf(s.message, sizeof s.message, "piece %d is not UTF-8", i);
            return s;
        }
        if (p[i].type == PIECE_UNKNOWN) unk_id = i;
        if (p[i].type == PIECE_UNKNOWN || p[i].type == PIECE_CONTROL)
            json_array_append_new(added, json_pack("{s:i, s:s%, s:b, s:b, s:b, s:b, s:b}", "id", i, "content",
                                                   p[i].text, p[i].len, "single_word", 0, "lstrip", i == sp.mask,
                                                   "rstrip", 0, "normalized", 0, "special", 1));
    }
    char unk[128];
    snprintf(unk, sizeof unk, "%.*s", (int)p[unk_id].len, p[unk_id].text);
    json_t *model_json = m.model_type == 2 ? bpe_model(p, n, unk) : unigram_model(p, n, unk_id);
    free(p);

    json_t *normalizers = json_array();
    if (m.charsmap_len) {
        char *text = base64(m.charsmap, m.charsmap_len);
        if (text) {
            json_array_append_new(normalizers, json_pack("{s:s, s:s}", "type", "Precompiled",
                                                         "precompiled_charsmap", text));
            free(text);
        } else {  // out of memory: no normalizers, so that the pack below fails rather than drop the charsmap
            json_decref(normalizers);
            normalizers = NULL;
        }
    }
    json_array_append_new(normalizers, replace(" {2,}", " "));
    json_array_append_new(normalizers, replace("^ | $", ""));
    json_t *post = bert_template(cls, sp.cls, sep, sp.sep);
    *out = json_pack("{s:s, s:n, s:n, s:o, s:{s:s, s:o}, s:o, s:o, s:o, s:o}", "version", "1.0",
                     "truncation", "padding", "added_tokens", added, "normalizer", "type", "Sequence", "normalizers",
                     normalizers, "pre_tokenizer", metaspace(m.add_dummy_prefix), "post_processor", post, "decoder",
                     metaspace(m.add_dummy_prefix), "model", model_json);
    if (!*out) {
        snprintf(s.message, sizeof s.message, "out of memory building tokenizer.json");
        return s;
    }
    s.ok = 1;
    return s;
}

// ---- WordPiece -------------------------------------------------------------------------------
// A WordPiece vocabulary as tokenizer.json: BERT's pipeline (BertNormalizer with the
// vocabulary's casing, BertPreTokenizer, WordPiece with "##" and 100 characters a word) with the
// NFC that bertpre applies (wordpiece.c, step 5) and transformers' converted BertTokenizerFast
// lacks: without it, text in another normal form (NFD: Hangul as jamo, accents as combining
// marks) gets other pieces than pretraining gave it. Accents stripped: NFC before (the
// normalizer's NFD then leaves the text decomposed, as bertpre does); kept: NFC after.
tokenizer_status wordpiece_fast_json(const wordpiece *w, struct json_t **out) {
    tokenizer_status s = {0, ""};
    *out = NULL;
    tokenizer_special_ids sp = wordpiece_specials(w);
    int ids[5] = {sp.pad, sp.unk, sp.cls, sp.sep, sp.mask};
    for (int k = 0; k < 5; k++)
        if (ids[k] < 0) {
            snprintf(s.message, sizeof s.message, "a vocabulary without all of [PAD], [UNK], [CLS], [SEP], [MASK]");
            return s;
        }
    json_t *vocab = json_object(), *added = json_array();
    int n = wordpiece_vocab_size(w);
    for (int i = 0; i < n; i++) {
        const char *piece = wordpiece_id_to_piece(w, i);
        if (json_object_get(vocab, piece)) {  // a JSON object holds a token once: ids would shift
            json_decref(vocab);
            json_decref(added);
            snprintf(s.message, sizeof s.message, "token %d (\"%.60s\") appears twice in the vocabulary", i, piece);
            return s;
        }
        json_object_set_new(vocab, piece, json_integer(i));
    }
    for (int k = 0; k < 5; k++)
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", ids[k], "content",
                                               wordpiece_id_to_piece(w, ids[k]), "single_word", 0, "lstrip", 0,
                                               "rstrip", 0, "normalized", 0, "special", 1));
    int lower = wordpiece_lower_case(w), strip = wordpiece_strip_accents(w);
    json_t *bert = json_pack("{s:s, s:b, s:b, s:b, s:b}", "type", "BertNormalizer", "clean_text", 1,
                             "handle_chinese_chars", 1, "strip_accents", strip, "lowercase", lower);
    json_t *nfc = json_pack("{s:s}", "type", "NFC");
    json_t *normalizers = strip ? json_pack("[o, o]", nfc, bert) : json_pack("[o, o]", bert, nfc);
    const char *cls = wordpiece_id_to_piece(w, sp.cls), *sep = wordpiece_id_to_piece(w, sp.sep);
    *out = json_pack("{s:s, s:n, s:n, s:o, s:{s:s, s:o}, s:{s:s}, s:o, s:{s:s, s:s, s:b}, "
                     "s:{s:s, s:s, s:s, s:i, s:o}}", "version", "1.0", "truncation", "padding", "added_tokens", added,
                     "normalizer", "type", "Sequence", "normalizers", normalizers, "pre_tokenizer", "type",
                     "BertPreTokenizer", "post_processor", bert_template(cls, sp.cls, sep, sp.sep), "decoder", "type",
                     "WordPiece", "prefix", "##", "cleanup", 1, "model", "type", "WordPiece", "unk_token",
                     wordpiece_id_to_piece(w, sp.unk), "continuing_subword_prefix", "##", "max_input_chars_per_word",
                     100, "vocab", vocab);
    if (!*out) {
        snprintf(s.message, sizeof s.message, "out of memory building tokenizer.json");
        return s;
    }
    s.ok = 1;
    return s;
}
