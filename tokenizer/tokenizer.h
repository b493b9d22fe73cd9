// The tokenizer's C API, over three kinds, picked by the file loaded:
//   - a SentencePiece model (FILE.model; the SentencePiece C++ library, where bertpre was
//     built with it): train one, load it, encode, decode. Special tokens follow ALBERT's
//     convention, which trained models get from tokenizer_train: <pad> = 0, <unk> = 1, then
//     the control symbols [CLS] = 2, [SEP] = 3, [MASK] = 4 (no <s>/</s>); control symbols
//     never come out of encode. A loaded model that lacks one of them reports -1 for its id.
//   - a WordPiece vocabulary (BERT's vocab.txt, one token per line, the id its line number
//     from 0), tokenizing exactly as BERT does (wordpiece.c). It must hold [PAD], [UNK],
//     [CLS], [SEP] and [MASK] (ids 0, 100, 101, 102, 103 in bert-base-uncased); those
//     written in the text come out as their ids, as in BERT.
//   - a byte-level BPE tokenizer.json of the tokenizers library (ModernBERT's released one,
//     GPT-2's scheme: bpe.c), tokenizing exactly as that library does; its added tokens
//     [PAD]/[UNK]/[CLS]/[SEP]/[MASK] give the special ids.
// The data pipeline inserts [CLS]/[SEP]/[MASK] by id. No C++ exception crosses this
// boundary: every call that can fail returns a tokenizer_status whose message says what failed.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int ok;             // 1 on success
    char message[512];  // why not, when ok == 0
} tokenizer_status;

typedef struct tokenizer tokenizer;
struct json_t;  // jansson's JSON value (tokenizer_fast_json)

typedef struct {
    int pad, unk, cls, sep, mask;
} tokenizer_special_ids;

// Sentences for training, one per call: return 1 and set *text/*len (valid until the next
// call), or 0 at the end. A negative return aborts training with an error.
typedef int (*tokenizer_next_sentence)(void *ctx, const char **text, size_t *len);

typedef struct {
    const char *model_prefix;   // writes PREFIX.model and PREFIX.vocab: under temporary names beside
                                // them, linked into place when both are whole, never over an
                                // existing file (EEXIST); a failed write names the file and errno
    int vocab_size;             // including the 5 special tokens
    const char *model_type;     // "unigram" (default) or "bpe", "char", "word"
    double character_coverage;  // 0 means SentencePiece's default (0.9995)
    long input_sentence_size;   // sentences sampled for training; 0 = all
    int max_sentence_length;    // bytes: longer sentences are left out of the training; 0 = 4192, SentencePiece's
    int num_threads;            // 0 means 1
    int seed;                   // sampling of the input sentences
    int verbose;                // 1: SentencePiece's progress log on stderr
    // Without verbose, called (when not NULL) as the unigram training prunes its pieces toward
    // vocab_size: `pieces` it holds now, `seed` 1 for the candidates it starts from. What the
    // trainer's log says beyond warnings and errors is not printed.
    void (*on_pieces)(void *ctx, long pieces, int seed);
    void *pieces_ctx;
} tokenizer_train_options;

// SentencePiece only. Trains from a sentence source (see tokenizer_next_sentence) when `next` is not NULL,
// else from `files` (comma-separated plain-text files, one sentence per line).
tokenizer_status tokenizer_train(const tokenizer_train_options *options, const char *files,
                                 tokenizer_next_sentence next, void *ctx);

// WordPiece casing: -1 for the default, 0 or 1 to force. lower_case's default is the
// do_lower_case of a tokenizer_config.json beside the vocabulary, else 1 (BERT's default);
// strip_accents' is that file's strip_accents when true or false, else lower_case (BERT's).
// A SentencePiece model takes neither (its normalization is part of the model).
typedef struct {
    int lower_case;
    int strip_accents;
} tokenizer_options;

typedef enum { TOKENIZER_SENTENCEPIECE, TOKENIZER_WORDPIECE, TOKENIZER_BPE } tokenizer_kind;

// 1 when model_path would load as SentencePiece (named *.model, or a protocol buffer).
int tokenizer_file_is_sentencepiece(const char *model_path);
tokenizer_status tokenizer_load(tokenizer **out, const char *model_path);  // default options
tokenizer_status tokenizer_load_with(tokenizer **out, const char *model_path, const tokenizer_options *options);
tokenizer_kind tokenizer_type(const tokenizer *tok);
// WordPiece: the casing in effect (0 or 1); SentencePiece: -1.
int tokenizer_lower_case(const tokenizer *tok);
int tokenizer_strip_accents(const tokenizer *tok);
// WordPiece: a warning into msg (and 1) when the vocabulary looks cased (over 1% of its tokens,
// [bracketed] ones aside, hold an upper-case letter; an uncased BERT vocabulary has none) but
// the text is lower-cased by default (no option, no tokenizer_config.json said so): such a
// vocabulary's capitalised tokens are then never produced. 0 otherwise.
int tokenizer_casing_warning(const tokenizer *tok, const char *path, char *msg, size_t size);
void tokenizer_free(tokenizer *tok);

// The tokenizer as the `tokenizers` library's tokenizer.json, which transformers' fast
// tokenizer (PreTrainedTokenizerFast; TokenizersBackend in transformers 5) loads as it is,
// without the sentencepiece package, giving this tokenizer's ids (tokenizer/spm_json.c says
// how), or a WordPiece vocabulary with the NFC bertpre applies. *out: a new JSON object. A
// SentencePiece Unigram or BPE model or a WordPiece vocabulary only: for any other (char and
// word models; byte fallback; user-defined pieces; a vocabulary naming a token twice) an error
// status saying which.
tokenizer_status tokenizer_fast_json(const tokenizer *tok, struct json_t **out);

int tokenizer_vocab_size(const tokenizer *tok);
tokenizer_special_ids tokenizer_specials(const tokenizer *tok);
// -1 when the piece is not in the vocabulary (SentencePiece itself would answer <unk>).
int tokenizer_piece_to_id(const tokenizer *tok, const char *piece);
// Copies the piece of `id` (NUL-terminated, truncated to size - 1) into buf.
tokenizer_status tokenizer_id_to_piece(const tokenizer *tok, int id, char *buf, size_t size);

// Encodes text[0..len) into *ids, a malloc'd buffer of capacity *cap grown with realloc as
// needed (pass *ids = NULL, *cap = 0 the first time and reuse it); *n receives the count.
// Safe to call from several threads on one tokenizer.
tokenizer_status tokenizer_encode(const tokenizer *tok, const char *text, size_t len, int **ids, size_t *n,
                                  size_t *cap);
// As tokenizer_encode, but appends the ids after the *n already in *ids (and adds their count
// to *n): a document's sentences encoded straight into one buffer, without a copy each.
tokenizer_status tokenizer_encode_append(const tokenizer *tok, const char *text, size_t len, int **ids, size_t *n,
                                         size_t *cap);
// Decodes ids into a malloc'd NUL-terminated string in *text (the caller frees it).
tokenizer_status tokenizer_decode(const tokenizer *tok, const int *ids, size_t n, char **text);

#ifdef __cplusplus
}
#endif
