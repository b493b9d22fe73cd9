// Byte-level BPE (bpe.h) as the `tokenizers` library encodes with a tokenizer.json whose model
// is BPE and whose pre-tokenizer is ByteLevel:
//   1. added tokens: the text is split at the added tokens stored un-normalized ("normalized":
//      false: the specials), found leftmost-longest; a token with single_word matches only
//      between non-word characters, lstrip / rstrip take the whitespace before / after it;
//   2. the pieces between them are normalized (none, or NFC/NFD/NFKC/NFKD through utf8proc),
//      then split at the added tokens stored normalized, likewise;
//   3. each remaining piece gets a leading space with add_prefix_space, and is split by GPT-2's
//      pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (scanned by hand below: \s the Unicode White_Space set, \p{L} / \p{N} the general
//      categories), or kept whole without use_regex;
//   4. each part's bytes become GPT-2's printable characters (byte_char), and BPE merges the
//      adjacent pair of lowest merge rank (the leftmost of equal ones) until none is in the
//      merges; with ignore_merges a part found whole in the vocabulary is taken as it is.
// Decoding maps the pieces' characters back to bytes; added tokens decode to their content.
// What such a file may hold that this does not compute (byte fallback, dropout, subword
// prefixes, other normalizers and pre-tokenizers) is refused at load, naming the field.
#include "tokenizer/bpe.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct {
    int id;
    char *content;
    size_t len;
    int single_word, lstrip, rstrip, normalized;
} added_token;

// Open addressing: string -> id, and (left id, right id) -> merge.
typedef struct {
    const char *key;
    int id;
} str_slot;
typedef struct {
    uint64_t pair;  // (left + 1) << 32 | (right + 1); 0: empty
    int rank, id;
} merge_slot;

struct bpe_model {
    json_t *json;
    int n_ids;          // 1 + the largest id of the vocabulary and the added tokens
    char **piece;       // [n_ids], NULL where no id
    str_slot *vocab;    // the model's vocabulary, power-of-two capacity
    size_t vocab_cap;
    merge_slot *merges;
    size_t merges_cap;
    added_token *added;
    int n_added;
    int *is_added;      // [n_ids]
    unsigned char starts[2][256];  // [normalized][byte]: 1 when an added token of that kind starts with it
    int byte_id[256];   // the id of each byte's character, -1 when the vocabulary lacks it
    char byte_char[256][3];  // GPT-2's printable character of each byte, UTF-8 (NUL-terminated)
    int char_byte[512];      // the inverse: code point -> byte, -1 elsewhere
    utf8proc_option_t normalize;  // 0: none
    int add_prefix_space, use_regex, ignore_merges, unk;
    tokenizer_special_ids specials;
};

static tokenizer_status bad(const char *path, const char *fmt, const char *what) {
    tokenizer_status s = {0, ""};
    char msg[400];
    snprintf(msg, sizeof msg, fmt, what);
    snprintf(s.message, sizeof s.message, "%s: %s", path, msg);
    return s;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}
static uint64_t hash_pair(uint64_t p) {
    p ^= p >> 33;
    p *= 0xff51afd7ed558ccdull;
    return p ^ (p >> 33);
}

static int vocab_find(const bpe_model *m, const char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & (m->vocab_cap - 1);; i = (i + 1) & (m->vocab_cap - 1)) {
        const str_slot *e = &m->vocab[i];
        if (!e->key) return -1;
        if (strlen(e->key) == n && !memcmp(e->key, s, n)) return e->id;
    }
}
static void vocab_put(bpe_model *m, const char *key, int id) {
    size_t i = hash_bytes(key, strlen(key)) & (m->vocab_cap - 1);
    while (m->vocab[i].key) i = (i + 1) & (m->vocab_cap - 1);
    m->vocab[i] = (str_slot){key, id};
}
static const merge_slot *merge_find(const bpe_model *m, int a, int b) {
    uint64_t p = ((uint64_t)(a + 1) << 32) | (uint64_t)(b + 1);
    for (size_t i = hash_pair(p) & (m->merges_cap - 1);; i = (i + 1) & (m->merges_cap - 1)) {
        const merge_slot *e = &m->merges[i];
        if (!e->pair) return NULL;
        if (e->pair == p) return e;
    }
}
static int merge_put(bpe_model *m, int a, int b, int rank, int id) {
    uint64_t p = ((uint64_t)(a + 1) << 32) | (uint64_t)(b + 1);
    size_t i = hash_pair(p) & (m->merges_cap - 1);
    while (m->merges[i].pair) {
        if (m->merges[i].pair == p) return 0;  // a repeated merge keeps its first rank
        i = (i + 1) & (m->merges_cap - 1);
    }
    m->merges[i] = (merge_slot){p, rank, id};
    return 1;
}
static size_t capacity_for(size_t n) {
    size_t c = 16;
    while (c < 2 * n + 1) c *= 2;
    return c;
}

// GPT-2's byte <-> printable character map: the printable Latin-1 bytes ('!'..'~', 0xA1..0xAC,
// 0xAE..0xFF) stand for themselves, the other 68 bytes for U+0100 onward in byte order.
static void byte_chars(bpe_model *m) {
    int next = 256;
    for (int i = 0; i < 512; i++) m->char_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        int cp = printable ? b : next++;
        m->char_byte[cp] = b;
        utf8proc_uint8_t buf[4];
        utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
        memcpy(m->byte_char[b], buf, (size_t)n);
        m->byte_char[b][n] = 0;
    }
}

// Unicode White_Space (Rust's char::is_whitespace, the pattern's \s).
static int is_space(int32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
static int is_letter(int32_t c) {
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO;
}
static int is_number(int32_t c) {
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}
static int is_word_char(int32_t c) { return c == '_' || is_letter(c) || is_number(c); }
// The pattern's classes: 1 \p{L}, 2 \p{N}, 0 \s, 3 the rest.
static int char_class(int32_t c) { return is_letter(c) ? 1 : is_number(c) ? 2 : is_space(c) ? 0 : 3; }

// The code point at s[i] (n bytes in all) and its length; invalid UTF-8 reads as one byte.
static int32_t char_at(const char *s, size_t n, size_t i, int *len) {
    int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
    if (k <= 0) {
        *len = 1;
        return (unsigned char)s[i];
    }
    *len = (int)k;
    return c;
}
// The code point that ends before s[i], and its length.
static int32_t char_before(const char *s, size_t i, int *len) {
    size_t j = i;
    do j--;
    while (j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80 && i - j < 4);
    return char_at(s, i, j, len);
}

typedef struct {
    int **ids;
    size_t *n, *cap;
} out_ids;

static int push(out_ids *o, int id) {
    if (*o->n == *o->cap) {
        size_t c = *o->cap ? 2 * *o->cap : 64;
        int *p = realloc(*o->ids, c * sizeof(int));
        if (!p) return 0;
        *o->ids = p, *o->cap = c;
    }
    (*o->ids)[(*o->n)++] = id;
    return 1;
}

// Step 4 for one part of the text (its raw bytes).
static int bpe_part(const bpe_model *m, const unsigned char *s, size_t n, out_ids *o) {
    if (m->ignore_merges) {
        char whole[1024];
        size_t k = 0;
        for (size_t i = 0; i < n && k + 3 < sizeof whole; i++) k += (size_t)sprintf(whole + k, "%s", m->byte_char[s[i]]);
        int id = k + 3 < sizeof whole ? vocab_find(m, whole, k) : -1;
        if (id >= 0) return push(o, id);
    }
    int stack[256], *sym = n <= 256 ? stack : malloc(n * sizeof(int));
    if (!sym) return 0;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        int id = m->byte_id[s[i]];
        if (id < 0) id = m->unk;  // a byte without a character token: [UNK], or nothing without one
        if (id >= 0) sym[len++] = id;
    }
    for (;;) {
        int best = -1, rank = 0, merged = 0;
        for (size_t i = 0; i + 1 < len; i++) {
            const merge_slot *e = merge_find(m, sym[i], sym[i + 1]);
            if (e && (best < 0 || e->rank < rank)) best = (int)i, rank = e->rank, merged = e->id;
        }
        if (best < 0) break;
        sym[best] = merged;
        memmove(sym + best + 1, sym + best + 2, (len - (size_t)best - 2) * sizeof(int));
        len--;
    }
    int ok = 1;
    for (size_t i = 0; i < len && ok; i++) ok = push(o, sym[i]);
    if (sym != stack) free(sym);
    return ok;
}

// Step 3: GPT-2's pattern over s[0..n) (normalized text, with the prefix space already
// added), each match through bpe_part.
static int pre_tokenize(const bpe_model *m, const char *s, size_t n, out_ids *o) {
    if (!m->use_regex) return bpe_part(m, (const unsigned char *)s, n, o);
    size_t i = 0;
    while (i < n) {
        int len;
        int32_t c = char_at(s, n, i, &len);
        size_t end = 0;
        if (c == '\'' && i + 1 < n) {  // 's 't 're 've 'm 'll 'd
            char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
            if (a == 's' || a == 't' || a == 'm' || a == 'd') end = i + 2;
            else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) end = i + 3;
        }
        if (!end) {  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
            size_t j = c == ' ' && i + 1 < n ? i + 1 : i;  // the optional leading space
            int32_t d = j == i ? c : char_at(s, n, j, &len);
            int kind = char_class(d);
            if (kind) {  // d is of it: end > i
                for (end = j; end < n && char_class(char_at(s, n, end, &len)) == kind;) end += (size_t)len;
            }
        }
        if (!end) {  // '\s+(?!\S)', else '\s+': a run before a word leaves its last space to it
            size_t run = i, last = i;
            while (run < n && is_space(char_at(s, n, run, &len))) last = run, run += (size_t)len;
            end = run == n || last == i ? run : last;
        }
        if (!bpe_part(m, (const unsigned char *)s + i, end - i, o)) return 0;
        i = end;
    }
    return 1;
}

// Text between added tokens: with prefix (the ByteLevel pre-tokenizer's add_prefix_space) a
// space first unless it starts with one, then the pattern.
static int between_normalized(const bpe_model *m, const char *s, size_t n, out_ids *o) {
    if (!m->add_prefix_space || (n && s[0] == ' ')) return pre_tokenize(m, s, n, o);
    char *spaced = malloc(n + 1);
    if (!spaced) return 0;
    spaced[0] = ' ';
    memcpy(spaced + 1, s, n);
    int ok = pre_tokenize(m, spaced, n + 1, o);
    free(spaced);
    return ok;
}

static int split_added(const bpe_model *m, const char *s, size_t n, int normalized, out_ids *o);

// Raw text between the un-normalized added tokens: normalized, then split at the others.
static int between_raw(const bpe_model *m, const char *s, size_t n, out_ids *o) {
    if (!m->normalize) return split_added(m, s, n, 1, o);
    utf8proc_uint8_t *norm = NULL;
    utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &norm, m->normalize);
    int ok = k >= 0 ? split_added(m, (const char *)norm, (size_t)k, 1, o) : split_added(m, s, n, 1, o);
    free(norm);
    return ok;
}

// Steps 1-2: the added tokens stored normalized (or not) found in s[0..n) leftmost-longest,
// the text between them passed on.
static int split_added(const bpe_model *m, const char *s, size_t n, int normalized, out_ids *o) {
    size_t pos = 0, from = 0;
    for (;;) {
        size_t start = 0, stop = 0;
        const added_token *hit = NULL;
        for (size_t i = pos; i < n && !hit; i++)
            for (int t = 0; t < m->n_added && m->starts[normalized][(unsigned char)s[i]]; t++) {
                const added_token *a = &m->added[t];
                if (a->normalized != normalized || a->len > n - i || memcmp(s + i, a->content, a->len)) continue;
                if (!hit || a->len > hit->len) hit = a, start = i, stop = i + a->len;
            }
        if (!hit) break;
        pos = stop;
        int l;
        if (hit->single_word && ((start > 0 && is_word_char(char_before(s, start, &l))) ||
                                 (stop < n && is_word_char(char_at(s, n, stop, &l)))))
            continue;
        if (hit->lstrip)
            while (start > from && is_space(char_before(s, start, &l))) start -= (size_t)l;
        if (hit->rstrip)
            while (stop < n && is_space(char_at(s, n, stop, &l))) stop += (size_t)l;
        if (start > from && !(normalized ? between_normalized : between_raw)(m, s + from, start - from, o)) return 0;
        if (!push(o, hit->id)) return 0;
        from = pos = stop;
    }
    return from < n ? (normalized ? between_normalized : between_raw)(m, s + from, n - from, o) : 1;
}

tokenizer_status bpe_encode_append(const bpe_model *m, const char *text, size_t len, int **ids, size_t *n,
                                   size_t *cap) {
    out_ids o = {ids, n, cap};
    tokenizer_status s = {1, ""};
    if (!split_added(m, text, len, 0, &o)) s = (tokenizer_status){0, "out of host memory while tokenizing"};
    return s;
}

tokenizer_status bpe_decode(const bpe_model *m, const int *ids, size_t n, char **text) {
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    if (!out) return (tokenizer_status){0, "out of host memory"};
    for (size_t k = 0; k < n; k++) {
        if (ids[k] < 0 || ids[k] >= m->n_ids || !m->piece[ids[k]]) {
            free(out);
            tokenizer_status s = {0, ""};
            snprintf(s.message, sizeof s.message, "id %d is outside the vocabulary of %d", ids[k], m->n_ids);
            return s;
        }
        const char *p = m->piece[ids[k]];
        size_t pl = strlen(p);
        if (len + pl + 1 > cap) {
            while (len + pl + 1 > cap) cap *= 2;
            char *q = realloc(out, cap);
            if (!q) {
                free(out);
                return (tokenizer_status){0, "out of host memory"};
            }
            out = q;
        }
        if (m->is_added[ids[k]]) {  // added tokens: their content as it is
            memcpy(out + len, p, pl);
            len += pl;
            continue;
        }
        for (size_t i = 0; i < pl;) {  // each character back to its byte
            int l;
            int32_t c = char_at(p, pl, i, &l);
            if (c >= 0 && c < 512 && m->char_byte[c] >= 0) out[len++] = (char)m->char_byte[c];
            else memcpy(out + len, p + i, (size_t)l), len += (size_t)l;
            i += (size_t)l;
        }
    }
    out[len] = 0;
    *text = out;
    return (tokenizer_status){1, ""};
}

int bpe_file_is_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') {}
    fclose(f);
    return c == '{';
}

int bpe_vocab_size(const bpe_model *m) { return m->n_ids; }
tokenizer_special_ids bpe_specials(const bpe_model *m) { return m->specials; }
int bpe_piece_to_id(const bpe_model *m, const char *piece) {
    for (int t = 0; t < m->n_added; t++)
        if (!strcmp(m->added[t].content, piece)) return m->added[t].id;
    return vocab_find(m, piece, strlen(piece));
}
const char *bpe_id_to_piece(const bpe_model *m, int id) { return id >= 0 && id < m->n_ids ? m->piece[id] : NULL; }
tokenizer_status bpe_fast_json(const bpe_model *m, struct json_t **out) {
    *out = json_deep_copy(m->json);
    return *out ? (tokenizer_status){1, ""} : (tokenizer_status){0, "out of host memory"};
}

void bpe_free(bpe_model *m) {
    if (!m) return;
    json_decref(m->json);
    if (m->piece)
        for (int i = 0; i < m->n_ids; i++) free(m->piece[i]);
    free(m->piece), free(m->vocab), free(m->merges), free(m->is_added);
    for (int t = 0; t < m->n_added; t++) free(m->added[t].content);
    free(m->added);
    free(m);
}

// A normalizer bpe.c computes: none, a Unicode normal form, or a Sequence of those (applied
// in turn: composed into the strongest, which is the same result for these four).
static const char *normalizer_of(json_t *n, utf8proc_option_t *opt) {
    if (!n || json_is_null(n)) return NULL;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!type) return "normalizer without a type";
    if (!strcmp(type, "Sequence")) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(n, "normalizers"), i, e) {
            const char *why = normalizer_of(e, opt);
            if (why) return why;
        }
        return NULL;
    }
    utf8proc_option_t base = UTF8PROC_STABLE;
    if (!strcmp(type, "NFC")) *opt |= base | UTF8PROC_COMPOSE;
    else if (!strcmp(type, "NFD")) *opt |= base | UTF8PROC_DECOMPOSE;
    else if (!strcmp(type, "NFKC")) *opt |= base | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    else if (!strcmp(type, "NFKD")) *opt |= base | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    else return type;
    if ((*opt & UTF8PROC_COMPOSE) && (*opt & UTF8PROC_DECOMPOSE)) return "NFC and NFD together";
    return NULL;
}

static int flag(json_t *o, const char *key, int dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

tokenizer_status bpe_load(bpe_model **out, const char *path) {
    *out = NULL;
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        tokenizer_status s = {0, ""};
        snprintf(s.message, sizeof s.message, "%s: line %d: %s", path, err.line, err.text);
        return s;
    }
    bpe_model *m = calloc(1, sizeof *m);
    if (!m) {
        json_decref(root);
        return bad(path, "%s", "out of host memory");
    }
    m->json = root;
    m->unk = -1;
    tokenizer_status s = {1, ""};
    json_t *model = json_object_get(root, "model"), *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    const char *type = json_string_value(json_object_get(model, "type"));
#define FAIL(...) do { s = bad(path, __VA_ARGS__); goto done; } while (0)
    if (!json_is_object(model)) FAIL("%s", "no 'model' object: not a tokenizer.json of the tokenizers library");
    if (type && strcmp(type, "BPE"))
        FAIL("field 'model.type' = \"%s\": bertpre reads a JSON object as a BPE tokenizer.json; for WordPiece give "
             "its vocab.txt, for SentencePiece its .model", type);
    if (!json_is_object(vocab) || !json_is_array(merges)) FAIL("%s", "BPE 'model' without a 'vocab' object and a 'merges' array");
    json_t *v = json_object_get(model, "dropout");
    if (v && !json_is_null(v) && json_number_value(v) != 0.0) FAIL("%s", "field 'model.dropout' is set: BPE dropout is for training only");
    if (flag(model, "byte_fallback", 0)) FAIL("%s", "field 'model.byte_fallback' = true is not computed here");
    const char *cont = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    const char *suffix = json_string_value(json_object_get(model, "end_of_word_suffix"));
    if ((cont && *cont) || (suffix && *suffix))
        FAIL("%s", "field 'model.continuing_subword_prefix' or 'model.end_of_word_suffix' is set: bertpre reads "
                   "byte-level BPE without them");
    m->ignore_merges = flag(model, "ignore_merges", 0);
    // The pre-tokenizer: ByteLevel (alone, or the one step of a Sequence).
    json_t *pre = json_object_get(root, "pre_tokenizer");
    const char *pre_type = json_string_value(json_object_get(pre, "type"));
    if (pre_type && !strcmp(pre_type, "Sequence") && json_array_size(json_object_get(pre, "pretokenizers")) == 1) {
        pre = json_array_get(json_object_get(pre, "pretokenizers"), 0);
        pre_type = json_string_value(json_object_get(pre, "type"));
    }
    if (!pre_type || strcmp(pre_type, "ByteLevel"))
        FAIL("field 'pre_tokenizer' is %s: bertpre reads byte-level BPE (pre_tokenizer ByteLevel)",
             pre_type ? pre_type : "missing");
    m->add_prefix_space = flag(pre, "add_prefix_space", 1);
    m->use_regex = flag(pre, "use_regex", 1);
    const char *why = normalizer_of(json_object_get(root, "normalizer"), &m->normalize);
    if (why) FAIL("normalizer %s is not computed here (none, NFC, NFD, NFKC, NFKD)", why);
    // Ids: the vocabulary's and the added tokens'.
    const char *key;
    m->n_ids = 0;
    json_object_foreach(vocab, key, v) {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= (1 << 24)) FAIL("vocabulary entry \"%s\" has no id in [0, 2^24)", key);
        if (id + 1 > m->n_ids) m->n_ids = (int)id + 1;
    }
    json_t *added = json_object_get(root, "added_tokens");
    size_t i;
    json_array_foreach(added, i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (!json_is_string(json_object_get(v, "content")) || id < 0 || id >= (1 << 24))
            FAIL("%s", "an added token without a content string and an id in [0, 2^24)");
        if (id + 1 > m->n_ids) m->n_ids = (int)id + 1;
    }
    m->piece = calloc((size_t)m->n_ids, sizeof(char *));
    m->is_added = calloc((size_t)m->n_ids, sizeof(int));
    m->vocab_cap = capacity_for(json_object_size(vocab));
    m->vocab = calloc(m->vocab_cap, sizeof(str_slot));
    m->added = calloc(json_array_size(added) + 1, sizeof(added_token));
    if (!m->piece || !m->is_added || !m->vocab || !m->added) FAIL("%s", "out of host memory");
    json_object_foreach(vocab, key, v) {
        int id = (int)json_integer_value(v);
        if (m->piece[id]) FAIL("id %s is given to two vocabulary entries", key);
        if (!(m->piece[id] = strdup(key))) FAIL("%s", "out of host memory");
        vocab_put(m, m->piece[id], id);
    }
    json_array_foreach(added, i, v) {
        added_token *a = &m->added[m->n_added++];
        a->id = (int)json_integer_value(json_object_get(v, "id"));
        a->content = strdup(json_string_value(json_object_get(v, "content")));
        if (!a->content) FAIL("%s", "out of host memory");
        a->len = strlen(a->content);
        if (!a->len) FAIL("%s", "an added token with an empty content");
        a->single_word = flag(v, "single_word", 0), a->lstrip = flag(v, "lstrip", 0), a->rstrip = flag(v, "rstrip", 0);
        a->normalized = flag(v, "normalized", !flag(v, "special", 0));
        if (!m->piece[a->id] && !(m->piece[a->id] = strdup(a->content))) FAIL("%s", "out of host memory");
        m->is_added[a->id] = 1;
        m->starts[a->normalized][(unsigned char)a->content[0]] = 1;
    }
    // Merges: "left right" strings or [left, right] pairs, rank their position.
    m->merges_cap = capacity_for(json_array_size(merges));
    m->merges = calloc(m->merges_cap, sizeof(merge_slot));
    if (!m->merges) FAIL("%s", "out of host memory");
    json_array_foreach(merges, i, v) {
        char left[512], right[512];
        if (json_is_string(v)) {
            const char *text = json_string_value(v), *sp = strchr(text, ' ');
            if (!sp || strchr(sp + 1, ' ') || (size_t)(sp - text) >= sizeof left || strlen(sp + 1) >= sizeof right)
                FAIL("merge \"%s\" is not two pieces separated by one space", text);
            memcpy(left, text, (size_t)(sp - text));
            left[sp - text] = 0;
            snprintf(right, sizeof right, "%s", sp + 1);
        } else if (json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
                   json_is_string(json_array_get(v, 1))) {
            snprintf(left, sizeof left, "%s", json_string_value(json_array_get(v, 0)));
            snprintf(right, sizeof right, "%s", json_string_value(json_array_get(v, 1)));
        } else {
            char at[32];
            snprintf(at, sizeof at, "%zu", i);
            FAIL("merge %s is neither a string nor a pair of strings", at);
        }
        char both[1024];
        snprintf(both, sizeof both, "%s%s", left, right);
        int a = vocab_find(m, left, strlen(left)), b = vocab_find(m, right, strlen(right));
        int c = vocab_find(m, both, strlen(both));
        if (a < 0 || b < 0 || c < 0) FAIL("merge \"%s\" names a piece that is not in the vocabulary", both);
        merge_put(m, a, b, (int)i, c);
    }
    byte_chars(m);
    for (int b = 0; b < 256; b++) m->byte_id[b] = vocab_find(m, m->byte_char[b], strlen(m->byte_char[b]));
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    if (unk) m->unk = vocab_find(m, unk, strlen(unk));
    m->specials = (tokenizer_special_ids){bpe_piece_to_id(m, "[PAD]"), unk ? m->unk : bpe_piece_to_id(m, "[UNK]"),
                                          bpe_piece_to_id(m, "[CLS]"), bpe_piece_to_id(m, "[SEP]"),
                                          bpe_piece_to_id(m, "[MASK]")};
#undef FAIL
done:
    if (!s.ok) {
        bpe_free(m);
        return s;
    }
    *out = m;
    return s;
}
