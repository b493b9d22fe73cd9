// ModernBERT's encoder, as transformers' ModernBertModel computes it (modular_modernbert.py,
// eager attention), over the shared machinery of engine/model.c (inputs, the masked-LM head,
// losses, buffers). Pre-LN, no position table, RoPE, GeGLU, sliding-window attention:
//   x0 = dropout(LN(tok_embeddings[ids]))                                   (embedding_dropout)
//   per layer l: a = l ? LN_attn(x) : x          (layer 0's attn_norm is the identity)
//                qkv = rope_l(a Wqkv^T + b)      (theta: global_rope_theta or local_rope_theta)
//                ctx = attention(qkv, window_l)  (window: local_attention / 2 each side, or all)
//                h = x + dropout(ctx Wo^T + b)   (attention_dropout, as the probabilities')
//                u = LN_mlp(h);  [in | gate] = u Wi^T + b;  g = act(in) * gate
//                out = h + dropout(g) Wo2^T + b  (mlp_dropout)
//   final = LN_final(out of the last layer)      (the rows the masked-LM head gathers)
// The LayerNorms and linear layers have their biases only where the config says (norm_bias,
// attention_bias, mlp_bias). Dropout sites: 0 the embeddings; per layer 1 + 4l the attention
// probabilities, 2 + 4l the attention output, 3 + 4l the GeGLU output.
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "engine/model_parts.h"
#include "kernels/common/check.h"

enum { MODERN_SITES_PER_LAYER = 4 };

static size_t layer_param(bert_model *m, int *cap, int l, const char *suffix, int rows, int cols) {
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);
    return model_add_param(m, cap, name, rows, cols, 1);
}

void modernbert_build_table(bert_model *m, int *cap) {
    const bert_config *c = &m->cfg;
    int C = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, Vp = bert_padded_vocab(c);
    param_offsets *o = &m->off;
    o->wte = model_add_param_rows(m, cap, "model.embeddings.tok_embeddings.weight", V, C, 1, Vp);
    o->emb_ln_w = model_add_param(m, cap, "model.embeddings.norm.weight", C, 0, 1);
    if (c->norm_bias) o->emb_ln_b = model_add_param(m, cap, "model.embeddings.norm.bias", C, 0, 1);
    o->modern = xcalloc(c->num_hidden_layers, sizeof(modern_layer_offsets));
    for (int l = 0; l < c->num_hidden_layers; l++) {
        modern_layer_offsets *L = &o->modern[l];
#define P(field, suffix, rows, cols) field = layer_param(m, cap, l, suffix, rows, cols)
        if (l) {
            P(L->attn_norm_w, "attn_norm.weight", C, 0);
            if (c->norm_bias) P(L->attn_norm_b, "attn_norm.bias", C, 0);
        }
        P(L->wqkv_w, "attn.Wqkv.weight", 3 * C, C);
        if (c->attention_bias) P(L->wqkv_b, "attn.Wqkv.bias", 3 * C, 0);
        P(L->wo_w, "attn.Wo.weight", C, C);
        if (c->attention_bias) P(L->wo_b, "attn.Wo.bias", C, 0);
        P(L->mlp_norm_w, "mlp_norm.weight", C, 0);
        if (c->norm_bias) P(L->mlp_norm_b, "mlp_norm.bias", C, 0);
        P(L->wi_w, "mlp.Wi.weight", 2 * I, C);
        if (c->mlp_bias) P(L->wi_b, "mlp.Wi.bias", 2 * I, 0);
        P(L->mlp_wo_w, "mlp.Wo.weight", C, I);
        if (c->mlp_bias) P(L->mlp_wo_b, "mlp.Wo.bias", C, 0);
#undef P
        o->layer_start[l] = l ? L->attn_norm_w : L->wqkv_w;
    }
    o->final_ln_w = model_add_param(m, cap, "model.final_norm.weight", C, 0, 1);
    if (c->norm_bias) o->final_ln_b = model_add_param(m, cap, "model.final_norm.bias", C, 0, 1);
}

#define LAYER_BUF(field, type, ...) {#field, offsetof(modern_layer_acts, field), type, MEM_ACTIVATIONS, {__VA_ARGS__}}
const buffer_spec modernbert_layer_buffers[] = {
    LAYER_BUF(attn_in, EL_ACT, D_N, D_C),
    LAYER_BUF(attn_mean, EL_ACC, D_N),
    LAYER_BUF(attn_rstd, EL_ACC, D_N),
    LAYER_BUF(qkv, EL_ACT, D_N, D_3C),
    LAYER_BUF(lse, EL_ACC, D_B, D_NH, D_T),
    LAYER_BUF(keep, EL_INT, D_B, D_NH, D_T, D_KW),
    LAYER_BUF(ctx, EL_ACT, D_N, D_C),
    LAYER_BUF(h, EL_ACT, D_N, D_C),
    LAYER_BUF(h_keep, EL_INT, D_N, D_CW),
    LAYER_BUF(mlp_in, EL_ACT, D_N, D_C),
    LAYER_BUF(mlp_mean, EL_ACC, D_N),
    LAYER_BUF(mlp_rstd, EL_ACC, D_N),
    LAYER_BUF(wi, EL_ACT, D_N, D_2I),
    LAYER_BUF(glu, EL_ACT, D_N, D_I),
    LAYER_BUF(glu_drop, EL_ACT, D_MLP_DROP, D_N, D_I),  // none without mlp_dropout: Wo reads glu
    LAYER_BUF(out, EL_ACT, D_N, D_C),
};
#undef LAYER_BUF
const int modernbert_layer_buffer_count = sizeof modernbert_layer_buffers / sizeof modernbert_layer_buffers[0];

static uint32_t layer_site(int l, int k) { return 1 + MODERN_SITES_PER_LAYER * (uint32_t)l + (uint32_t)k; }

// The MLP's output projection reads dropout(GeGLU): glu_drop, or glu itself without mlp_dropout.
static const void *mlp_wo_input(const bert_model *m, const modern_layer_acts *a) {
    return m->cfg.mlp_dropout > 0.0 ? a->glu_drop : a->glu;
}

const void *modernbert_encoder_forward(bert_model *m, int B, int T) {
    const backend_t *be = m->be;
    const bert_config *c = &m->cfg;
    const param_offsets *o = &m->off;
    int C = c->hidden_size, I = c->intermediate_size, NH = c->num_attention_heads, N = m->cur_rows;
    const int *positions = model_positions(m);
    float eps = (float)c->layer_norm_eps;
    double ap = c->attention_probs_dropout_prob;
    gelu_kind act = bert_gelu_kind(c);
    if (m->weights_needed) m->weights_needed(0);
    be->embeddings_forward(m->emb, m->d_input_ids, m->d_segment_ids, positions, W(m, o->wte), NULL, NULL, N, T,
                           c->max_position_embeddings, C);
    be->layernorm_forward(m->emb_ln, m->emb_mean, m->emb_rstd, m->emb, W(m, o->emb_ln_w), W_OPT(m, o->emb_ln_b), N, C,
                          eps);
    be->dropout_residual_forward(m->x0, m->emb_ln, NULL, N * C, model_token_site(m, c->embedding_dropout, 0, 0));
    // A layer's output, out = h + its MLP's branch (left in d_a), is summed by the op that
    // normalizes it next, the next layer's attn_norm or the final norm, in one pass with that
    // LayerNorm (residual_dropout_layernorm_forward at p = 0, which also saves out).
    const void *x = m->x0;
    for (int l = 0; l < c->num_hidden_layers; l++) {
        const modern_layer_offsets *L = &o->modern[l];
        modern_layer_acts *a = &m->modern[l];
        if (m->weights_needed) m->weights_needed(1 + l);
        const void *in = x;
        if (l) {
            modern_layer_acts *prev = &m->modern[l - 1];
            be->residual_dropout_layernorm_forward(a->attn_in, prev->out, a->attn_mean, a->attn_rstd, m->d_a, prev->h,
                                                   W(m, L->attn_norm_w), W_OPT(m, L->attn_norm_b), N, C, eps,
                                                   model_site(m, 0.0, 0));
            x = prev->out;
            in = a->attn_in;
        }
        be->matmul_forward(a->qkv, in, W(m, L->wqkv_w), W_OPT(m, L->wqkv_b), N, C, 3 * C);
        be->rope_forward(a->qkv, positions, N, T, C, NH, (float)modernbert_rope_theta(c, l));
        be->attention_forward(a->ctx, a->lse, a->keep, a->qkv, m->d_seq_offsets, m->cur_doc_bounds, m->cur_packed, B, T, C, NH,
                              model_attention_window(c, l), model_site(m, ap, layer_site(l, 0)));
        be->matmul_forward(m->d_a, a->ctx, W(m, L->wo_w), W_OPT(m, L->wo_b), N, C, C);
        // h = x + dropout(attention output), and the MLP's LayerNorm of it, in one op.
        be->residual_dropout_layernorm_forward(a->mlp_in, a->h, a->mlp_mean, a->mlp_rstd, m->d_a, x,
                                               W(m, L->mlp_norm_w), W_OPT(m, L->mlp_norm_b), N, C, eps,
                                               model_ln_site(m, ap, layer_site(l, 1), a->h_keep));
        be->matmul_forward(a->wi, a->mlp_in, W(m, L->wi_w), W_OPT(m, L->wi_b), N, C, 2 * I);
        be->geglu_forward(a->glu, a->wi, N, I, act);
        if (c->mlp_dropout > 0.0)  // (at 0 the copy would change nothing: Wo reads glu itself)
            be->dropout_residual_forward(a->glu_drop, a->glu, NULL, N * I,
                                         model_token_site(m, c->mlp_dropout, layer_site(l, 2), I));
        be->matmul_forward(m->d_a, mlp_wo_input(m, a), W(m, L->mlp_wo_w), W_OPT(m, L->mlp_wo_b), N, I, C);
    }
    const modern_layer_acts *last = &m->modern[c->num_hidden_layers - 1];
    be->residual_dropout_layernorm_forward(m->final, last->out, m->final_mean, m->final_rstd, m->d_a, last->h,
                                           W(m, o->final_ln_w), W_OPT(m, o->final_ln_b), N, C, eps,
                                           model_site(m, 0.0, 0));
    return m->final;
}

void modernbert_encoder_backward(bert_model *m, void *dx) {
    const backend_t *be = m->be;
    const bert_config *c = &m->cfg;
    const param_offsets *o = &m->off;
    int B = m->cur_B, T = m->cur_T, N = m->cur_rows, packed = m->cur_packed, Ls = c->num_hidden_layers;
    int C = c->hidden_size, I = c->intermediate_size, NH = c->num_attention_heads;
    const int *positions = model_positions(m);
    double ap = c->attention_probs_dropout_prob;
    gelu_kind act = bert_gelu_kind(c);
    // The gradient of the current layer's output is in `dout`, one of d_a and d_b; the layer's
    // input gradient goes to the other. d_c, d_glu, d_wide and d_qkv are scratch.
    void *dout = dx == m->d_a ? m->d_b : m->d_a, *other = dx;
    be->layernorm_backward(dout, G(m, o->final_ln_w), G_OPT(m, o->final_ln_b), dx, m->modern[Ls - 1].out,
                           W(m, o->final_ln_w), m->final_mean, m->final_rstd, NULL, N, C);
    for (int l = Ls - 1; l >= 0; l--) {
        const modern_layer_offsets *L = &o->modern[l];
        modern_layer_acts *a = &m->modern[l];
        const void *x = l ? m->modern[l - 1].out : m->x0;
        // out = h + dropout(g) Wo2^T: the MLP's branch, back to mlp_in.
        be->matmul_backward(m->d_glu, G(m, L->mlp_wo_w), G_OPT(m, L->mlp_wo_b), dout, mlp_wo_input(m, a),
                            W(m, L->mlp_wo_w), NULL, N, I, C);
        if (c->mlp_dropout > 0.0)
            be->dropout_backward(m->d_glu, m->d_glu, N * I, model_token_site(m, c->mlp_dropout, layer_site(l, 2), I));
        be->geglu_backward(m->d_wide, m->d_glu, a->wi, N, I, act);
        be->matmul_backward(m->d_c, G(m, L->wi_w), G_OPT(m, L->wi_b), m->d_wide, a->mlp_in, W(m, L->wi_w), NULL, N,
                            C, 2 * I);
        // dh = LN_mlp's backward + the residual's dout, into dout's buffer in the same pass.
        be->layernorm_backward(dout, G(m, L->mlp_norm_w), G_OPT(m, L->mlp_norm_b), m->d_c, a->h,
                               W(m, L->mlp_norm_w), a->mlp_mean, a->mlp_rstd, dout, N, C);
        // h = x + dropout(ctx Wo^T): the attention's branch, back to its input.
        be->dropout_backward(m->d_c, dout, N * C, model_ln_site(m, ap, layer_site(l, 1), a->h_keep));
        be->matmul_backward(other, G(m, L->wo_w), G_OPT(m, L->wo_b), m->d_c, a->ctx, W(m, L->wo_w), NULL, N, C, C);
        be->attention_backward(m->d_qkv, other, a->qkv, a->ctx, a->lse, a->keep, m->d_seq_offsets, m->cur_doc_bounds, packed, B, T, C,
                               NH, model_attention_window(c, l), model_site(m, ap, layer_site(l, 0)));
        be->rope_backward(m->d_qkv, positions, N, T, C, NH, (float)modernbert_rope_theta(c, l));
        if (l == 0) {  // the attention's input is x itself: dx = dqkv Wqkv + dh
            be->matmul_backward(other, G(m, L->wqkv_w), G_OPT(m, L->wqkv_b), m->d_qkv, x, W(m, L->wqkv_w), dout, N,
                                C, 3 * C);
        } else {       // through attn_norm: dx = LN_attn's backward + dh
            be->matmul_backward(m->d_c, G(m, L->wqkv_w), G_OPT(m, L->wqkv_b), m->d_qkv, a->attn_in, W(m, L->wqkv_w),
                                NULL, N, C, 3 * C);
            be->layernorm_backward(other, G(m, L->attn_norm_w), G_OPT(m, L->attn_norm_b), m->d_c, x,
                                   W(m, L->attn_norm_w), a->attn_mean, a->attn_rstd, dout, N, C);
        }
        void *t = dout;
        dout = other, other = t;
        size_t end = l + 1 < Ls ? o->layer_start[l + 1] : o->heads;
        if (m->grads_ready) m->grads_ready(m->grads, o->layer_start[l], end - o->layer_start[l]);
    }
    be->dropout_backward(m->d_c, dout, N * C, model_token_site(m, c->embedding_dropout, 0, 0));
    be->layernorm_backward(m->d_c, G(m, o->emb_ln_w), G_OPT(m, o->emb_ln_b), m->d_c, m->emb, W(m, o->emb_ln_w),
                           m->emb_mean, m->emb_rstd, NULL, N, C);
    be->embeddings_backward(G(m, o->wte), NULL, NULL, m->d_c, m->h_input_ids, m->h_segment_ids,
                            model_host_positions(m), c->pad_token_id, N, T, c->max_position_embeddings, C);
    if (m->grads_ready) m->grads_ready(m->grads, 0, o->layer_start[0]);
}

// transformers' ModernBertPreTrainedModel._init_weights: LayerNorm weights 1, biases 0, and
// each matrix normal with its module's standard deviation (initializer_range; the attention's
// and the MLP's output projections and the head's dense layer divided by sqrt(2 x layers)),
// truncated at initializer_cutoff_factor of it (a draw outside is drawn again).
void modernbert_init_weights(bert_model *m, float *host, uint64_t seed) {
    const bert_config *c = &m->cfg;
    double in = c->initializer_range, out = in / sqrt(2.0 * c->num_hidden_layers);
    double cut = c->initializer_cutoff_factor;
    for (int i = 0; i < m->n_tensors; i++) {
        const param_info *p = &m->table[i];
        float *w = host + p->offset;
        if (strstr(p->name, "norm.weight")) {
            for (size_t k = 0; k < p->numel; k++) w[k] = 1.0f;
            continue;
        }
        if (p->ndim != 2) continue;  // biases: 0
        double std = strstr(p->name, "Wo.weight") || strstr(p->name, "head.dense") ? out : in;
        for (size_t k = 0; k < p->numel; k++) {
            double z = INFINITY;
            for (uint32_t attempt = 0; !(fabs(z) <= cut) && attempt < 64; attempt++) {
                double u1 = (philox_draw(seed, attempt, 1000 + i, 2 * k) + 1.0) / 4294967297.0;
                double u2 = philox_draw(seed, attempt, 1000 + i, 2 * k + 1) / 4294967296.0;
                z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
            }
            w[k] = (float)(std * (fabs(z) <= cut ? z : 0.0));
        }
    }
}
