// BertForPreTraining: the parameter table, the flat parameter buffer, and forward/backward
// composed from the backend's ops (docs/ARCHITECTURE.md §5). Written once for every backend.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include "kernels/backend.h"
#include "data/batch.h"
#include "engine/config.h"

typedef struct {
    char name[96];   // Hugging Face state-dict name
    int ndim;
    int shape[2];
    size_t offset;   // in elements, into the flat buffer
    size_t numel;
    int weight_decay;  // 0 for biases and LayerNorm parameters
} param_info;

typedef struct {
    size_t qkv_w, qkv_b;  // query|key|value weights [3C,C] and biases [3C], contiguous
    size_t attn_out_w, attn_out_b, ln1_w, ln1_b;
    size_t inter_w, inter_b, out_w, out_b, ln2_w, ln2_b;
} layer_offsets;

// A ModernBERT layer's tensors (engine/modernbert.c); 0: absent (layer 0 has no attn_norm; a
// bias the config leaves out).
typedef struct {
    size_t attn_norm_w, attn_norm_b, wqkv_w, wqkv_b, wo_w, wo_b;
    size_t mlp_norm_w, mlp_norm_b, wi_w, wi_b, mlp_wo_w, mlp_wo_b;
} modern_layer_offsets;

// Offsets into the flat buffer. Every tensor but wte starts past offset 0, so 0 marks a tensor
// the model does not have (wpe and wtt in a ModernBERT, the biases its config leaves out).
typedef struct {
    size_t wte, wpe, wtt, emb_ln_w, emb_ln_b;
    layer_offsets *layers;               // BERT's layers (NULL in a ModernBERT)
    modern_layer_offsets *modern;        // ModernBERT's layers (NULL in a BERT)
    size_t *layer_start;                 // [num_hidden_layers]: each layer's first tensor
    size_t final_ln_w, final_ln_b;       // ModernBERT's final_norm (0 in a BERT)
    size_t heads;  // the first head tensor's offset: the encoder's tensors end here
    // pool_*, nsp_*: 0 and absent from the table in an MLM-only model (bert_config.mlm_only)
    size_t pool_w, pool_b, mlm_w, mlm_b, mlm_ln_w, mlm_ln_b, mlm_bias, nsp_w, nsp_b;
} param_offsets;

// Saved activations of one encoder layer (act type unless noted).
typedef struct {
    void *qkv;       // [N,3C]
    void *lse;       // [B,NH,T] acc: attention log-sum-exp per query row
    uint32_t *keep;  // [B,NH,T,be->attention_keep_row_words] int32: the attention dropout mask, backend-private (NULL: none)
    void *ctx;       // [N,C]
    void *res1;      // [N,C] LayerNorm 1 input (attention output + residual)
    void *ln1_mean, *ln1_rstd;  // [N] acc
    uint32_t *ln1_keep;  // [N,dropout_keep_words(C)] int32: res1's dropout decisions as bits, backend-private
    void *x1;        // [N,C]
    void *pre_gelu;  // [N,I] the intermediate GEMM output before its bias (bias_gelu adds it)
    void *gelu;      // [N,I]
    void *res2;      // [N,C]
    void *ln2_mean, *ln2_rstd;  // [N] acc
    uint32_t *ln2_keep;  // [N,dropout_keep_words(C)] int32: res2's dropout decisions as bits
    void *out;       // [N,C] layer output
} layer_acts;

// Saved activations of one ModernBERT layer (engine/modernbert.c), act type unless noted.
typedef struct {
    void *attn_in;                 // [N,C] attn_norm's output (layer 0: unused, its input is the layer's)
    void *attn_mean, *attn_rstd;   // [N] acc
    void *qkv;                     // [N,3C] after RoPE
    void *lse;                     // [B,NH,T] acc
    uint32_t *keep;                // [B,NH,T,be->attention_keep_row_words] int32, backend-private
    void *ctx;                     // [N,C]
    void *h;                       // [N,C] layer input + dropout(attention output)
    uint32_t *h_keep;              // [N,dropout_keep_words(C)] int32: that dropout's decisions as bits
    void *mlp_in;                  // [N,C] mlp_norm(h)
    void *mlp_mean, *mlp_rstd;     // [N] acc
    void *wi;                      // [N,2I] Wi's output: input | gate
    void *glu;                     // [N,I] act(input) * gate
    void *glu_drop;                // [N,I] dropout(glu): Wo's input (NULL without mlp_dropout: glu is)
    void *out;                     // [N,C] h + Wo(glu_drop): the layer's output
} modern_layer_acts;

// train.unpad: "off", "on", "auto" (the names unpad_mode_of reads).
typedef enum { UNPAD_OFF, UNPAD_ON, UNPAD_AUTO } unpad_mode;
unpad_mode unpad_mode_of(const char *name);
// A micro-batch's host inputs (engine/model.c): the sequence offsets off[B + 1] from
// input_mask, and, when it runs unpadded (returns 1), ids, segments, positions and the
// dropout row map of its real tokens; padded (returns 0), ids and segments as they are.
// Every array holds B x T ints but off (B + 1). bert_forward prepares its inputs with it.
// The documents of the micro-batch's rows (batch_t.document_starts), in the layout
// bert_unpad_rows chose (packed: rows off[b] + t; else b*T + t): each row's position within its
// document, and its document's [start, end) as attention's doc_bounds (kernels/backend.h; a
// padded row's padding tokens are one more run, [L_b, T)). Returns 0, writing nothing, when
// every row is one document; a start at or past a row's length stops the process naming it.
int bert_document_rows(const batch_t *batch, int packed, const int *off, int *positions, int *bounds);
int bert_unpad_rows(const batch_t *batch, unpad_mode mode, int *off, int *ids, int *segments, int *positions,
                    int *row_map);

// Where the backend memory of a training run goes (docs/ARCHITECTURE.md §5; printed at start).
typedef enum { MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER, MEM_ACTIVATIONS, MEM_INPUTS, MEM_WORKSPACE, MEM_COUNT } memory_category;
typedef struct {
    size_t bytes[MEM_COUNT];
    const char *optimizer_state;  // what MEM_OPTIMIZER holds (optim_plan); NULL: LAMB's two moments
    int masters_sharded;          // MEM_PARAMS holds one rank's shard of the FP32 masters (zero_plan)
} memory_plan;

typedef struct {
    bert_config cfg;
    const backend_t *be;
    param_info *table;
    int n_tensors;
    size_t n_params;     // elements of the flat buffer, alignment gaps included
    param_offsets off;

    float *params;         // FP32 master, backend memory
    void *params_compute;  // compute copy (== params on the FP32 CPU backend)
    void *grads;           // acc type, same layout

    // capacity of the activation buffers
    int B, T, P;
    // inputs on the backend
    // (ids, segments and positions of the activation rows: the real tokens when unpadded)
    int *d_input_ids, *d_segment_ids, *d_positions, *d_gather_index;
    int *d_seq_offsets;  // [B + 1]: the micro-batch's sequence offsets (kernels/backend.h)
    int *d_row_map;      // [rows]: each activation row's padded row b*T + t (dropout keys)
    int *d_doc_bounds;   // [rows, 2]: each row's document, as attention's doc_bounds (kernels/backend.h)
    int *d_mlm_targets;  // [Npred + B]: MLM targets, then NSP labels (MLM-only: [Npred])
    int *d_correct;
    // activations
    void *emb, *emb_mean, *emb_rstd, *emb_ln, *x0;
    layer_acts *acts;             // BERT's layers (NULL in a ModernBERT)
    modern_layer_acts *modern;    // ModernBERT's layers (NULL in a BERT)
    void *final, *final_mean, *final_rstd;  // ModernBERT: final_norm's output [N,C] and statistics (acc)
    void *d_glu;                  // ModernBERT: gradient scratch [N,I]
    void *gathered;            // [Npred + B, C]: masked rows, then [CLS] rows (MLM-only: masked rows)
    void *mlm_pre, *mlm_gelu, *mlm_mean, *mlm_rstd, *mlm_x, *mlm_logits;  // logits [Npred,Vp]
    void *pooled_pre, *pooled, *nsp_logits;  // NULL in an MLM-only model
    void *losses;              // [Npred + B] acc
    // gradient scratch
    void *d_a, *d_b, *d_c, *d_wide, *d_qkv;

    // state of the last forward
    int cur_B, cur_T, n_pred;
    int cur_rows;    // activation rows: B*T, or N_real when unpadded
    int cur_packed;  // the micro-batch runs unpadded (its real tokens only)
    // The micro-batch has packed rows of several documents (batch_t.document_starts): attention
    // stays inside each (cur_doc_bounds = d_doc_bounds, else NULL) and positions restart at
    // each start (d_positions holds them in either layout).
    int cur_docs;
    const int *cur_doc_bounds;
    int *h_targets;  // host copy: MLM targets then NSP targets
    int *h_index;    // host: gather list
    int *h_input_ids, *h_segment_ids, *h_positions;  // host copies for the embedding backward (no download)
    int *h_seq_offsets, *h_row_map;                   // host copies of d_seq_offsets and d_row_map
    int *h_doc_bounds;                                // host copy of d_doc_bounds
    int *h_correct;  // host: per-row argmax hits
    void *h_losses;  // host: per-row losses (acc type)
    float *h_grads;  // host: the gradients on their way through the sum over ranks (or NULL)
    dropout_t drop;  // seed and step for this forward; p is taken from the config per site
    int train;       // dropout on
    // Unpadding (train.unpad): UNPAD_AUTO computes only the real tokens of every micro-batch
    // with padding, UNPAD_ON of every micro-batch, UNPAD_OFF all B x T rows (UNPAD_AUTO after bert_init).
    int unpad;
    float label_smoothing;  // of the MLM cross-entropy (train.label_smoothing; 0 after bert_init)
    // Called by the backward when a range of the gradients has received this micro-batch's
    // whole contribution: the heads, each encoder layer from the last, then the embeddings
    // (with the tied decoder); NULL: not called. engine/comm.h sums them over the ranks.
    void (*grads_ready)(void *grads, size_t offset, size_t n);
    // Called by the forward before it first reads bucket k's compute weights (bert_buckets'
    // order: the embeddings, each encoder layer, the heads); NULL: not called. engine/zero.h
    // waits there for the bucket's all-gather.
    void (*weights_needed)(int bucket);
    memory_plan plan;  // backend bytes allocated by bert_init
    int planning;      // count only (bert_memory_plan)
} bert_model;

// An MLM-only model (bert_config.mlm_only) leaves the NSP fields 0: loss is mlm_loss.
typedef struct {
    double loss, mlm_loss, nsp_loss;  // means over this micro-batch
    double mlm_sum, nsp_sum;          // sums of the per-row losses
    int n_pred, mlm_correct, nsp_correct;
} bert_losses;

// The vocabulary size inside the model: vocab_size rounded up to a multiple of 8. The MLM
// logits have this many columns (the last Vp - V are padding, never in a loss or an argmax).
int bert_padded_vocab(const bert_config *cfg);
// The rows the heads gather from B sequences of at most P masked positions: B x P, plus the
// B [CLS] rows the pooler reads when the model has the NSP head.
int bert_head_rows(const bert_config *cfg, int B, int P);
// The GELU of cfg->hidden_act (kernels/backend.h): GELU_TANH for "gelu_new",
// "gelu_pytorch_tanh" and "gelu_fast", else GELU_ERF ("gelu", or "" in a config built in
// code). The FFN and the MLM head's transform use it, as transformers' BertIntermediate and
// BertPredictionHeadTransform do.
gelu_kind bert_gelu_kind(const bert_config *cfg);
// The same for one activation's name (ModernBERT's head takes classifier_activation's).
gelu_kind gelu_kind_named(const char *name);
void bert_init(bert_model *m, const bert_config *cfg, const backend_t *be, int B, int T, int P);
void bert_free(bert_model *m);
// The parameter table alone (names, shapes, offsets, n_params; be NULL): no buffer is
// allocated, for reading or checking weights on the host. bert_free releases it.
void bert_init_table(bert_model *m, const bert_config *cfg);
// The backend memory a model of these shapes needs, with LAMB's moments and the backend's
// workspace, computed without allocating anything.
memory_plan bert_memory_plan(const bert_config *cfg, const backend_t *be, int B, int T, int P);
double memory_plan_total(const memory_plan *plan);
// The largest micro-batch, at most B, whose plan fits in `available` bytes (0 if none), by
// bisection: the plan grows with the micro-batch.
int bert_max_micro_batch(const bert_config *cfg, const backend_t *be, int B, int T, int P, double available);
void memory_plan_print(const memory_plan *plan, FILE *out);
// Fill the master weights as transformers' _init_weights does (normal(0, initializer_range)
// for weights and embeddings, zero biases, LayerNorm 1/0, pad row zero), from `seed`.
void bert_init_weights(bert_model *m, uint64_t seed);
// Refresh the compute copy after the master weights changed.
void bert_sync_compute(bert_model *m);
// The ranges the backward hands to grads_ready, in the forward's order: the embeddings (with
// the tied decoder), each encoder layer, the heads. Bucket k is [start[k], start[k + 1]),
// start[num_hidden_layers + 2] = n_params; returns num_hidden_layers + 2.
int bert_buckets(const bert_model *m, size_t *start);
// NVIDIA's rule for the BERT recipe: no weight decay for biases and LayerNorm parameters.
int param_has_weight_decay(const char *name);

// Forward on one micro-batch. train = 1 turns dropout on, drawn at (seed, step).
bert_losses bert_forward(bert_model *m, const batch_t *batch, int train, uint64_t seed, uint32_t step);
// Backward of (MLM mean + NSP mean) * loss_scale (MLM-only: MLM mean * loss_scale); parameter
// gradients accumulate (+=).
void bert_backward(bert_model *m, float loss_scale);
// Backward of sum(MLM row losses) * mlm_row_weight + sum(NSP row losses) * nsp_row_weight:
// with weights 1/(masked positions in the global batch) and 1/(sequences in the global
// batch), gradient accumulation over micro-batches gives exactly the one-batch gradient.
// An MLM-only model ignores nsp_row_weight.
void bert_backward_weighted(bert_model *m, float mlm_row_weight, float nsp_row_weight);
void bert_zero_grads(bert_model *m);
