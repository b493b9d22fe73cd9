// The parts of engine/model.c that each architecture's own file (engine/modernbert.c) builds on:
// the parameter table, the buffer tables, the dropout sites and the weight accessors. Not part of
// the engine's interface (engine/model.h is).
#pragma once
#include <stddef.h>
#include "engine/model.h"

#define ACT(m, p, off) ((void *)((char *)(p) + (off) * (m)->be->act_size))
#define ACC(m, p, off) ((void *)((char *)(p) + (off) * (m)->be->acc_size))
#define W(m, off) ACT(m, (m)->params_compute, off)
#define G(m, off) ACC(m, (m)->grads, off)
// A tensor the model may lack (offset 0, param_offsets): NULL then.
#define W_OPT(m, off) ((off) ? W(m, off) : NULL)
#define G_OPT(m, off) ((off) ? G(m, off) : NULL)

// Tensors start on 8-element boundaries (16-byte FP16 / 32-byte FP32 alignment for the GPU
// GEMMs), except where contiguity is required: key/value follow query so that the three
// projections form one [3C,C] matrix and one [3C] bias.
// The vocabulary is padded to a multiple of VOCAB_ALIGN inside the model (the decoder GEMM's
// N dimension; 30522 -> 30528): the word embeddings and the MLM bias keep zero rows up to
// there in the flat buffer, outside their table entries (so checkpoints, exports and LAMB see
// the real size), and the cross-entropy ignores the padded logit columns.
enum { ALIGN = 8, VOCAB_ALIGN = 8 };

// Appends a tensor to the table (Hugging Face name, [rows, cols] or [rows] when cols is 0, on an
// 8-element boundary when align); `reserve_rows` >= rows are kept in the flat buffer. Returns its offset.
size_t model_add_param_rows(bert_model *m, int *cap, const char *name, int rows, int cols, int align,
                            int reserve_rows);
size_t model_add_param(bert_model *m, int *cap, const char *name, int rows, int cols, int align);

// The activation and scratch buffers, described once: element type and shape drive the memory
// plan, the allocation and the release. A shape is a product of up to four dimensions of the run.
typedef enum { EL_ACT, EL_ACC, EL_INT } element_type;
typedef enum {
    D_1, D_B, D_B1 /* B+1 */, D_T, D_N /* B*T */, D_R /* gathered rows: bert_head_rows */,
    D_BNSP /* B with the NSP head, else 0 */, D_C, D_3C, D_I, D_NH, D_KW /* attention keep words per row */,
    D_CW /* LayerNorm dropout keep words per row */, D_VP /* padded vocab */,
    D_WIDE /* max(the FFN's first GEMM's width: I, or 2I in a GLU; 3C) */, D_2, D_2I,
    D_MODERN /* 1 in a ModernBERT, 0 in a BERT */, D_MLP_DROP /* 1 in a ModernBERT with mlp_dropout > 0 */,
} dim_symbol;
typedef struct {
    const char *name;
    size_t field;  // offsetof the pointer in bert_model (or the layer's struct for per-layer buffers)
    element_type type;
    memory_category category;
    dim_symbol shape[4];  // trailing D_1s
} buffer_spec;

// The activation rows' positions for the embeddings and RoPE: d_positions when the micro-batch
// runs unpadded or has documents (positions restart at each), NULL (row % T) otherwise; the
// host copy for the embeddings' backward.
static inline const int *model_positions(const bert_model *m) {
    return m->cur_packed || m->cur_docs ? m->d_positions : NULL;
}
static inline const int *model_host_positions(const bert_model *m) {
    return m->cur_packed || m->cur_docs ? m->h_positions : NULL;
}

// The dropout sites (docs/ARCHITECTURE.md §4): `site` over an element index of its own; a token
// site over the rows [rows, row_len] keyed by their padded rows when unpadded (row_len 0: the
// hidden size); a LayerNorm's token site that saves its decisions as bits in keep.
dropout_t model_site(const bert_model *m, double p, uint32_t site_id);
dropout_t model_token_site(const bert_model *m, double p, uint32_t site_id, int row_len);
dropout_t model_ln_site(const bert_model *m, double p, uint32_t site_id, uint32_t *keep);

// ModernBERT (engine/modernbert.c): its embeddings' and layers' tensors, its per-layer buffers,
// its encoder's forward (the final hidden rows, [rows, C]) and backward (dx: their gradient,
// scratch it may overwrite), and its initial weights (normal, truncated, per transformers).
void modernbert_build_table(bert_model *m, int *cap);
extern const buffer_spec modernbert_layer_buffers[];
extern const int modernbert_layer_buffer_count;
const void *modernbert_encoder_forward(bert_model *m, int B, int T);
void modernbert_encoder_backward(bert_model *m, void *dx);
void modernbert_init_weights(bert_model *m, float *host, uint64_t seed);
