// SentencePiece behind tokenizer.h (sentencepiece.cc, built where libsentencepiece is found);
// tokenizer.c dispatches to it for .model files. The calls mirror tokenizer.h's.
#pragma once
#include <stddef.h>
#include "tokenizer/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spm_model spm_model;

tokenizer_status spm_train(const tokenizer_train_options *options, const char *files, tokenizer_next_sentence next,
                           void *ctx);
tokenizer_status spm_load(spm_model **out, const char *model_path);
void spm_free(spm_model *m);
// The model's serialized ModelProto (SentencePiece's sentencepiece_model.proto), valid while
// m is loaded: read by spm_json.c.
const unsigned char *spm_model_proto(const spm_model *m, size_t *size);
// tokenizer_fast_json for a SentencePiece model (spm_json.c).
tokenizer_status spm_fast_json(const spm_model *m, struct json_t **out);
int spm_vocab_size(const spm_model *m);
tokenizer_special_ids spm_specials(const spm_model *m);
int spm_piece_to_id(const spm_model *m, const char *piece);
tokenizer_status spm_id_to_piece(const spm_model *m, int id, char *buf, size_t size);
tokenizer_status spm_encode_append(const spm_model *m, const char *text, size_t len, int **ids, size_t *n,
                                   size_t *cap);
tokenizer_status spm_decode(const spm_model *m, const int *ids, size_t n, char **text);

#ifdef __cplusplus
}
#endif
