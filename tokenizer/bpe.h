// Byte-level BPE from a Hugging Face tokenizer.json (GPT-2's scheme, as ModernBERT's released
// tokenizer and OLMo's use it), tokenizing as the `tokenizers` library does: the behind-the-API
// half of tokenizer.h for such files; tokenizer.c dispatches to it. See bpe.c for the steps.
#pragma once
#include <stddef.h>
#include "tokenizer/tokenizer.h"

typedef struct bpe_model bpe_model;

// 1 when path looks like a tokenizer.json: a JSON object (its first non-blank byte '{').
int bpe_file_is_json(const char *path);
tokenizer_status bpe_load(bpe_model **out, const char *path);
void bpe_free(bpe_model *m);
int bpe_vocab_size(const bpe_model *m);
// [PAD], [UNK], [CLS], [SEP], [MASK] by their content among the added tokens (or the model's
// unk_token); -1 for one the file lacks.
tokenizer_special_ids bpe_specials(const bpe_model *m);
int bpe_piece_to_id(const bpe_model *m, const char *piece);
const char *bpe_id_to_piece(const bpe_model *m, int id);  // NULL outside the vocabulary
struct json_t;
tokenizer_status bpe_fast_json(const bpe_model *m, struct json_t **out);  // the file's JSON
tokenizer_status bpe_encode_append(const bpe_model *m, const char *text, size_t len, int **ids, size_t *n,
                                   size_t *cap);
tokenizer_status bpe_decode(const bpe_model *m, const int *ids, size_t n, char **text);
