// Weights of a smaller model tiled into a larger one (engine/tile.h).
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "engine/tile.h"
#include "kernels/common/check.h"

const char *model_tile_misfit(const bert_config *small, const bert_config *big, char *why, size_t size) {
    const char *model_type[2] = {"bert", "modernbert"};
    if (small->arch != big->arch) {
        snprintf(why, size, "model_type is \"%s\" in the checkpoint and \"%s\" in the config (tiling keeps the "
                 "architecture)", model_type[small->arch], model_type[big->arch]);
        return why;
    }
    // grows: the config's may be larger; tables: sizes of BERT's position and segment tables,
    // which a ModernBERT has not.
    struct { const char *name; int small, big, grows, tables; } fields[] = {
        {"vocab_size", small->vocab_size, big->vocab_size, 0, 0},
        {"norm_bias", small->norm_bias, big->norm_bias, 0, 0},
        {"attention_bias", small->attention_bias, big->attention_bias, 0, 0},
        {"mlp_bias", small->mlp_bias, big->mlp_bias, 0, 0},
        {"classifier_bias", small->classifier_bias, big->classifier_bias, 0, 0},
        {"decoder_bias", small->decoder_bias, big->decoder_bias, 0, 0},
        {"hidden_size", small->hidden_size, big->hidden_size, 1, 0},
        {"intermediate_size", small->intermediate_size, big->intermediate_size, 1, 0},
        {"num_hidden_layers", small->num_hidden_layers, big->num_hidden_layers, 1, 0},
        {"max_position_embeddings", small->max_position_embeddings, big->max_position_embeddings, 1, 1},
        {"type_vocab_size", small->type_vocab_size, big->type_vocab_size, 1, 1},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        int s = fields[i].small, b = fields[i].big;
        if (fields[i].tables && big->arch == MODEL_MODERNBERT) continue;
        if (fields[i].grows ? b >= s : b == s) continue;
        snprintf(why, size, "model.%s is %d in the checkpoint and %d in the config (%s)", fields[i].name, s, b,
                 fields[i].grows ? "tiling grows a model: every width and the layer count at least the checkpoint's"
                                 : "tiling keeps the vocabulary and which tensors have biases");
        return why;
    }
    return NULL;
}

int model_tile_layer(int l, int small_layers, int big_layers) {
    // l x L_small / L_large rounded half to even (rint in the default rounding mode), as
    // Python's round() of the same quotient; at most the last layer (the quotient of the last
    // l rounds up to L_small where L_large >= 2 L_small - 1, and ModernBERT's code indexes past
    // its layers there).
    int k = (int)rint((double)l * small_layers / big_layers);
    return k < small_layers ? k : small_layers - 1;
}

// The counterpart's name of a big-model tensor: its layer number mapped; the name itself elsewhere.
static void counterpart_name(const char *name, int small_layers, int big_layers, char *out, size_t size) {
    static const char *const prefixes[] = {"model.layers.", "bert.encoder.layer."};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t n = strlen(prefixes[i]);
        int l, used;
        if (strncmp(name, prefixes[i], n) || sscanf(name + n, "%d%n", &l, &used) != 1) continue;
        snprintf(out, size, "%s%d%s", prefixes[i], model_tile_layer(l, small_layers, big_layers), name + n + used);
        return;
    }
    snprintf(out, size, "%s", name);
}

static const param_info *find_tensor(const bert_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->table[i].name, name)) return &m->table[i];
    return NULL;
}

static int ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

// How many blocks of rows a tensor fuses, each tiled on its own.
static int fused_parts(const char *name) {
    if (ends_with(name, ".attn.Wqkv.weight") || ends_with(name, ".attn.Wqkv.bias")) return 3;
    if (ends_with(name, ".mlp.Wi.weight") || ends_with(name, ".mlp.Wi.bias")) return 2;
    return 1;
}

// dst [R, C] from src [r0, c0] (R >= r0, C >= c0): periodic, the original in the middle.
static void tile_block(const float *src, int r0, int c0, float *dst, int R, int C) {
    int dr = (R - r0) / 2, dc = (C - c0) / 2;
    for (int r = 0; r < R; r++) {
        const float *row = src + (size_t)(((r - dr) % r0 + r0) % r0) * c0;
        for (int c = 0; c < C; c++) dst[(size_t)r * C + c] = row[((c - dc) % c0 + c0) % c0];
    }
}

void model_tile_weights(const bert_model *small, const float *small_host, const bert_model *big, float *big_host) {
    char name[160];
    for (int i = 0; i < big->n_tensors; i++) {
        const param_info *b = &big->table[i];
        if (big->cfg.arch == MODEL_MODERNBERT && !strncmp(b->name, "model.final_norm.", 17)) continue;
        counterpart_name(b->name, small->cfg.num_hidden_layers, big->cfg.num_hidden_layers, name, sizeof name);
        const param_info *s = find_tensor(small, name);
        if (!s) continue;  // the pooler and NSP head of a larger BertForPreTraining from a BertForMaskedLM
        int parts = fused_parts(b->name);
        int rows = s->shape[0] / parts, cols = s->ndim == 2 ? s->shape[1] : 1;
        int Rows = b->shape[0] / parts, Cols = b->ndim == 2 ? b->shape[1] : 1;
        if (s->ndim != b->ndim || Rows < rows || Cols < cols)
            fatal("tiling %s [%d, %d] into %s [%d, %d]: a tensor may only grow", s->name, s->shape[0], cols, b->name,
                  b->shape[0], Cols);
        for (int k = 0; k < parts; k++)
            tile_block(small_host + s->offset + (size_t)k * rows * cols, rows, cols,
                       big_host + b->offset + (size_t)k * Rows * Cols, Rows, Cols);
    }
}
