// WordPiece as BERT tokenizes (the reference: transformers' BertTokenizer, the same algorithm
// as google-research/bert's tokenization.py), from a vocab.txt of one token per line, the
// line number (from 0) being the id.
//
// Per input text:
//   1. The special tokens [PAD] [UNK] [CLS] [SEP] [MASK], written exactly, are cut out and
//      kept whole; the pieces between them are tokenized on their own.
//   2. Uncased: each character lower-cased (Unicode full mapping, as Python's str.lower() on
//      one character: U+0130 becomes "i" + U+0307).
//   3. Cleaning: NUL, U+FFFD and every character of a category C* (control, format,
//      unassigned, private use, surrogate) except tab, newline and carriage return dropped;
//      white space (those three, space, category Zs) made a space.
//   4. CJK ideographs (BERT's block list) set apart by spaces.
//   5. NFC; split on white space (space, and U+2028/U+2029, which Python's str.split() splits
//      on too). A word equal to a special token is that token.
//   6. Per word: uncased, lower-cased again and, with strip_accents, NFD with the marks of
//      category Mn removed (the result stays decomposed, as BERT leaves it); cased with
//      strip_accents, only the latter.
//   7. Punctuation split out, one character a word: ASCII 33-47, 58-64, 91-96, 123-126 and
//      every category P* character.
//   8. Greedy longest-match-first per word: the longest vocabulary token that starts the
//      word, then the longest "##"-token that starts the rest, and so on; a word with a rest
//      that no token starts, or longer than 100 characters, is the single token [UNK].
//
// Speed: the text goes by runs between ASCII white space. A run of ASCII without control
// characters (most of English text) is tokenized in one pass over its bytes with byte tables
// (every step above is the identity or a table lookup on ASCII); any other run takes the
// Unicode steps above through utf8proc, in stack buffers (heap only for a run over 512 bytes).
// The vocabulary is a byte trie whose children are found in one open-addressing hash table
// (the root's and "##"'s children in direct tables), so step 8 is one probe per byte of the
// word and the longest match falls out of a single walk.
//
// Invalid UTF-8 in the text is read as U+FFFD, which step 3 drops.
#include "tokenizer/wordpiece.h"

#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>
#include "kernels/common/json_any.h"

enum { MAX_WORD_CHARS = 100, N_SPECIAL = 5, STACK_RUN = 512 };
static const char *const special_names[N_SPECIAL] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

struct wordpiece {
    int n;             // tokens
    char *pool;        // the file's bytes, each token NUL-terminated in place
    uint32_t *offset;  // token i at pool + offset[i]
    int32_t *node_id;  // trie node -> token id, or -1
    int n_nodes;
    uint64_t *table;   // (parent << 8 | byte) << 32 | child; child 0 (the root) marks a free slot
    uint64_t mask;
    int shift;
    int32_t root_child[256], cont_child[256];
    int cont;          // the node of "##", or -1
    int special_id[N_SPECIAL];
    int ascii_id[128];  // id of a one-character ASCII word, [UNK] when not in the vocabulary
    int lower, strip;
    int lower_by_default;  // no option and no tokenizer_config.json chose the casing
    int lower_from;        // what chose it: CASING_FROM_* below
    int json_lower;        // the lowercase of a tokenizer.json beside the vocabulary, or -1
    int upper_tokens;      // tokens holding an upper-case ASCII letter, [bracketed] ones aside
};

static tokenizer_status ok_status(void) {
    tokenizer_status s = {1, ""};
    return s;
}

static tokenizer_status error_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static tokenizer_status error_status(const char *fmt, ...) {
    tokenizer_status s = {0, ""};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s.message, sizeof s.message, fmt, ap);
    va_end(ap);
    return s;
}

// ---- the trie ------------------------------------------------------------------------------

static inline uint64_t slot_of(const wordpiece *w, uint32_t key) {
    return ((uint64_t)key * 0x9E3779B97F4A7C15ull) >> w->shift;
}

static inline int hashed_child(const wordpiece *w, int node, unsigned char byte) {
    uint32_t key = (uint32_t)node << 8 | byte;
    for (uint64_t h = slot_of(w, key);; h = (h + 1) & w->mask) {
        uint64_t e = w->table[h];
        if ((uint32_t)e == 0) return -1;
        if ((uint32_t)(e >> 32) == key) return (int)(uint32_t)e;
    }
}

static inline int child(const wordpiece *w, int node, unsigned char byte) {
    if (node == 0) return w->root_child[byte];
    if (node == w->cont) return w->cont_child[byte];
    return hashed_child(w, node, byte);
}

// Inserts token `id` (bytes s[0..len)); returns 0 when the trie would exceed its node limit.
static int trie_insert(wordpiece *w, const unsigned char *s, size_t len, int id) {
    int node = 0;
    for (size_t i = 0; i < len; i++) {
        int next = hashed_child(w, node, s[i]);
        if (next < 0) {
            if (w->n_nodes >= (1 << 24) - 1) return 0;
            next = w->n_nodes++;
            w->node_id[next] = -1;
            uint32_t key = (uint32_t)node << 8 | s[i];
            uint64_t h = slot_of(w, key);
            while ((uint32_t)w->table[h] != 0) h = (h + 1) & w->mask;
            w->table[h] = (uint64_t)key << 32 | (uint32_t)next;
        }
        node = next;
    }
    w->node_id[node] = id;
    return 1;
}

// The id of a whole token, or -1 (`built`: the direct tables are filled; while loading they
// are not, and only the hash table answers).
static int lookup_in(const wordpiece *w, const char *s, size_t len, int built) {
    int node = 0;
    for (size_t i = 0; i < len && node >= 0; i++)
        node = built ? child(w, node, (unsigned char)s[i]) : hashed_child(w, node, (unsigned char)s[i]);
    return node >= 0 ? w->node_id[node] : -1;
}

static int lookup(const wordpiece *w, const char *s, size_t len) { return lookup_in(w, s, len, 1); }

// ---- output ids ----------------------------------------------------------------------------

typedef struct {
    int *ids;
    size_t n, cap;
    int failed;  // out of memory
} id_out;

static inline void push(id_out *o, int id) {
    if (o->n == o->cap) {
        size_t grown = o->cap ? 2 * o->cap : 256;
        int *p = realloc(o->ids, grown * sizeof(int));
        if (!p) {
            o->failed = 1;
            return;
        }
        o->ids = p;
        o->cap = grown;
    }
    o->ids[o->n++] = id;
}

// Step 8 for one word of `chars` characters in bytes s[0..len).
static void emit_word(const wordpiece *w, const unsigned char *s, size_t len, size_t chars, id_out *o) {
    if (len == 0) return;
    int unk = w->special_id[1];
    if (chars > MAX_WORD_CHARS) {
        push(o, unk);
        return;
    }
    size_t mark = o->n, pos = 0;
    while (pos < len) {
        int node = pos ? w->cont : 0, best = -1;
        size_t end = pos;
        for (size_t k = pos; k < len && node >= 0; k++) {
            node = child(w, node, s[k]);
            if (node >= 0 && w->node_id[node] >= 0) best = w->node_id[node], end = k + 1;
        }
        if (best < 0) {
            o->n = mark;
            push(o, unk);
            return;
        }
        push(o, best);
        pos = end;
    }
}

// The special token starting at s[0..len), or -1 (s[0] == '[' is checked by the caller).
static int special_at(const wordpiece *w, const char *s, size_t len, size_t *matched) {
    for (int k = 0; k < N_SPECIAL; k++) {
        size_t l = strlen(special_names[k]);
        if (l <= len && !memcmp(s, special_names[k], l)) {
            *matched = l;
            return k;
        }
    }
    return -1;
}

// ---- the ASCII fast path -------------------------------------------------------------------

enum { C_WORD, C_PUNCT, C_SPACE, C_CONTROL, C_HIGH };
static unsigned char byte_class[256];
static unsigned char ascii_lower[128];

static void init_tables(void) {
    for (int c = 0; c < 256; c++) {
        int k = C_WORD;
        if (c >= 0x80) k = C_HIGH;
        else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') k = C_SPACE;
        else if (c < 0x20 || c == 0x7f) k = C_CONTROL;
        else if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))
            k = C_PUNCT;
        byte_class[c] = (unsigned char)k;
        if (c < 128) ascii_lower[c] = (unsigned char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
}

// A run of printable ASCII (no white space, no control character).
static void ascii_run(const wordpiece *w, const unsigned char *s, size_t len, id_out *o) {
    unsigned char word[MAX_WORD_CHARS + 1];
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (byte_class[c] == C_PUNCT) {
            size_t l;
            int k = c == '[' ? special_at(w, (const char *)s + i, len - i, &l) : -1;
            if (k >= 0) {
                push(o, w->special_id[k]);
                i += l;
            } else {
                push(o, w->ascii_id[c]);
                i++;
            }
            continue;
        }
        size_t j = i;
        while (j < len && byte_class[s[j]] == C_WORD) j++;
        size_t l = j - i;
        if (l > MAX_WORD_CHARS) {
            push(o, w->special_id[1]);
        } else if (w->lower) {
            for (size_t k = 0; k < l; k++) word[k] = ascii_lower[s[i + k]];
            emit_word(w, word, l, l, o);
        } else {
            emit_word(w, s + i, l, l, o);
        }
        i = j;
    }
}

// ---- the Unicode path ----------------------------------------------------------------------

// One code point from s[0..len) (len > 0); invalid UTF-8 (overlong, surrogate, beyond
// U+10FFFF, truncated) is one byte read as U+FFFD.
static inline int32_t next_cp(const unsigned char *s, size_t len, size_t *used) {
    unsigned c = s[0];
    *used = 1;
    if (c < 0x80) return (int32_t)c;
    int n;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) n = 1, cp = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef) n = 2, cp = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4) n = 3, cp = c & 0x07, min = 0x10000;
    else return 0xFFFD;
    if ((size_t)n >= len) return 0xFFFD;
    for (int k = 1; k <= n; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0xFFFD;
        cp = cp << 6 | (s[k] & 0x3f);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0xFFFD;
    *used = (size_t)n + 1;
    return (int32_t)cp;
}

static int is_cjk(int32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
           (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) ||
           (cp >= 0x2B820 && cp <= 0x2CEAF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

static int is_control_category(utf8proc_category_t c) {
    return c == UTF8PROC_CATEGORY_CN || c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF ||
           c == UTF8PROC_CATEGORY_CS || c == UTF8PROC_CATEGORY_CO;
}

static int is_punct(int32_t cp) {
    if (cp < 128) return byte_class[cp] == C_PUNCT;
    utf8proc_category_t c = utf8proc_category(cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

// Lower-cases cp into out (1 or 2 code points); returns the count.
static int lower_cp(int32_t cp, int32_t *out) {
    if (cp < 128) {
        out[0] = ascii_lower[cp];
        return 1;
    }
    if (cp == 0x130) {  // the one unconditional multi-character lower case mapping
        out[0] = 'i';
        out[1] = 0x307;
        return 2;
    }
    out[0] = utf8proc_tolower(cp);
    return 1;
}

// Canonical decomposition of in[0..n) into out (capacity 4n + 4 suffices: no code point
// decomposes canonically into more than 4), put in canonical order; returns the count.
static size_t decompose(const int32_t *in, size_t n, int32_t *out) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int boundclass = 0;
        if (in[i] < 0xC0) {  // nothing below U+00C0 decomposes canonically
            out[m++] = in[i];
            continue;
        }
        utf8proc_ssize_t r = utf8proc_decompose_char(in[i], out + m, 4, UTF8PROC_DECOMPOSE, &boundclass);
        m += r > 0 && r <= 4 ? (size_t)r : 0;
    }
    // Canonical ordering: marks of a higher combining class move after lower non-zero ones.
    for (size_t k = 0; k + 1 < m;) {
        if (out[k + 1] < 0x300) {
            k++;
            continue;
        }
        int a = utf8proc_get_property(out[k])->combining_class, b = utf8proc_get_property(out[k + 1])->combining_class;
        if (b > 0 && a > b) {
            int32_t t = out[k];
            out[k] = out[k + 1];
            out[k + 1] = t;
            if (k > 0) k--;
        } else {
            k++;
        }
    }
    return m;
}

typedef struct {
    int32_t *a;            // the cleaned text (capacity: the run's bytes)
    int32_t *b, *c;        // its NFC; a word's NFD (capacity: 4 per byte of the run)
    unsigned char *bytes;  // UTF-8 of a word (4 per code point of c)
} scratch;

// Steps 6-8 for one white-space-separated word, code points w0[0..n) (lower-cased in place).
static void unicode_word(const wordpiece *w, int32_t *w0, size_t n, scratch *s, id_out *o) {
    // A word equal to a special token stays whole (BERT's never_split).
    if (n >= 5 && n <= 6 && w0[0] == '[') {
        char ascii[8];
        size_t k = 0;
        while (k < n && w0[k] < 128) ascii[k] = (char)w0[k], k++;
        size_t l;
        if (k == n) {
            int sp = special_at(w, ascii, n, &l);
            if (sp >= 0 && l == n) {
                push(o, w->special_id[sp]);
                return;
            }
        }
    }
    const int32_t *cps = w0;
    if (w->lower)  // again, as BERT does; after step 2 and NFC only simple mappings remain
        for (size_t i = 0; i < n; i++) w0[i] = w0[i] < 128 ? ascii_lower[w0[i]] : utf8proc_tolower(w0[i]);
    if (w->strip) {
        size_t m = decompose(w0, n, s->c), kept = 0;
        for (size_t i = 0; i < m; i++)
            if (s->c[i] < 0x300 || utf8proc_category(s->c[i]) != UTF8PROC_CATEGORY_MN) s->c[kept++] = s->c[i];
        cps = s->c;
        n = kept;
    }
    // Step 7, then 8 per piece.
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        int punct = i < n && is_punct(cps[i]);
        if (i < n && !punct) continue;
        if (i > start) {
            size_t len = 0;
            for (size_t k = start; k < i; k++) len += (size_t)utf8proc_encode_char(cps[k], s->bytes + len);
            emit_word(w, s->bytes, len, i - start, o);
        }
        if (punct) {
            size_t len = (size_t)utf8proc_encode_char(cps[i], s->bytes);
            emit_word(w, s->bytes, len, 1, o);
        }
        start = i + 1;
    }
}

// Steps 2-8 for text without special tokens: code points into s->a, NFC into s->b.
static void unicode_segment(const wordpiece *w, const unsigned char *t, size_t len, scratch *s, id_out *o) {
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t used;
        int32_t cp = next_cp(t + i, len - i, &used), low[2];
        i += used;
        int k = 1;
        low[0] = cp;
        if (w->lower) k = lower_cp(cp, low);
        for (int j = 0; j < k; j++) {
            cp = low[j];
            if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') {
                s->a[n++] = ' ';
                continue;
            }
            if (cp < 128) {
                if (byte_class[cp] != C_CONTROL) s->a[n++] = cp;
                continue;
            }
            if (cp == 0xFFFD) continue;
            utf8proc_category_t c = utf8proc_category(cp);
            if (is_control_category(c)) continue;
            if (c == UTF8PROC_CATEGORY_ZS) {
                s->a[n++] = ' ';
            } else if (is_cjk(cp)) {
                s->a[n++] = ' ';
                s->a[n++] = cp;
                s->a[n++] = ' ';
            } else {
                s->a[n++] = cp;
            }
        }
    }
    size_t m = decompose(s->a, n, s->b);
    utf8proc_ssize_t composed = utf8proc_normalize_utf32(s->b, (utf8proc_ssize_t)m, UTF8PROC_COMPOSE | UTF8PROC_STABLE);
    m = composed > 0 ? (size_t)composed : 0;
    size_t start = 0;
    for (size_t i = 0; i <= m; i++) {
        int32_t cp = i < m ? s->b[i] : ' ';
        if (cp != ' ' && cp != 0x2028 && cp != 0x2029) continue;
        if (i > start) unicode_word(w, s->b + start, i - start, s, o);
        start = i + 1;
    }
}

// A run between ASCII white space that holds a non-ASCII byte or a control character.
static void unicode_run(const wordpiece *w, const unsigned char *t, size_t len, id_out *o) {
    // Capacity: steps 2-4 give at most one code point per byte (U+0130: 2 bytes, 2 code
    // points; a CJK ideograph: 3 bytes, 3 with its spaces); canonical decomposition at most
    // 4 per code point (and NFD(NFC(x)) = NFD(x)).
    size_t cap = len + 16, cap4 = 4 * len + 16;
    int32_t stack_a[STACK_RUN + 16], stack_b[4 * STACK_RUN + 16], stack_c[4 * STACK_RUN + 16];
    unsigned char stack_bytes[4 * (4 * STACK_RUN + 16)];
    scratch s = {stack_a, stack_b, stack_c, stack_bytes};
    void *heap = NULL;
    if (len > STACK_RUN) {
        heap = malloc((cap + 2 * cap4) * sizeof(int32_t) + 4 * cap4);
        if (!heap) {
            o->failed = 1;
            return;
        }
        s.a = heap;
        s.b = s.a + cap;
        s.c = s.b + cap4;
        s.bytes = (unsigned char *)(s.c + cap4);
    }
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        size_t l;
        int k = t[i] == '[' ? special_at(w, (const char *)t + i, len - i, &l) : -1;
        if (k < 0) continue;
        if (i > start) unicode_segment(w, t + start, i - start, &s, o);
        push(o, w->special_id[k]);
        start = i + l;
        i = start - 1;
    }
    if (len > start) unicode_segment(w, t + start, len - start, &s, o);
    free(heap);
}

tokenizer_status wordpiece_encode_append(const wordpiece *w, const char *text, size_t len, int **ids, size_t *n,
                                         size_t *cap) {
    id_out o = {*ids, *n, *cap, 0};
    const unsigned char *t = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        if (byte_class[t[i]] == C_SPACE) {
            i++;
            continue;
        }
        size_t j = i;
        int plain = 1;
        for (; j < len; j++) {
            unsigned k = byte_class[t[j]];
            if (k == C_SPACE) break;
            plain &= k < C_CONTROL;
        }
        if (plain) ascii_run(w, t + i, j - i, &o);
        else unicode_run(w, t + i, j - i, &o);
        i = j;
    }
    *ids = o.ids;
    *n = o.n;
    *cap = o.cap;
    return o.failed ? error_status("encode: out of host memory") : ok_status();
}

// ---- decoding, lookups ---------------------------------------------------------------------

tokenizer_status wordpiece_decode(const wordpiece *w, const int *ids, size_t n, char **text) {
    *text = NULL;
    size_t size = 1;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= w->n)
            return error_status("decode: id %d at index %zu is outside the vocabulary [0, %d)", ids[i], i, w->n);
        size += strlen(w->pool + w->offset[ids[i]]) + 1;
    }
    char *out = malloc(size), *p = out;
    if (!out) return error_status("decode: out of host memory");
    // BERT's convert_tokens_to_string: joined by spaces, " ##" removed, stripped.
    for (size_t i = 0; i < n; i++) {
        const char *piece = w->pool + w->offset[ids[i]];
        if (i > 0) {
            if (piece[0] == '#' && piece[1] == '#') piece += 2;
            else *p++ = ' ';
        }
        size_t l = strlen(piece);
        memcpy(p, piece, l);
        p += l;
    }
    *p = '\0';
    char *b = out;
    while (*b == ' ') b++;
    while (p > b && p[-1] == ' ') *--p = '\0';
    if (b != out) memmove(out, b, (size_t)(p - b) + 1);
    *text = out;
    return ok_status();
}

int wordpiece_vocab_size(const wordpiece *w) { return w->n; }
int wordpiece_lower_case(const wordpiece *w) { return w->lower; }
int wordpiece_upper_tokens(const wordpiece *w) { return w->upper_tokens; }
int wordpiece_lower_by_default(const wordpiece *w) { return w->lower_by_default; }
int wordpiece_lower_from(const wordpiece *w) { return w->lower_from; }
int wordpiece_json_lower(const wordpiece *w) { return w->json_lower; }
int wordpiece_strip_accents(const wordpiece *w) { return w->strip; }

tokenizer_special_ids wordpiece_specials(const wordpiece *w) {
    tokenizer_special_ids s = {w->special_id[0], w->special_id[1], w->special_id[2], w->special_id[3],
                               w->special_id[4]};
    return s;
}

int wordpiece_piece_to_id(const wordpiece *w, const char *piece) { return lookup(w, piece, strlen(piece)); }

const char *wordpiece_id_to_piece(const wordpiece *w, int id) {
    return id >= 0 && id < w->n ? w->pool + w->offset[id] : NULL;
}

void wordpiece_free(wordpiece *w) {
    if (!w) return;
    free(w->pool);
    free(w->offset);
    free(w->node_id);
    free(w->table);
    free(w);
}

// ---- loading -------------------------------------------------------------------------------

void wordpiece_beside(const char *vocab_path, const char *name, char *path, size_t size) {
    const char *slash = strrchr(vocab_path, '/');
    snprintf(path, size, "%.*s/%s", slash ? (int)(slash - vocab_path) : 1, slash ? vocab_path : ".", name);
}

// The lowercase of a tokenizer.json beside the vocabulary (the `tokenizers` library's file:
// its BertNormalizer, alone or in a Sequence), or -1 when there is none. bertpre reads nothing
// else of it, so a file it cannot read is passed over.
static int tokenizer_json_lower(const char *vocab_path) {
    char path[4096];
    wordpiece_beside(vocab_path, "tokenizer.json", path, sizeof path);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
    json_error_t err;
    json_t *doc = json_any_load_file(path, 0, &err), *norm = json_object_get(doc, "normalizer");
    int lower = -1;
    json_t *list = json_object_get(norm, "normalizers");
    size_t n = json_is_array(list) ? json_array_size(list) : 1;
    for (size_t i = 0; i < n && lower < 0; i++) {
        json_t *one = json_is_array(list) ? json_array_get(list, i) : norm;
        json_t *v = json_object_get(one, "lowercase");
        if (json_is_string(json_object_get(one, "type")) &&
            !strcmp(json_string_value(json_object_get(one, "type")), "BertNormalizer") && json_is_boolean(v))
            lower = json_is_true(v);
    }
    json_decref(doc);
    return lower;
}

// The casing of tokenizer_config.json beside the vocabulary (do_lower_case, strip_accents),
// where there is one; *lower stays -1 without it. *from: CASING_FROM_CONFIG when the file
// says do_lower_case, CASING_FROM_CONFIG_DEFAULT when it does not (BERT's default, true).
static tokenizer_status read_casing(const char *vocab_path, int *lower, int *strip, int *from) {
    char path[4096];
    wordpiece_beside(vocab_path, "tokenizer_config.json", path, sizeof path);
    struct stat st;
    if (stat(path, &st) != 0) return ok_status();
    if (S_ISDIR(st.st_mode)) return error_status("%s: a directory, where a tokenizer_config.json file is read", path);
    FILE *f = fopen(path, "rb");
    if (!f) return error_status("%s: cannot open: %s", path, strerror(errno));
    unsigned char head[3] = {0};
    size_t got = fread(head, 1, 3, f);
    fclose(f);
    if (got == 3 && !memcmp(head, "\xef\xbb\xbf", 3))
        return error_status("%s: starts with a byte-order mark (EF BB BF), which JSON does not allow (Python's "
                            "json refuses it too): save the file as UTF-8 without a BOM", path);
    json_error_t err;
    json_t *cfg = json_any_load_file(path, 0, &err);
    if (!cfg) return error_status("%s:%d: not JSON: %s", path, err.line, err.text);
    if (!json_is_object(cfg)) {
        const char *kind = json_is_array(cfg) ? "array" : "value";
        json_decref(cfg);
        return error_status("%s: a JSON %s, not an object of settings", path, kind);
    }
    tokenizer_status s = ok_status();
    json_t *v = json_object_get(cfg, "do_lower_case");
    if (v && !json_is_boolean(v)) s = error_status("%s: do_lower_case must be true or false", path);
    else if (json_is_boolean(v)) *lower = json_is_true(v), *from = CASING_FROM_CONFIG;
    else if (json_is_object(cfg)) *lower = 1, *from = CASING_FROM_CONFIG_DEFAULT;  // BertTokenizer's default
    v = json_object_get(cfg, "strip_accents");
    if (s.ok && v && !json_is_null(v) && !json_is_boolean(v))
        s = error_status("%s: strip_accents must be true, false or null", path);
    else if (json_is_boolean(v) && *strip < 0) *strip = json_is_true(v);
    json_decref(cfg);
    return s;
}

static int utf8_valid(const unsigned char *s, size_t len, size_t *bad) {
    for (size_t i = 0; i < len;) {
        size_t used;
        int32_t cp = next_cp(s + i, len - i, &used);
        if (cp == 0xFFFD && !(used == 3 && s[i] == 0xef && s[i + 1] == 0xbf && s[i + 2] == 0xbd)) {
            *bad = i;
            return 0;
        }
        i += used;
    }
    return 1;
}

tokenizer_status wordpiece_load(wordpiece **out, const char *path, int lower_case, int strip_accents) {
    static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
    pthread_once(&tables_once, init_tables);
    *out = NULL;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return error_status("%s: a directory, not a WordPiece vocab.txt or SentencePiece model (give the file, "
                            "e.g. %s/vocab.txt)", path, path);
    FILE *f = fopen(path, "rb");
    if (!f) return error_status("%s: cannot open: %s", path, strerror(errno));
    wordpiece *w = calloc(1, sizeof *w);
    size_t size = 0, cap = 1 << 16;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + size, 1, cap - size, f)) > 0) {
        size += got;
        if (size == cap) {
            char *grown = realloc(buf, 2 * cap + 1);
            if (!grown) free(buf);
            buf = grown;
            cap *= 2;
        }
    }
    int read_error = ferror(f);
    fclose(f);
    if (!w || !buf) {
        free(w);
        free(buf);
        return error_status("%s: out of host memory", path);
    }
    w->pool = buf;
    tokenizer_status s = ok_status();
#define FAIL(...)                        \
    do {                                 \
        s = error_status(__VA_ARGS__);   \
        goto done;                       \
    } while (0)
    if (read_error) FAIL("%s: read error", path);
    if (size == 0) FAIL("%s: empty file (a WordPiece vocabulary has one token per line)", path);
    if (size >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3))
        FAIL("%s:1: starts with a byte-order mark (EF BB BF); BERT reads it as part of the first token: save "
             "the file as UTF-8 without a BOM", path);
    {
        size_t k = 0;
        while (k < size && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\n' || buf[k] == '\r')) k++;
        if (k < size && buf[k] == '{')
            FAIL("%s: a JSON object (a tokenizer.json or tokenizer_config.json?), not a vocab.txt of one token per "
                 "line: give the vocab.txt of the same tokenizer", path);
    }
    // Line ends as BertTokenizer reads them (Python's text mode): LF, CR LF and CR alike.
    {
        size_t to = 0;
        for (size_t k = 0; k < size; k++) {
            if (buf[k] == '\r') {
                buf[to++] = '\n';
                if (k + 1 < size && buf[k + 1] == '\n') k++;
            } else {
                buf[to++] = buf[k];
            }
        }
        size = to;
    }
    size_t lines = 0;
    for (size_t i = 0; i < size; i++) lines += buf[i] == '\n';
    if (buf[size - 1] != '\n') lines++;
    w->offset = malloc(lines * sizeof(uint32_t));
    // Nodes: at most one per byte, plus the root.
    w->node_id = malloc((size + 1) * sizeof(int32_t));
    size_t slots = 16;
    while (slots < 2 * (size + 1)) slots *= 2;
    w->table = calloc(slots, sizeof(uint64_t));
    if (!w->offset || !w->node_id || !w->table) FAIL("%s: out of host memory", path);
    if (size > UINT32_MAX) FAIL("%s: larger than 4 GB", path);
    w->mask = slots - 1;
    w->shift = 64;
    for (size_t m = slots; m > 1; m >>= 1) w->shift--;
    w->n_nodes = 1;
    w->node_id[0] = -1;
    for (int k = 0; k < N_SPECIAL; k++) w->special_id[k] = -1;
    size_t at = 0;
    for (size_t line = 1; at < size; line++) {
        char *nl = memchr(buf + at, '\n', size - at);
        size_t end = nl ? (size_t)(nl - buf) : size, len = end - at;
        if (len == 0)
            FAIL("%s:%zu: empty line; a vocabulary has one token per line and its ids are the line numbers, so "
                 "an empty line is either an error or a token no text can produce", path, line);
        if (memchr(buf + at, '\0', len))
            FAIL("%s:%zu: holds a NUL byte", path, line);
        size_t bad;
        if (!utf8_valid((unsigned char *)buf + at, len, &bad))
            FAIL("%s:%zu: not valid UTF-8 (byte 0x%02x at column %zu)", path, line, (unsigned char)buf[at + bad],
                 bad + 1);
        buf[end] = '\0';
        int id = (int)(line - 1);
        int before = lookup_in(w, buf + at, len, 0);
        if (before >= 0)
            FAIL("%s:%zu: the token '%s' repeats line %d (every token once: an id per token)", path, line, buf + at,
                 before + 1);
        w->offset[id] = (uint32_t)at;
        if (buf[at] != '[' || buf[end - 1] != ']')
            for (size_t k = at; k < end; k++)
                if (buf[k] >= 'A' && buf[k] <= 'Z') {
                    w->upper_tokens++;
                    break;
                }
        if (!trie_insert(w, (unsigned char *)buf + at, len, id)) FAIL("%s: too many distinct prefixes", path);
        for (int k = 0; k < N_SPECIAL; k++)
            if (!strcmp(buf + at, special_names[k])) w->special_id[k] = id;
        w->n = id + 1;
        at = end + 1;
    }
    for (int k = 0; k < N_SPECIAL; k++)
        if (w->special_id[k] < 0)
            FAIL("%s: no line is '%s'; a BERT vocabulary needs [PAD], [UNK], [CLS], [SEP] and [MASK] (the data "
                 "pipeline writes them by id)", path, special_names[k]);
    for (int b = 0; b < 256; b++) w->root_child[b] = hashed_child(w, 0, (unsigned char)b);
    w->cont = w->root_child['#'] >= 0 ? hashed_child(w, w->root_child['#'], '#') : -1;
    for (int b = 0; b < 256; b++) w->cont_child[b] = w->cont >= 0 ? hashed_child(w, w->cont, (unsigned char)b) : -1;
    for (int c = 0; c < 128; c++) {
        char one = (char)c;
        int id = lookup(w, &one, 1);
        w->ascii_id[c] = id >= 0 ? id : w->special_id[1];
    }
    {
        int lower = -1, strip = -1, from = CASING_FROM_DEFAULT;
        s = read_casing(path, &lower, &strip, &from);
        if (!s.ok) goto done;
        w->lower = lower_case >= 0 ? lower_case : lower >= 0 ? lower : 1;
        w->lower_by_default = lower_case < 0 && lower < 0;
        w->lower_from = lower_case >= 0 ? CASING_FROM_OPTION : from;
        w->json_lower = tokenizer_json_lower(path);
        w->strip = strip_accents >= 0 ? strip_accents : strip >= 0 ? strip : w->lower;
    }
done:
#undef FAIL
    if (!s.ok) {
        wordpiece_free(w);
        return s;
    }
    *out = w;
    return s;
}
