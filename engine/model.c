// BertForPreTraining forward and backward through the backend table. Post-LN encoder:
//   x0 = dropout(LN(word + position + token_type embeddings))
//   per layer: qkv = x W_qkv^T + b;  ctx = attention(qkv);  res1 = dropout(ctx W_o^T + b) + x
//              x1 = LN(res1);  h = gelu(x1 W_i^T + b);  res2 = dropout(h W_2^T + b) + x1;  out = LN(res2)
//   (fused ops: dropout + residual + LN in one op and its backward in one; the GELU adds the
//   bias of the GEMM before it and sums that bias's gradient in its backward; the tanh GELU,
//   where the backend has them, runs in the FFN GEMMs' epilogues instead)
//   heads: rows = gather(out, masked positions ++ [CLS] rows)
//          MLM: logits = LN(gelu(rows_m W_t^T + b)) wte^T + bias     (decoder tied to wte)
//          NSP: logits = tanh(rows_cls W_p^T + b) W_nsp^T + b
//   loss = mean CE over masked positions + mean CE over sequences
// MLM-only (bert_config.mlm_only, BertForMaskedLM): no pooler, no NSP head, no [CLS] rows in
// the gather; loss = mean CE over masked positions.
// Token rows: all B x T (padded) or, unpadded (train.unpad), the real tokens only, token t of
// sequence b at row seq_offsets[b] + t (docs/ARCHITECTURE.md, "Unpadded activations").
// ModernBERT (bert_config.arch MODEL_MODERNBERT) is the second architecture over the same
// machinery: engine/modernbert.c has its tensors and its encoder; the inputs, the masked-LM head,
// the losses, the buffers and the memory plan are this file's, shared.
#include "engine/model.h"
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "engine/model_parts.h"
#include "kernels/common/check.h"

unpad_mode unpad_mode_of(const char *name) {
    if (!strcmp(name, "off")) return UNPAD_OFF;
    if (!strcmp(name, "on")) return UNPAD_ON;
    if (!strcmp(name, "auto")) return UNPAD_AUTO;
    fatal("train.unpad = \"%s\": expected \"auto\", \"on\" or \"off\"", name);
    return UNPAD_AUTO;
}

int bert_head_rows(const bert_config *cfg, int B, int P) { return B * P + (cfg->mlm_only ? 0 : B); }

// The prediction head's activation: BERT's hidden_act, ModernBERT's classifier_activation.
static gelu_kind head_gelu_kind(const bert_config *cfg) {
    return gelu_kind_named(cfg->arch == MODEL_MODERNBERT ? cfg->classifier_activation : cfg->hidden_act);
}



static void build_table(bert_model *m) {
    const bert_config *c = &m->cfg;
    int C = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, Vp = bert_padded_vocab(c);
    int cap = 0;
    char name[96];
    param_offsets *o = &m->off;
    o->layer_start = xcalloc(c->num_hidden_layers, sizeof(size_t));
    if (c->arch == MODEL_MODERNBERT) {
        modernbert_build_table(m, &cap);
        o->heads = (m->n_params + ALIGN - 1) / ALIGN * ALIGN;
        o->mlm_w = model_add_param(m, &cap, "head.dense.weight", C, C, 1);
        if (c->classifier_bias) o->mlm_b = model_add_param(m, &cap, "head.dense.bias", C, 0, 1);
        o->mlm_ln_w = model_add_param(m, &cap, "head.norm.weight", C, 0, 1);
        if (c->norm_bias) o->mlm_ln_b = model_add_param(m, &cap, "head.norm.bias", C, 0, 1);
        if (c->decoder_bias) o->mlm_bias = model_add_param_rows(m, &cap, "decoder.bias", V, 0, 1, Vp);
        m->n_params = (m->n_params + ALIGN - 1) / ALIGN * ALIGN;
        return;
    }
    o->wte = model_add_param_rows(m, &cap, "bert.embeddings.word_embeddings.weight", V, C, 1, Vp);
    o->wpe = model_add_param(m, &cap, "bert.embeddings.position_embeddings.weight", c->max_position_embeddings, C, 1);
    o->wtt = model_add_param(m, &cap, "bert.embeddings.token_type_embeddings.weight", c->type_vocab_size, C, 1);
    o->emb_ln_w = model_add_param(m, &cap, "bert.embeddings.LayerNorm.weight", C, 0, 1);
    o->emb_ln_b = model_add_param(m, &cap, "bert.embeddings.LayerNorm.bias", C, 0, 1);
    o->layers = xcalloc(c->num_hidden_layers, sizeof(layer_offsets));
    for (int l = 0; l < c->num_hidden_layers; l++) {
        layer_offsets *L = &o->layers[l];
#define P(field, suffix, rows, cols, align)                                       \
    snprintf(name, sizeof name, "bert.encoder.layer.%d.%s", l, suffix);           \
    field = model_add_param(m, &cap, name, rows, cols, align)
        P(L->qkv_w, "attention.self.query.weight", C, C, 1);
        o->layer_start[l] = L->qkv_w;
        P(size_t k_w, "attention.self.key.weight", C, C, 0);
        P(size_t v_w, "attention.self.value.weight", C, C, 0);
        P(L->qkv_b, "attention.self.query.bias", C, 0, 1);
        P(size_t k_b, "attention.self.key.bias", C, 0, 0);
        P(size_t v_b, "attention.self.value.bias", C, 0, 0);
        (void)k_w, (void)v_w, (void)k_b, (void)v_b;
        P(L->attn_out_w, "attention.output.dense.weight", C, C, 1);
        P(L->attn_out_b, "attention.output.dense.bias", C, 0, 1);
        P(L->ln1_w, "attention.output.LayerNorm.weight", C, 0, 1);
        P(L->ln1_b, "attention.output.LayerNorm.bias", C, 0, 1);
        P(L->inter_w, "intermediate.dense.weight", I, C, 1);
        P(L->inter_b, "intermediate.dense.bias", I, 0, 1);
        P(L->out_w, "output.dense.weight", C, I, 1);
        P(L->out_b, "output.dense.bias", C, 0, 1);
        P(L->ln2_w, "output.LayerNorm.weight", C, 0, 1);
        P(L->ln2_b, "output.LayerNorm.bias", C, 0, 1);
#undef P
    }
    o->heads = (m->n_params + ALIGN - 1) / ALIGN * ALIGN;
    if (!c->mlm_only) {
        o->pool_w = model_add_param(m, &cap, "bert.pooler.dense.weight", C, C, 1);
        o->pool_b = model_add_param(m, &cap, "bert.pooler.dense.bias", C, 0, 1);
    }
    o->mlm_bias = model_add_param_rows(m, &cap, "cls.predictions.bias", V, 0, 1, Vp);
    o->mlm_w = model_add_param(m, &cap, "cls.predictions.transform.dense.weight", C, C, 1);
    o->mlm_b = model_add_param(m, &cap, "cls.predictions.transform.dense.bias", C, 0, 1);
    o->mlm_ln_w = model_add_param(m, &cap, "cls.predictions.transform.LayerNorm.weight", C, 0, 1);
    o->mlm_ln_b = model_add_param(m, &cap, "cls.predictions.transform.LayerNorm.bias", C, 0, 1);
    if (!c->mlm_only) {
        o->nsp_w = model_add_param(m, &cap, "cls.seq_relationship.weight", 2, C, 1);
        o->nsp_b = model_add_param(m, &cap, "cls.seq_relationship.bias", 2, 0, 1);
    }
    m->n_params = (m->n_params + ALIGN - 1) / ALIGN * ALIGN;
}

// Every backend buffer of the model goes through here, so that the memory plan and the
// allocation cannot disagree. In planning mode nothing is allocated; an empty buffer (the NSP
// head's of an MLM-only model) is NULL.
static void *model_alloc(bert_model *m, memory_category category, size_t bytes) {
    m->plan.bytes[category] += bytes;
    return m->planning || !bytes ? NULL : m->be->alloc(bytes);
}

#define MODEL_BUF(field, type, cat, ...) {#field, offsetof(bert_model, field), type, cat, {__VA_ARGS__}}
#define LAYER_BUF(field, type, ...) {#field, offsetof(layer_acts, field), type, MEM_ACTIVATIONS, {__VA_ARGS__}}
static const buffer_spec model_buffers[] = {
    MODEL_BUF(d_input_ids, EL_INT, MEM_INPUTS, D_N),
    MODEL_BUF(d_segment_ids, EL_INT, MEM_INPUTS, D_N),
    MODEL_BUF(d_positions, EL_INT, MEM_INPUTS, D_N),
    MODEL_BUF(d_seq_offsets, EL_INT, MEM_INPUTS, D_B1),
    MODEL_BUF(d_row_map, EL_INT, MEM_INPUTS, D_N),
    MODEL_BUF(d_doc_bounds, EL_INT, MEM_INPUTS, D_N, D_2),
    MODEL_BUF(d_gather_index, EL_INT, MEM_INPUTS, D_R),
    MODEL_BUF(d_mlm_targets, EL_INT, MEM_INPUTS, D_R),
    MODEL_BUF(d_correct, EL_INT, MEM_INPUTS, D_R),
    MODEL_BUF(emb, EL_ACT, MEM_ACTIVATIONS, D_N, D_C),
    MODEL_BUF(emb_mean, EL_ACC, MEM_ACTIVATIONS, D_N),
    MODEL_BUF(emb_rstd, EL_ACC, MEM_ACTIVATIONS, D_N),
    MODEL_BUF(emb_ln, EL_ACT, MEM_ACTIVATIONS, D_N, D_C),
    MODEL_BUF(x0, EL_ACT, MEM_ACTIVATIONS, D_N, D_C),
    MODEL_BUF(gathered, EL_ACT, MEM_ACTIVATIONS, D_R, D_C),
    MODEL_BUF(mlm_pre, EL_ACT, MEM_ACTIVATIONS, D_R, D_C),
    MODEL_BUF(mlm_gelu, EL_ACT, MEM_ACTIVATIONS, D_R, D_C),
    MODEL_BUF(mlm_mean, EL_ACC, MEM_ACTIVATIONS, D_R),
    MODEL_BUF(mlm_rstd, EL_ACC, MEM_ACTIVATIONS, D_R),
    MODEL_BUF(mlm_x, EL_ACT, MEM_ACTIVATIONS, D_R, D_C),
    MODEL_BUF(mlm_logits, EL_ACT, MEM_ACTIVATIONS, D_R, D_VP),
    MODEL_BUF(pooled_pre, EL_ACT, MEM_ACTIVATIONS, D_BNSP, D_C),
    MODEL_BUF(pooled, EL_ACT, MEM_ACTIVATIONS, D_BNSP, D_C),
    MODEL_BUF(nsp_logits, EL_ACT, MEM_ACTIVATIONS, D_BNSP, D_2),
    MODEL_BUF(losses, EL_ACC, MEM_ACTIVATIONS, D_R),
    MODEL_BUF(d_a, EL_ACT, MEM_ACTIVATIONS, D_N, D_C),
    MODEL_BUF(d_b, EL_ACT, MEM_ACTIVATIONS, D_N, D_C),
    MODEL_BUF(d_c, EL_ACT, MEM_ACTIVATIONS, D_N, D_C),
    MODEL_BUF(d_wide, EL_ACT, MEM_ACTIVATIONS, D_N, D_WIDE),
    MODEL_BUF(d_qkv, EL_ACT, MEM_ACTIVATIONS, D_N, D_3C),
    MODEL_BUF(final, EL_ACT, MEM_ACTIVATIONS, D_MODERN, D_N, D_C),
    MODEL_BUF(final_mean, EL_ACC, MEM_ACTIVATIONS, D_MODERN, D_N),
    MODEL_BUF(final_rstd, EL_ACC, MEM_ACTIVATIONS, D_MODERN, D_N),
    MODEL_BUF(d_glu, EL_ACT, MEM_ACTIVATIONS, D_MODERN, D_N, D_I),
};
static const buffer_spec layer_buffers[] = {
    LAYER_BUF(qkv, EL_ACT, D_N, D_3C),
    LAYER_BUF(lse, EL_ACC, D_B, D_NH, D_T),
    LAYER_BUF(keep, EL_INT, D_B, D_NH, D_T, D_KW),
    LAYER_BUF(ctx, EL_ACT, D_N, D_C),
    LAYER_BUF(res1, EL_ACT, D_N, D_C),
    LAYER_BUF(ln1_mean, EL_ACC, D_N),
    LAYER_BUF(ln1_rstd, EL_ACC, D_N),
    LAYER_BUF(ln1_keep, EL_INT, D_N, D_CW),
    LAYER_BUF(x1, EL_ACT, D_N, D_C),
    LAYER_BUF(pre_gelu, EL_ACT, D_N, D_I),
    LAYER_BUF(gelu, EL_ACT, D_N, D_I),
    LAYER_BUF(res2, EL_ACT, D_N, D_C),
    LAYER_BUF(ln2_mean, EL_ACC, D_N),
    LAYER_BUF(ln2_rstd, EL_ACC, D_N),
    LAYER_BUF(ln2_keep, EL_INT, D_N, D_CW),
    LAYER_BUF(out, EL_ACT, D_N, D_C),
};
#undef MODEL_BUF
#undef LAYER_BUF
enum {
    N_MODEL_BUFFERS = sizeof model_buffers / sizeof model_buffers[0],
    N_LAYER_BUFFERS = sizeof layer_buffers / sizeof layer_buffers[0],
};

static size_t dim_value(const bert_model *m, dim_symbol d) {
    const bert_config *c = &m->cfg;
    size_t C = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    switch (d) {
    case D_1: return 1;
    case D_B: return (size_t)m->B;
    case D_B1: return (size_t)m->B + 1;
    case D_T: return (size_t)m->T;
    case D_N: return (size_t)m->B * m->T;
    case D_R: return (size_t)bert_head_rows(c, m->B, m->P);
    case D_BNSP: return c->mlm_only ? 0 : (size_t)m->B;
    case D_C: return C;
    case D_3C: return 3 * C;
    case D_I: return I;
    case D_NH: return (size_t)c->num_attention_heads;
    case D_KW:  // what the backend records of the attention dropout (nothing without it)
        return c->attention_probs_dropout_prob > 0.0 && m->be->attention_keep_row_words
                   ? (size_t)m->be->attention_keep_row_words(m->T, c->hidden_size, c->num_attention_heads)
                   : 0;
    case D_CW: return (size_t)dropout_keep_words(c->hidden_size);
    case D_VP: return (size_t)bert_padded_vocab(c);
    case D_WIDE: {
        size_t ffn = c->arch == MODEL_MODERNBERT ? 2 * I : I;
        return ffn > 3 * C ? ffn : 3 * C;
    }
    case D_2: return 2;
    case D_2I: return 2 * I;
    case D_MODERN: return c->arch == MODEL_MODERNBERT;
    case D_MLP_DROP: return c->arch == MODEL_MODERNBERT && c->mlp_dropout > 0.0;
    }
    return 0;
}

static size_t buffer_bytes(const bert_model *m, const buffer_spec *s) {
    size_t n = s->type == EL_ACT ? m->be->act_size : s->type == EL_ACC ? m->be->acc_size : sizeof(int);
    for (int k = 0; k < 4; k++) n *= dim_value(m, s->shape[k]);
    return n;
}

// The pointer fields are void * or int *: stored and read through memcpy, not an lvalue of
// another pointer type.
static void slot_set(void *base, const buffer_spec *s, void *p) { memcpy((char *)base + s->field, &p, sizeof p); }
static void *slot_get(const void *base, const buffer_spec *s) {
    void *p;
    memcpy(&p, (const char *)base + s->field, sizeof p);
    return p;
}

// Allocate (or, in planning mode, count) every buffer of the tables; release them.
// The architecture's per-layer buffers: their table, and layer l's struct.
static const buffer_spec *layer_table(const bert_model *m, int *n) {
    *n = m->cfg.arch == MODEL_MODERNBERT ? modernbert_layer_buffer_count : N_LAYER_BUFFERS;
    return m->cfg.arch == MODEL_MODERNBERT ? modernbert_layer_buffers : layer_buffers;
}
static void *layer_struct(const bert_model *m, int l) {
    return m->cfg.arch == MODEL_MODERNBERT ? (void *)&m->modern[l] : (void *)&m->acts[l];
}

static void buffers_alloc(bert_model *m) {
    for (int i = 0; i < N_MODEL_BUFFERS; i++)
        slot_set(m, &model_buffers[i], model_alloc(m, model_buffers[i].category, buffer_bytes(m, &model_buffers[i])));
    int n;
    const buffer_spec *table = layer_table(m, &n);
    if (m->cfg.arch == MODEL_MODERNBERT) m->modern = xcalloc(m->cfg.num_hidden_layers, sizeof(modern_layer_acts));
    else m->acts = xcalloc(m->cfg.num_hidden_layers, sizeof(layer_acts));
    for (int l = 0; l < m->cfg.num_hidden_layers; l++)
        for (int i = 0; i < n; i++)
            slot_set(layer_struct(m, l), &table[i], model_alloc(m, table[i].category, buffer_bytes(m, &table[i])));
}

static void buffers_release(bert_model *m) {
    for (int i = 0; i < N_MODEL_BUFFERS; i++) m->be->release(slot_get(m, &model_buffers[i]));
    int n;
    const buffer_spec *table = layer_table(m, &n);
    if (m->acts || m->modern)
        for (int l = 0; l < m->cfg.num_hidden_layers; l++)
            for (int i = 0; i < n; i++) m->be->release(slot_get(layer_struct(m, l), &table[i]));
}

static void bert_init_buffers(bert_model *m, const bert_config *cfg, const backend_t *be, int B, int T, int P) {
    m->cfg = *cfg;
    m->be = be;
    m->B = B;
    m->T = T;
    m->P = P;
    build_table(m);
    size_t N = (size_t)B * T, R = (size_t)bert_head_rows(cfg, B, P), A = be->act_size, S = be->acc_size;

    m->params = model_alloc(m, MEM_PARAMS, m->n_params * sizeof(float));
    m->params_compute =
        be->params_to_compute ? model_alloc(m, MEM_PARAMS, m->n_params * A) : (void *)m->params;
    m->grads = model_alloc(m, MEM_GRADS, m->n_params * S);
    if (!m->planning) {  // host staging, outside the plan: a plan allocates nothing
        m->h_targets = xcalloc(R, sizeof(int));
        m->h_index = xcalloc(R, sizeof(int));
        m->h_input_ids = xcalloc(N, sizeof(int));
        m->h_segment_ids = xcalloc(N, sizeof(int));
        m->h_positions = xcalloc(N, sizeof(int));
        m->h_row_map = xcalloc(N, sizeof(int));
        m->h_doc_bounds = xcalloc(2 * N, sizeof(int));
        m->h_seq_offsets = xcalloc((size_t)B + 1, sizeof(int));
        m->h_correct = xcalloc(R, sizeof(int));
        m->h_losses = xcalloc(R, S);
    }
    buffers_alloc(m);
}

void bert_init(bert_model *m, const bert_config *cfg, const backend_t *be, int B, int T, int P) {
    if (cfg->arch == MODEL_MODERNBERT && (!be->rope_forward || !be->geglu_forward))
        fatal("the %s backend has no ModernBERT kernels yet (RoPE, GeGLU, the sliding window): a ModernBERT "
              "trains on the CPU backend (train.backend cpu)", be->name);
    memset(m, 0, sizeof *m);
    bert_init_buffers(m, cfg, be, B, T, P);
    m->unpad = UNPAD_AUTO;
}

void bert_init_table(bert_model *m, const bert_config *cfg) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    build_table(m);
}

memory_plan bert_memory_plan(const bert_config *cfg, const backend_t *be, int B, int T, int P) {
    bert_model m;
    memset(&m, 0, sizeof m);
    m.planning = 1;
    bert_init_buffers(&m, cfg, be, B, T, P);
    memory_plan plan = m.plan;
    // LAMB's two moments mirror the FP32 master weights.
    plan.bytes[MEM_OPTIMIZER] = 2 * m.n_params * sizeof(float);
    // The widest FFN GEMM output: I, or ModernBERT's GeGLU input of 2I.
    int ffn = cfg->arch == MODEL_MODERNBERT ? 2 * cfg->intermediate_size : cfg->intermediate_size;
    if (be->workspace_bytes)
        plan.bytes[MEM_WORKSPACE] = be->workspace_bytes(B, T, cfg->hidden_size, cfg->num_attention_heads, ffn,
                                                        bert_padded_vocab(cfg), bert_head_rows(cfg, B, P));
    bert_free(&m);  // the host parts; every backend buffer is NULL in planning mode
    return plan;
}

double memory_plan_total(const memory_plan *plan) {
    double total = 0.0;
    for (int i = 0; i < MEM_COUNT; i++) total += (double)plan->bytes[i];
    return total;
}

// The plan grows with the micro-batch, so a bisection finds the largest that fits in about
// log2(B) plans (a search down from B took minutes at B = 100,000).
int bert_max_micro_batch(const bert_config *cfg, const backend_t *be, int B, int T, int P, double available) {
    int fits = 0, too_big = B + 1;  // plan(fits) fits (0: none known), plan(too_big) does not
    while (too_big - fits > 1) {
        int b = fits + (too_big - fits) / 2;
        memory_plan plan = bert_memory_plan(cfg, be, b, T, P);
        if (memory_plan_total(&plan) <= available) fits = b;
        else too_big = b;
    }
    return fits;
}

void memory_plan_print(const memory_plan *plan, FILE *out) {
    char optimizer[64];
    snprintf(optimizer, sizeof optimizer, "optimizer state (%s)",
             plan->optimizer_state ? plan->optimizer_state : "LAMB moments");
    const char *names[MEM_COUNT] = {plan->masters_sharded ? "parameters (FP32 master shard, compute copy)"
                                                          : "parameters (FP32 master, compute copy)",
                                    "gradients", optimizer, "activations", "inputs", "workspace"};
    fprintf(out, "memory plan:\n");
    for (int i = 0; i < MEM_COUNT; i++)
        fprintf(out, "  %-44s %10.1f MiB\n", names[i], plan->bytes[i] / 1048576.0);
    fprintf(out, "  %-44s %10.1f MiB\n", "total", memory_plan_total(plan) / 1048576.0);
}

void bert_free(bert_model *m) {
    const backend_t *be = m->be;
    if (be) {  // NULL: a table alone (bert_init_table)
        be->release(m->grads);
        buffers_release(m);
        if (m->params_compute != (void *)m->params) be->release(m->params_compute);
        be->release(m->params);
    }
    free(m->acts);
    free(m->modern);
    free(m->off.layers);
    free(m->off.modern);
    free(m->off.layer_start);
    free(m->table);
    free(m->h_targets);
    free(m->h_index);
    free(m->h_input_ids);
    free(m->h_segment_ids);
    free(m->h_positions);
    free(m->h_row_map);
    free(m->h_doc_bounds);
    free(m->h_seq_offsets);
    free(m->h_correct);
    free(m->h_losses);
    free(m->h_grads);
    memset(m, 0, sizeof *m);
}

void bert_sync_compute(bert_model *m) {
    if (m->be->params_to_compute) m->be->params_to_compute(m->params_compute, m->params, m->n_params);
}

void bert_zero_grads(bert_model *m) { m->be->zero(m->grads, m->n_params * m->be->acc_size); }

void bert_init_weights(bert_model *m, uint64_t seed) {
    float *host = xcalloc(m->n_params, sizeof(float));
    if (m->cfg.arch == MODEL_MODERNBERT) {
        modernbert_init_weights(m, host, seed);
        m->be->upload(m->params, host, m->n_params * sizeof(float));
        free(host);
        bert_sync_compute(m);
        return;
    }
    double std = m->cfg.initializer_range;
    for (int i = 0; i < m->n_tensors; i++) {
        const param_info *p = &m->table[i];
        float *w = host + p->offset;
        if (strstr(p->name, "LayerNorm.weight")) {
            for (size_t k = 0; k < p->numel; k++) w[k] = 1.0f;
        } else if (p->ndim == 2) {
            // Box-Muller on counter-based draws: site = tensor index, element = k
            for (size_t k = 0; k < p->numel; k++) {
                double u1 = (philox_draw(seed, 0, 1000 + i, 2 * k) + 1.0) / 4294967297.0;
                double u2 = philox_draw(seed, 0, 1000 + i, 2 * k + 1) / 4294967296.0;
                w[k] = (float)(std * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
            }
        }
    }
    memset(host + m->off.wte + (size_t)m->cfg.pad_token_id * m->cfg.hidden_size, 0,
           sizeof(float) * m->cfg.hidden_size);
    m->be->upload(m->params, host, m->n_params * sizeof(float));
    free(host);
    bert_sync_compute(m);
}


// The micro-batch's sequence offsets from input_mask (a row's length is its count of ones;
// the loader refuses a mask that is not a prefix of ones), and whether it runs unpadded:
// when unpadding is on and (auto) the micro-batch has padding, and no row is empty (an empty
// row has no [CLS] row to pool; such a micro-batch runs padded, with the same results).
// Unpadded, ids, segments, positions and row_map are those of the real tokens, in order;
// padded, ids and segments are the batch's and positions, row_map are untouched.
int bert_unpad_rows(const batch_t *batch, unpad_mode mode, int *off, int *ids, int *segments, int *positions,
                    int *row_map) {
    int B = batch->B, T = batch->T, N = B * T, empty = 0;
    off[0] = 0;
    for (int b = 0; b < B; b++) {
        int len = 0;
        for (int t = 0; t < T; t++) len += batch->input_mask[b * T + t] != 0;
        empty |= len == 0;
        off[b + 1] = off[b] + len;
    }
    int packed = !empty && (mode == UNPAD_ON || (mode == UNPAD_AUTO && off[B] < N));
    if (!packed) {
        memcpy(ids, batch->input_ids, N * sizeof(int));
        memcpy(segments, batch->segment_ids, N * sizeof(int));
        return 0;
    }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < off[b + 1] - off[b]; t++) {
            int r = off[b] + t;
            ids[r] = batch->input_ids[b * T + t];
            segments[r] = batch->segment_ids[b * T + t];
            positions[r] = t;
            row_map[r] = b * T + t;
        }
    return 1;
}

int bert_document_rows(const batch_t *batch, int packed, const int *off, int *positions, int *bounds) {
    int B = batch->B, T = batch->T, any = 0;
    for (int b = 0; b < B && !any; b++) any = batch_documents(batch, b) > 1;
    if (!any) return 0;
    for (int b = 0; b < B; b++) {
        const int *starts = batch->document_starts + (size_t)b * T;
        int L = off[b + 1] - off[b], n = batch_documents(batch, b), first = packed ? off[b] : b * T;
        for (int d = 0; d < n && L > 0; d++) {  // an empty row (padded: all padding) has none
            int lo = starts[d], hi = d + 1 < n ? starts[d + 1] : L;
            if (lo >= L || (d > 0 && lo <= starts[d - 1]))
                fatal("document_starts[%d][%d] = %d: a document must start after the one before and below the "
                      "row's %d real tokens", b, d, lo, L);
            for (int t = lo; t < hi; t++) {
                positions[first + t] = t - lo;
                bounds[2 * (first + t)] = lo, bounds[2 * (first + t) + 1] = hi;
            }
        }
        for (int t = L; t < (packed ? L : T); t++) {  // padded: the padding rows, a run that sees no real key
            positions[first + t] = t - L;
            bounds[2 * (first + t)] = L, bounds[2 * (first + t) + 1] = T;
        }
    }
    return 1;
}

static void plan_rows(bert_model *m, const batch_t *batch) {
    m->cur_packed = bert_unpad_rows(batch, m->unpad, m->h_seq_offsets, m->h_input_ids, m->h_segment_ids,
                                    m->h_positions, m->h_row_map);
    m->cur_rows = m->cur_packed ? m->h_seq_offsets[batch->B] : batch->B * batch->T;
    m->cur_docs = bert_document_rows(batch, m->cur_packed, m->h_seq_offsets, m->h_positions, m->h_doc_bounds);
    m->cur_doc_bounds = m->cur_docs ? m->d_doc_bounds : NULL;
}

// The FFN's bias + GELU in its GEMMs' epilogues (backend.h): the tanh GELU on a backend
// that has them; the exact GELU always on the streaming kernels.
static int ffn_epilogues(const bert_model *m) {
    return bert_gelu_kind(&m->cfg) == GELU_TANH && m->be->matmul_bias_gelu_forward && m->be->matmul_dgelu_backward;
}

int bert_buckets(const bert_model *m, size_t *start) {
    int L = m->cfg.num_hidden_layers;
    size_t layers_end = m->off.heads;  // the heads' tensors follow the encoder's
    start[0] = 0;
    for (int l = 0; l < L; l++) start[1 + l] = m->off.layer_start[l];
    start[L + 1] = layers_end;
    start[L + 2] = m->n_params;
    return L + 2;
}

// The micro-batch's inputs on the backend: its rows (padded or unpadded), ids, positions, and
// the gather list of the heads (valid masked positions first, then each [CLS] row) with their
// targets; every id checked first.
static void prepare_inputs(bert_model *m, const batch_t *batch, int train, uint64_t seed, uint32_t step) {
    const backend_t *be = m->be;
    const bert_config *c = &m->cfg;
    int B = batch->B, T = batch->T, V = c->vocab_size;
    if (B > m->B || T > m->T || batch->P > m->P)
        fatal("batch %dx%d with %d predictions exceeds the model's buffers %dx%d with %d", B, T, batch->P, m->B,
              m->T, m->P);
    int N = B * T;
    m->cur_B = B;
    m->cur_T = T;
    m->train = train;
    m->drop = (dropout_t){.p = 0.0f, .step = step, .site = 0, .seed = seed};
    plan_rows(m, batch);
    // Every token-wise op runs over Nr rows: token t of sequence b is row first[b] + t.
    int Nr = m->cur_rows, packed = m->cur_packed;
    const int *off = m->h_seq_offsets;
#define FIRST_ROW(b) (packed ? off[b] : (b) * T)

    // Inputs, and the gather list: valid masked positions first, then each [CLS] row.
    int *index = m->h_index;
    int R = 0;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < batch_masked_count(batch, b); p++) {
            int pos = batch->masked_lm_positions[b * batch->P + p];
            int id = batch->masked_lm_ids[b * batch->P + p];
            if (pos >= T) fatal("masked_lm_positions[%d][%d] = %d is not below the sequence length %d", b, p, pos, T);
            if (packed && pos >= off[b + 1] - off[b])
                fatal("masked_lm_positions[%d][%d] = %d is a padding position (the sequence has %d real tokens)", b,
                      p, pos, off[b + 1] - off[b]);
            if (id < 0 || id >= V) fatal("masked_lm_ids[%d][%d] = %d is outside the vocabulary [0, %d)", b, p, id, V);
            index[R] = FIRST_ROW(b) + pos;
            m->h_targets[R++] = id;
        }
    m->n_pred = R;
    int Bh = c->mlm_only ? 0 : B;  // the [CLS] rows the NSP head reads
    for (int b = 0; b < Bh; b++) {
        index[R + b] = FIRST_ROW(b);
        m->h_targets[R + b] = batch->next_sentence_labels[b];
    }
    for (int i = 0; i < N; i++) {
        if (batch->input_ids[i] < 0 || batch->input_ids[i] >= V)
            fatal("input_ids[%d][%d] = %d is outside the vocabulary [0, %d)", i / T, i % T, batch->input_ids[i], V);
        if (c->arch == MODEL_BERT && (batch->segment_ids[i] < 0 || batch->segment_ids[i] >= c->type_vocab_size))
            fatal("segment_ids[%d][%d] = %d is outside [0, %d)", i / T, i % T, batch->segment_ids[i],
                  c->type_vocab_size);
    }
#undef FIRST_ROW
    be->upload(m->d_input_ids, m->h_input_ids, Nr * sizeof(int));
    be->upload(m->d_segment_ids, m->h_segment_ids, Nr * sizeof(int));
    be->upload(m->d_seq_offsets, off, (size_t)(B + 1) * sizeof(int));
    if (packed || m->cur_docs) be->upload(m->d_positions, m->h_positions, Nr * sizeof(int));
    if (packed) be->upload(m->d_row_map, m->h_row_map, Nr * sizeof(int));
    if (m->cur_docs) be->upload(m->d_doc_bounds, m->h_doc_bounds, 2 * (size_t)Nr * sizeof(int));
    be->upload(m->d_gather_index, index, (size_t)(R + Bh) * sizeof(int));
    be->upload(m->d_mlm_targets, m->h_targets, (size_t)(R + Bh) * sizeof(int));
}

// BERT's encoder: the embeddings and the post-LN layers; returns the last layer's output rows.
static const void *bert_encoder_forward(bert_model *m, int B, int T) {
    const backend_t *be = m->be;
    const bert_config *c = &m->cfg;
    int C = c->hidden_size, I = c->intermediate_size, NH = c->num_attention_heads;
    int Nr = m->cur_rows, packed = m->cur_packed;
    double hp = c->hidden_dropout_prob, ap = c->attention_probs_dropout_prob;
    const param_offsets *o = &m->off;
    if (m->weights_needed) m->weights_needed(0);
    be->embeddings_forward(m->emb, m->d_input_ids, m->d_segment_ids, model_positions(m), W(m, o->wte),
                           W(m, o->wpe), W(m, o->wtt), Nr, T, c->max_position_embeddings, C);
    be->layernorm_forward(m->emb_ln, m->emb_mean, m->emb_rstd, m->emb, W(m, o->emb_ln_w), W(m, o->emb_ln_b), Nr, C,
                          (float)c->layer_norm_eps);
    be->dropout_residual_forward(m->x0, m->emb_ln, NULL, Nr * C, model_token_site(m, hp, 0, 0));
    const void *x = m->x0;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const layer_offsets *L = &o->layers[l];
        layer_acts *a = &m->acts[l];
        if (m->weights_needed) m->weights_needed(1 + l);
        be->matmul_forward(a->qkv, x, W(m, L->qkv_w), W(m, L->qkv_b), Nr, C, 3 * C);
        be->attention_forward(a->ctx, a->lse, a->keep, a->qkv, m->d_seq_offsets, m->cur_doc_bounds, packed, B, T, C, NH, 0,
                              model_site(m, ap, 1 + 3 * l));
        be->matmul_forward(m->d_a, a->ctx, W(m, L->attn_out_w), W(m, L->attn_out_b), Nr, C, C);
        be->residual_dropout_layernorm_forward(a->x1, a->res1, a->ln1_mean, a->ln1_rstd, m->d_a, x, W(m, L->ln1_w),
                                               W(m, L->ln1_b), Nr, C, (float)c->layer_norm_eps,
                                               model_ln_site(m, hp, 2 + 3 * l, a->ln1_keep));
        if (ffn_epilogues(m)) {
            // pre_gelu is the GELU's input, bias included (the GEMM's epilogue adds it).
            be->matmul_bias_gelu_forward(a->gelu, a->pre_gelu, a->x1, W(m, L->inter_w), W(m, L->inter_b), Nr, C, I);
        } else {
            // pre_gelu is the GEMM's output without the bias, which the GELU pass adds.
            be->matmul_forward(a->pre_gelu, a->x1, W(m, L->inter_w), NULL, Nr, C, I);
            be->bias_gelu_forward(a->gelu, a->pre_gelu, W(m, L->inter_b), Nr, I, bert_gelu_kind(c));
        }
        be->matmul_forward(m->d_a, a->gelu, W(m, L->out_w), W(m, L->out_b), Nr, I, C);
        be->residual_dropout_layernorm_forward(a->out, a->res2, a->ln2_mean, a->ln2_rstd, m->d_a, a->x1,
                                               W(m, L->ln2_w), W(m, L->ln2_b), Nr, C, (float)c->layer_norm_eps,
                                               model_ln_site(m, hp, 3 + 3 * l, a->ln2_keep));
        x = a->out;
    }

    return x;
}

bert_losses bert_forward(bert_model *m, const batch_t *batch, int train, uint64_t seed, uint32_t step) {
    const backend_t *be = m->be;
    const bert_config *c = &m->cfg;
    const param_offsets *o = &m->off;
    int B = batch->B, C = c->hidden_size, V = c->vocab_size;
    prepare_inputs(m, batch, train, seed, step);
    const void *x = c->arch == MODEL_MODERNBERT ? modernbert_encoder_forward(m, B, batch->T)
                                                : bert_encoder_forward(m, B, batch->T);
    int R = m->n_pred, Bh = c->mlm_only ? 0 : B;  // the masked rows, and the [CLS] rows the NSP head reads

    // Heads on the gathered rows (BERT's and ModernBERT's masked LM are the same computation:
    // dense, activation, LayerNorm, decoder tied to the token embeddings).
    if (m->weights_needed) m->weights_needed(c->num_hidden_layers + 1);
    be->gather_rows_forward(m->gathered, x, m->d_gather_index, R + Bh, C);
    be->matmul_forward(m->mlm_pre, m->gathered, W(m, o->mlm_w), NULL, R, C, C);
    be->bias_gelu_forward(m->mlm_gelu, m->mlm_pre, W_OPT(m, o->mlm_b), R, C, head_gelu_kind(c));
    be->layernorm_forward(m->mlm_x, m->mlm_mean, m->mlm_rstd, m->mlm_gelu, W(m, o->mlm_ln_w), W_OPT(m, o->mlm_ln_b),
                          R, C, (float)c->layer_norm_eps);
    int Vp = bert_padded_vocab(c);
    be->matmul_forward(m->mlm_logits, m->mlm_x, W(m, o->wte), W_OPT(m, o->mlm_bias), R, C, Vp);
    if (Bh) {
        const void *cls_rows = ACT(m, m->gathered, (size_t)R * C);
        be->matmul_forward(m->pooled_pre, cls_rows, W(m, o->pool_w), W(m, o->pool_b), B, C, C);
        be->tanh_forward(m->pooled, m->pooled_pre, B * C);
        be->matmul_forward(m->nsp_logits, m->pooled, W(m, o->nsp_w), W(m, o->nsp_b), B, C, 2);
    }

    be->crossentropy_forward(m->losses, m->d_correct, m->mlm_logits, m->d_mlm_targets, R, V, Vp, m->label_smoothing);
    if (Bh)
        be->crossentropy_forward(ACC(m, m->losses, R), m->d_correct + R, m->nsp_logits, m->d_mlm_targets + R, B, 2,
                                 2, 0.0f);

    // Per-row losses to the host, summed in a fixed order.
    size_t S = be->acc_size;
    char *host_losses = m->h_losses;
    int *host_correct = m->h_correct;
    be->download(host_losses, m->losses, (size_t)(R + Bh) * S);
    be->download(host_correct, m->d_correct, (size_t)(R + Bh) * sizeof(int));
    bert_losses out = {0};
    double mlm = 0.0, nsp = 0.0;
    for (int i = 0; i < R + Bh; i++) {
        double v = S == sizeof(double) ? ((double *)host_losses)[i] : ((float *)host_losses)[i];
        if (i < R) {
            mlm += v;
            out.mlm_correct += host_correct[i];
        } else {
            nsp += v;
            out.nsp_correct += host_correct[i];
        }
    }
    out.n_pred = R;
    out.mlm_sum = mlm;
    out.nsp_sum = nsp;
    out.mlm_loss = R ? mlm / R : 0.0;
    out.nsp_loss = Bh ? nsp / B : 0.0;
    out.loss = out.mlm_loss + out.nsp_loss;
    return out;
}

void bert_backward(bert_model *m, float loss_scale) {
    bert_backward_weighted(m, m->n_pred ? loss_scale / m->n_pred : 0.0f, loss_scale / m->cur_B);
}

static void bert_encoder_backward(bert_model *m, void *dx);

void bert_backward_weighted(bert_model *m, float mlm_row_weight, float nsp_row_weight) {
    const backend_t *be = m->be;
    const bert_config *c = &m->cfg;
    const param_offsets *o = &m->off;
    int B = m->cur_B, N = m->cur_rows, R = m->n_pred;
    int C = c->hidden_size, V = c->vocab_size;
    int Vp = bert_padded_vocab(c);
    size_t A = be->act_size;

    // Heads. The logits buffers take their own gradients in place.
    if (R)
        be->crossentropy_backward(m->mlm_logits, m->mlm_logits, m->d_mlm_targets, R, V, Vp, mlm_row_weight,
                                  m->label_smoothing);
    int Bh = c->mlm_only ? 0 : B;  // the [CLS] rows the NSP head read
    void *d_gathered = m->d_qkv;  // [R + B, C] fits in [N, 3C]
    if (Bh) {
        be->crossentropy_backward(m->nsp_logits, m->nsp_logits, m->d_mlm_targets + R, B, 2, 2, nsp_row_weight, 0.0f);
        void *d_cls = (char *)d_gathered + (size_t)R * C * A;
        be->matmul_backward(m->d_b, G(m, o->nsp_w), G(m, o->nsp_b), m->nsp_logits, m->pooled, W(m, o->nsp_w), NULL,
                            B, C, 2);
        be->tanh_backward(m->d_b, m->d_b, m->pooled, B * C);
        be->matmul_backward(d_cls, G(m, o->pool_w), G(m, o->pool_b), m->d_b, ACT(m, m->gathered, (size_t)R * C),
                            W(m, o->pool_w), NULL, B, C, C);
    }
    if (R) {
        be->matmul_backward(m->d_a, G(m, o->wte), G_OPT(m, o->mlm_bias), m->mlm_logits, m->mlm_x, W(m, o->wte),
                            NULL, R, C, Vp);
        be->layernorm_backward(m->d_b, G(m, o->mlm_ln_w), G_OPT(m, o->mlm_ln_b), m->d_a, m->mlm_gelu,
                               W(m, o->mlm_ln_w), m->mlm_mean, m->mlm_rstd, NULL, R, C);
        be->bias_gelu_backward(m->d_b, G_OPT(m, o->mlm_b), m->d_b, m->mlm_pre, W_OPT(m, o->mlm_b), R, C,
                               head_gelu_kind(c));
        be->matmul_backward(d_gathered, G(m, o->mlm_w), NULL, m->d_b, m->gathered, W(m, o->mlm_w), NULL, R, C, C);
    }
    size_t layers_end = o->heads;  // the heads' tensors follow the encoder's
    if (m->grads_ready) m->grads_ready(m->grads, layers_end, m->n_params - layers_end);
    void *dx = m->d_a;  // gradient of the current layer's output
    be->gather_rows_backward(dx, d_gathered, m->h_index, R + Bh, N, C);
    if (c->arch == MODEL_MODERNBERT) modernbert_encoder_backward(m, dx);
    else bert_encoder_backward(m, dx);
}

// BERT's encoder backward from dx, the gradient of the last layer's output rows.
static void bert_encoder_backward(bert_model *m, void *dx) {
    const backend_t *be = m->be;
    const bert_config *c = &m->cfg;
    const param_offsets *o = &m->off;
    int B = m->cur_B, T = m->cur_T, N = m->cur_rows, packed = m->cur_packed;
    int C = c->hidden_size, I = c->intermediate_size, NH = c->num_attention_heads;
    double hp = c->hidden_dropout_prob, ap = c->attention_probs_dropout_prob;
    size_t layers_end = o->heads;

    for (int l = c->num_hidden_layers - 1; l >= 0; l--) {
        const layer_offsets *L = &o->layers[l];
        layer_acts *a = &m->acts[l];
        const void *x = l ? m->acts[l - 1].out : m->x0;
        void *d_res2 = m->d_b, *d_x1 = m->d_c;
        // d_res2 (the residual path's gradient) and dx = its dropout backward, in one pass.
        be->layernorm_dropout_backward(d_res2, dx, G(m, L->ln2_w), G(m, L->ln2_b), dx, a->res2, W(m, L->ln2_w),
                                       a->ln2_mean, a->ln2_rstd, N, C, model_ln_site(m, hp, 3 + 3 * l, a->ln2_keep));
        if (ffn_epilogues(m)) {
            be->matmul_dgelu_backward(m->d_wide, G(m, L->out_w), G(m, L->out_b), G(m, L->inter_b), dx, a->gelu,
                                      W(m, L->out_w), a->pre_gelu, N, I, C);
        } else {
            be->matmul_backward(m->d_wide, G(m, L->out_w), G(m, L->out_b), dx, a->gelu, W(m, L->out_w), NULL, N, I,
                                C);
            be->bias_gelu_backward(m->d_wide, G(m, L->inter_b), m->d_wide, a->pre_gelu, W(m, L->inter_b), N, I,
                                   bert_gelu_kind(c));
        }
        // The residual gradient d_res2 enters as the GEMM's C input (beta = 1).
        be->matmul_backward(d_x1, G(m, L->inter_w), NULL, m->d_wide, a->x1, W(m, L->inter_w), d_res2, N, C, I);
        void *d_res1 = m->d_b;
        be->layernorm_dropout_backward(d_res1, dx, G(m, L->ln1_w), G(m, L->ln1_b), d_x1, a->res1, W(m, L->ln1_w),
                                       a->ln1_mean, a->ln1_rstd, N, C, model_ln_site(m, hp, 2 + 3 * l, a->ln1_keep));
        void *d_ctx = m->d_c;
        be->matmul_backward(d_ctx, G(m, L->attn_out_w), G(m, L->attn_out_b), dx, a->ctx, W(m, L->attn_out_w), NULL, N,
                            C, C);
        be->attention_backward(m->d_qkv, d_ctx, a->qkv, a->ctx, a->lse, a->keep, m->d_seq_offsets, m->cur_doc_bounds, packed, B, T, C,
                               NH, 0, model_site(m, ap, 1 + 3 * l));
        be->matmul_backward(dx, G(m, L->qkv_w), G(m, L->qkv_b), m->d_qkv, x, W(m, L->qkv_w), d_res1, N, C, 3 * C);
        size_t end = l + 1 < c->num_hidden_layers ? o->layers[l + 1].qkv_w : layers_end;
        if (m->grads_ready) m->grads_ready(m->grads, L->qkv_w, end - L->qkv_w);
    }
    be->dropout_backward(m->d_b, dx, N * C, model_token_site(m, hp, 0, 0));
    be->layernorm_backward(m->d_c, G(m, o->emb_ln_w), G(m, o->emb_ln_b), m->d_b, m->emb, W(m, o->emb_ln_w),
                           m->emb_mean, m->emb_rstd, NULL, N, C);
    be->embeddings_backward(G(m, o->wte), G(m, o->wpe), G(m, o->wtt), m->d_c, m->h_input_ids, m->h_segment_ids,
                            model_host_positions(m), c->pad_token_id, N, T, c->max_position_embeddings, C);
    size_t embeddings_end = c->num_hidden_layers ? o->layers[0].qkv_w : layers_end;
    if (m->grads_ready) m->grads_ready(m->grads, 0, embeddings_end);
}
