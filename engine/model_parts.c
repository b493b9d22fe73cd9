// The parts of the model code that engine/model.c (BERT, and what both architectures share)
// and engine/modernbert.c both build on: the parameter table's entries, the padded vocabulary,
// the GELU of a config, weight decay by name, and the dropout sites (engine/model_parts.h).
#include <stdio.h>
#include <string.h>
#include "engine/model_parts.h"
#include <stdlib.h>
#include "kernels/common/check.h"

// `reserve_rows` >= rows: rows kept in the flat buffer (zero beyond `rows`; the padded vocabulary).
size_t model_add_param_rows(bert_model *m, int *cap, const char *name, int rows, int cols, int align,
                            int reserve_rows) {
    if (m->n_tensors == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        m->table = realloc(m->table, sizeof(param_info) * *cap);
        check_alloc(m->table, sizeof(param_info) * *cap);
    }
    size_t offset = align ? (m->n_params + ALIGN - 1) / ALIGN * ALIGN : m->n_params;
    param_info *p = &m->table[m->n_tensors++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = cols ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->numel = (size_t)rows * (cols ? cols : 1);
    p->offset = offset;
    p->weight_decay = param_has_weight_decay(name);
    m->n_params = offset + (size_t)reserve_rows * (cols ? cols : 1);
    return offset;
}

size_t model_add_param(bert_model *m, int *cap, const char *name, int rows, int cols, int align) {
    return model_add_param_rows(m, cap, name, rows, cols, align, rows);
}

int bert_padded_vocab(const bert_config *cfg) {
    return (cfg->vocab_size + VOCAB_ALIGN - 1) / VOCAB_ALIGN * VOCAB_ALIGN;
}

gelu_kind gelu_kind_named(const char *a) {
    return strcmp(a, "gelu_new") && strcmp(a, "gelu_pytorch_tanh") && strcmp(a, "gelu_fast") ? GELU_ERF : GELU_TANH;
}

gelu_kind bert_gelu_kind(const bert_config *cfg) { return gelu_kind_named(cfg->hidden_act); }

int param_has_weight_decay(const char *name) {
    size_t len = strlen(name);
    return !(strstr(name, "LayerNorm") || strstr(name, "norm.") ||
             (len >= 4 && strcmp(name + len - 4, "bias") == 0));
}

dropout_t model_site(const bert_model *m, double p, uint32_t site_id) {
    dropout_t d = m->drop;
    d.p = m->train ? (float)p : 0.0f;
    d.site = site_id;
    return d;
}

// A dropout site over the token rows [rows, row_len] (0: the hidden size): unpadded, each row
// draws as its padded row (the padded model's masks exactly).
dropout_t model_token_site(const bert_model *m, double p, uint32_t site_id, int row_len) {
    dropout_t d = model_site(m, p, site_id);
    if (m->cur_packed) {
        d.row_map = m->d_row_map;
        d.row_len = row_len ? row_len : m->cfg.hidden_size;
    }
    return d;
}

// The token site of a residual + dropout + LayerNorm, whose forward saves its decisions as
// bits in keep for the backward (a backend that keeps them; dropout_t's keep_bits).
dropout_t model_ln_site(const bert_model *m, double p, uint32_t site_id, uint32_t *keep) {
    dropout_t d = model_token_site(m, p, site_id, 0);
    d.keep_bits = keep;
    return d;
}
