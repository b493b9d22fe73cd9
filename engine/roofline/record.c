// The recording backend (roofline_parts.h): a backend table whose ops cost nothing and note
// their arguments, driven through one training step by the model code itself, so the record
// is the op sequence the engine runs.
#include <stdlib.h>
#include <string.h>
#include "engine/loss_scaler.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "engine/roofline/roofline_parts.h"
#include "engine/train.h"
#include "kernels/common/check.h"

static struct {
    record *list;
    int n, cap;
    uintptr_t next_address;
} rec;

static void put(record r) {
    if (rec.n == rec.cap) {
        rec.cap = rec.cap ? 2 * rec.cap : 4096;
        rec.list = realloc(rec.list, (size_t)rec.cap * sizeof(record));
        check_alloc(rec.list, (size_t)rec.cap * sizeof(record));
    }
    rec.list[rec.n++] = r;
}

// Distinct, never dereferenced addresses: the model only does arithmetic on them.
static void *r_alloc(size_t bytes) {
    void *p = (void *)rec.next_address;
    rec.next_address += (bytes + 255) / 256 * 256 + 256;
    return p;
}
static void r_release(void *p) {}
static void r_upload(void *dst, const void *src, size_t bytes) {
    put((record){.op = R_upload, .n = {(long)bytes}});
}
static void r_download(void *dst, const void *src, size_t bytes) {
    memset(dst, 0, bytes);  // zero losses and hits
    put((record){.op = R_download, .n = {(long)bytes}});
}
static void r_zero(void *p, size_t bytes) { put((record){.op = R_zero, .n = {(long)bytes}}); }
static void r_params_to_compute(void *dst, const float *src, size_t n) {
    put((record){.op = R_params_to_compute, .n = {(long)n}});
}
static void r_embeddings_forward(void *out, const int *ids, const int *seg, const int *pos, const void *wte, const void *wpe,
                      const void *wtt, int N, int T, int P, int C) {
    put((record){.op = R_embeddings_forward, .n = {N, T, C}, .flag_a = pos != NULL, .flag_b = wpe != NULL});
}
static void r_embeddings_backward(void *dwte, void *dwpe, void *dwtt, const void *dout, const int *ids, const int *seg,
                      const int *pos, int pad, int N, int T, int P, int C) {
    put((record){.op = R_embeddings_backward, .n = {N, T, C}, .flag_a = pos != NULL, .flag_b = dwpe != NULL});
}
static void r_layernorm_forward(void *out, void *mean, void *rstd, const void *inp, const void *w, const void *b, int N, int C,
                     float eps) {
    put((record){.op = R_layernorm_forward, .n = {N, C}});
}
static void r_layernorm_backward(void *dinp, void *dw, void *db, const void *dout, const void *inp, const void *w, const void *mean,
                     const void *rstd, const void *dinp_add, int N, int C) {
    put((record){.op = R_layernorm_backward, .n = {N, C}, .flag_a = dinp_add != NULL});
}
static void r_matmul_forward(void *out, const void *inp, const void *w, const void *bias, int N, int IC, int OC) {
    put((record){.op = R_matmul_forward, .n = {N, IC, OC}, .flag_a = bias != NULL});
}
static void r_matmul_backward(void *dinp, void *dw, void *db, const void *dout, const void *inp, const void *w,
                     const void *dinp_add, int N, int IC, int OC) {
    put((record){.op = R_matmul_backward, .n = {N, IC, OC}, .flag_a = dinp_add ? (dinp_add == dinp ? 1 : 2) : 0,
                  .flag_b = db != NULL});
}
static void r_matmul_bias_gelu_forward(void *out, void *pre, const void *inp, const void *w, const void *bias, int N, int IC,
                          int OC) {
    put((record){.op = R_matmul_bias_gelu_forward, .n = {N, IC, OC}});
}
static void r_matmul_dgelu_backward(void *dinp, void *dw, void *db, void *dpre_b, const void *dout, const void *inp,
                           const void *w, const void *pre, int N, int IC, int OC) {
    put((record){.op = R_matmul_dgelu_backward, .n = {N, IC, OC}, .flag_b = db != NULL});
}
static void r_attention_forward(void *out, void *lse, uint32_t *keep, const void *qkv, const int *offsets,
                                const int *doc_bounds, int packed, int B, int T, int C, int NH, int window, dropout_t d) {
    put((record){.op = R_attention_forward, .n = {B, T, C, NH, window}, .flag_a = d.p > 0.0f});
}
static void r_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const void *lse,
                      const uint32_t *keep, const int *offsets, const int *doc_bounds, int packed, int B, int T,
                      int C, int NH, int window, dropout_t d) {
    put((record){.op = R_attention_backward, .n = {B, T, C, NH, window}, .flag_a = d.p > 0.0f});
}
static void r_rope_forward(void *qkv, const int *pos, int N, int T, int C, int NH, float theta) {
    put((record){.op = R_rope_forward, .n = {N, C}, .flag_a = pos != NULL});
}
static void r_rope_backward(void *dqkv, const int *pos, int N, int T, int C, int NH, float theta) {
    put((record){.op = R_rope_backward, .n = {N, C}, .flag_a = pos != NULL});
}
static void r_geglu_forward(void *out, const void *inp, int N, int I, gelu_kind act) {
    put((record){.op = R_geglu_forward, .n = {N, I}});
}
static void r_geglu_backward(void *dinp, const void *dout, const void *inp, int N, int I, gelu_kind act) {
    put((record){.op = R_geglu_backward, .n = {N, I}});
}
static void r_gelu_forward(void *out, const void *inp, int n, gelu_kind act) {
    put((record){.op = R_gelu_forward, .n = {n}});
}
static void r_gelu_backward(void *dinp, const void *dout, const void *inp, int n, gelu_kind act) {
    put((record){.op = R_gelu_backward, .n = {n}});
}
static void r_tanh_forward(void *out, const void *inp, int n) {
    put((record){.op = R_tanh_forward, .n = {n}});
}
static void r_tanh_backward(void *dinp, const void *dout, const void *out, int n) {
    put((record){.op = R_tanh_backward, .n = {n}});
}
static void r_dropout_residual_forward(void *out, const void *inp, const void *residual, int n, dropout_t d) {
    put((record){.op = R_dropout_residual_forward, .n = {n}, .flag_a = d.p > 0.0f, .flag_b = residual != NULL});
}
static void r_dropout_backward(void *dinp, const void *dout, int n, dropout_t d) {
    put((record){.op = R_dropout_backward, .n = {n}, .flag_a = d.p > 0.0f});
}
static void r_gather_rows_forward(void *out, const void *inp, const int *index, int N, int C) {
    put((record){.op = R_gather_rows_forward, .n = {N, C}});
}
static void r_gather_rows_backward(void *dinp, const void *dout, const int *index, int N, int M, int C) {
    put((record){.op = R_gather_rows_backward, .n = {N, M, C}});
}
static void r_crossentropy_forward(void *losses, int *correct, const void *logits, const int *targets, int N, int V, int Vp,
                     float smoothing) {
    put((record){.op = R_crossentropy_forward, .n = {N, V, Vp}});
}
static void r_crossentropy_backward(void *dlogits, const void *logits, const int *targets, int N, int V, int Vp, float dloss,
                     float smoothing) {
    put((record){.op = R_crossentropy_backward, .n = {N, V, Vp}});
}
static void r_residual_dropout_layernorm_forward(void *out, void *res, void *mean, void *rstd, const void *inp, const void *residual,
                       const void *w, const void *b, int N, int C, float eps, dropout_t d) {
    put((record){.op = R_residual_dropout_layernorm_forward, .n = {N, C}, .flag_a = d.p > 0.0f, .flag_b = residual != NULL});
}
static void r_layernorm_dropout_backward(void *dres, void *dinp, void *dw, void *db, const void *dout, const void *res, const void *w,
                         const void *mean, const void *rstd, int N, int C, dropout_t d) {
    put((record){.op = R_layernorm_dropout_backward, .n = {N, C}, .flag_a = d.p > 0.0f});
}
static void r_bias_gelu_forward(void *out, const void *inp, const void *bias, int N, int C, gelu_kind act) {
    put((record){.op = R_bias_gelu_forward, .n = {N, C}, .flag_a = bias != NULL});
}
static void r_bias_gelu_backward(void *dinp, void *dbias, const void *dout, const void *inp, const void *bias, int N, int C,
                        gelu_kind act) {
    put((record){.op = R_bias_gelu_backward, .n = {N, C}, .flag_b = dbias != NULL});
}
static double r_optim(int op, const optim_tensor *tensors, int n_tensors) {
    size_t numel = 0;
    for (int i = 0; i < n_tensors; i++) numel += tensors[i].numel;
    put((record){.op = op, .n = {(long)numel, n_tensors}});
    return 1.0;  // a finite norm: the step is applied, the compute copy refreshed
}
static double r_lamb_step(float *params, float *m, float *v, const void *grads, const optim_tensor *tensors, int n_tensors,
                          adam_hyper h) {
    return r_optim(R_lamb_step, tensors, n_tensors);
}
static double r_lars_step(float *params, float *mom, const void *grads, const optim_tensor *tensors, int n_tensors,
                     lars_hyper h) {
    return r_optim(R_lars_step, tensors, n_tensors);
}
static double r_stableadamw_step(float *params, float *m, float *v, const void *grads, const optim_tensor *tensors,
                                 int n_tensors, adam_hyper h) {
    return r_optim(R_stableadamw_step, tensors, n_tensors);
}
static double r_adamw_step(float *params, float *m, float *v, const void *grads, const optim_tensor *tensors, int n_tensors,
                      adam_hyper h) {
    return r_optim(R_adamw_step, tensors, n_tensors);
}

static backend_t recording_backend(size_t act_size) {
    return (backend_t){
        .name = "roofline",
        .act_size = act_size,
        .acc_size = sizeof(float),
        .alloc = r_alloc,
        .release = r_release,
#define R_SLOT(name) .name = r_##name,
        BACKEND_OPS(R_SLOT)
#undef R_SLOT
    };
}

record *roofline_record_step(const bert_config *cfg, int B, int T, int P, roofline_options opt, int *n) {
    memset(&rec, 0, sizeof rec);
    rec.next_address = (uintptr_t)1 << 32;
    backend_t be = recording_backend(opt.act_size);
    batch_t batch = {.B = B, .T = T, .P = P};
    batch.input_ids = xcalloc((size_t)B * T, sizeof(int));
    batch.input_mask = xcalloc((size_t)B * T, sizeof(int));
    batch.segment_ids = xcalloc((size_t)B * T, sizeof(int));
    batch.masked_lm_positions = xcalloc((size_t)B * P, sizeof(int));
    batch.masked_lm_ids = xcalloc((size_t)B * P, sizeof(int));
    batch.next_sentence_labels = xcalloc((size_t)B, sizeof(int));
    batch.document_starts = xcalloc((size_t)B * T, sizeof(int));  // one document per row
    for (int i = 0; i < B * T; i++) batch.input_mask[i] = 1;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < P; p++) batch.masked_lm_positions[b * P + p] = 1 + p;

    bert_model m;
    bert_init(&m, cfg, &be, B, T, P);
    optim_state opt_state;
    optim_init(&opt_state, opt.optimizer, &be, m.n_params);
    loss_scaler scaler;
    loss_scaler_init(&scaler, 0, 1.0, 2000, 1.0, 1);
    int first = rec.n;  // allocation is not part of a step
    train_step(&m, &opt_state, &scaler, &batch, 1, 1e-3, 1, 1, 0);
    optim_free(&opt_state);
    bert_free(&m);
    free(batch.input_ids), free(batch.input_mask), free(batch.segment_ids);
    free(batch.masked_lm_positions), free(batch.masked_lm_ids), free(batch.next_sentence_labels);
    free(batch.document_starts);
    *n = rec.n - first;
    record *out = xcalloc((size_t)(*n > 0 ? *n : 1), sizeof(record));
    memcpy(out, rec.list + first, (size_t)*n * sizeof(record));
    free(rec.list);
    memset(&rec, 0, sizeof rec);
    return out;
}

