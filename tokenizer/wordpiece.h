// WordPiece from a BERT vocab.txt, tokenizing as BERT does (google-research/bert's
// tokenization.py, transformers' BertTokenizer): the behind-the-API half of tokenizer.h for
// vocabularies; tokenizer.c dispatches to it. See wordpiece.c for the algorithm.
#pragma once
#include <stddef.h>
#include "tokenizer/tokenizer.h"

typedef struct wordpiece wordpiece;

// lower_case, strip_accents: 0 or 1, or -1 for the default (tokenizer_options).
tokenizer_status wordpiece_load(wordpiece **out, const char *path, int lower_case, int strip_accents);
void wordpiece_free(wordpiece *w);
int wordpiece_vocab_size(const wordpiece *w);
tokenizer_special_ids wordpiece_specials(const wordpiece *w);
int wordpiece_lower_case(const wordpiece *w);
int wordpiece_upper_tokens(const wordpiece *w);
int wordpiece_lower_by_default(const wordpiece *w);
// What chose the casing in effect, and the lowercase of a tokenizer.json beside the
// vocabulary (-1: none), for tokenizer_casing_warning.
enum { CASING_FROM_OPTION, CASING_FROM_CONFIG, CASING_FROM_CONFIG_DEFAULT, CASING_FROM_DEFAULT };
int wordpiece_lower_from(const wordpiece *w);
// The path of the file `name` in the vocabulary's directory (its tokenizer_config.json,
// tokenizer.json) into path.
void wordpiece_beside(const char *vocab_path, const char *name, char *path, size_t size);
int wordpiece_json_lower(const wordpiece *w);
int wordpiece_strip_accents(const wordpiece *w);
int wordpiece_piece_to_id(const wordpiece *w, const char *piece);
const char *wordpiece_id_to_piece(const wordpiece *w, int id);  // NULL outside the vocabulary
// tokenizer_fast_json for a WordPiece vocabulary (spm_json.c, which says how).
struct json_t;
tokenizer_status wordpiece_fast_json(const wordpiece *w, struct json_t **out);
tokenizer_status wordpiece_encode_append(const wordpiece *w, const char *text, size_t len, int **ids, size_t *n,
                                         size_t *cap);
tokenizer_status wordpiece_decode(const wordpiece *w, const int *ids, size_t n, char **text);
