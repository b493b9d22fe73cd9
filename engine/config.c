// Table-driven JSON config reading: one field table per section, one validation path for
// files and for --set overrides (overrides edit the JSON tree before it is validated).
#include "engine/config.h"
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "kernels/common/check.h"
#include "engine/optim.h"
#include "engine/schedule.h"

typedef enum { FIELD_INT, FIELD_REAL, FIELD_CHOICE, FIELD_STRING, FIELD_IGNORED } field_kind;

typedef struct {
    const char *name;
    field_kind kind;
    size_t offset;    // into the section's struct (FIELD_INT, FIELD_REAL, FIELD_CHOICE)
    double min, max;  // inclusive range for numbers; max is the buffer size for FIELD_STRING
    const char *choices;  // "a|b|c" for FIELD_CHOICE; for a string field the struct holds char[16]
} field_t;

#define INT(st, f, lo, hi) {#f, FIELD_INT, offsetof(st, f), lo, hi, NULL}
#define REAL(st, f, lo, hi) {#f, FIELD_REAL, offsetof(st, f), lo, hi, NULL}
#define STRING(st, f) {#f, FIELD_STRING, offsetof(st, f), 0, sizeof(((st *)0)->f), NULL}
#define IGNORED(f) {f, FIELD_IGNORED, 0, 0, 0, NULL}
// Fields of BertConfig that bertpre supports with one value only: checked, not stored.
#define FIXED(f, choices) {f, FIELD_CHOICE, (size_t)-1, 0, 0, choices}

static const field_t bert_fields[] = {
    INT(bert_config, vocab_size, 1, 1 << 24),
    INT(bert_config, hidden_size, 1, 1 << 16),
    INT(bert_config, num_hidden_layers, 1, 1024),
    INT(bert_config, num_attention_heads, 1, 1024),
    INT(bert_config, intermediate_size, 1, 1 << 18),
    INT(bert_config, max_position_embeddings, 1, 1 << 16),
    INT(bert_config, type_vocab_size, 1, 1 << 10),
    INT(bert_config, pad_token_id, 0, 1 << 24),
    REAL(bert_config, hidden_dropout_prob, 0.0, 0.999),
    REAL(bert_config, attention_probs_dropout_prob, 0.0, 0.999),
    REAL(bert_config, initializer_range, 0.0, 10.0),
    REAL(bert_config, layer_norm_eps, 0.0, 1.0),
    FIXED("hidden_act", "gelu"),
    FIXED("position_embedding_type", "absolute"),
    FIXED("model_type", "bert"),
    // Written by transformers into every config.json; they do not change pretraining.
    IGNORED("architectures"),
    IGNORED("_name_or_path"),
    IGNORED("transformers_version"),
    IGNORED("torch_dtype"),
    IGNORED("use_cache"),
    IGNORED("classifier_dropout"),
    IGNORED("gradient_checkpointing"),
    IGNORED("directionality"),
    IGNORED("pooler_fc_size"),
    IGNORED("pooler_num_attention_heads"),
    IGNORED("pooler_num_fc_layers"),
    IGNORED("pooler_size_per_head"),
    IGNORED("pooler_type"),
    {NULL, 0, 0, 0, 0, NULL},
};

static const field_t train_fields[] = {
    {"backend", FIELD_CHOICE, offsetof(train_config, backend), 0, 0, "auto|cpu|cuda|cuda-emu"},
    {"precision", FIELD_CHOICE, offsetof(train_config, precision), 0, 0, "auto|fp32|fp16|bf16"},
    INT(train_config, seed, 0, 2147483647),
    INT(train_config, micro_batch_size, 1, 1 << 20),
    INT(train_config, global_batch_size, 1, 1 << 24),
    INT(train_config, seq_length, 2, 1 << 16),
    INT(train_config, max_predictions_per_seq, 1, 1 << 16),
    INT(train_config, steps, 1, 2147483647),
    REAL(train_config, learning_rate, 0.0, 1e3),
    REAL(train_config, warmup_proportion, 0.0, 1.0),
    INT(train_config, log_every, 1, 2147483647),
    STRING(train_config, metrics_file),
    REAL(train_config, peak_tflops, 0.0, 1e6),
    REAL(train_config, loss_scale, 0.0, 1e30),
    REAL(train_config, loss_scale_initial, 1.0, 1e30),
    REAL(train_config, loss_scale_min, 1e-30, 1e30),
    INT(train_config, loss_scale_growth_interval, 1, 2147483647),
    INT(train_config, loss_scale_max_skips, 1, 2147483647),
    INT(train_config, phase, 1, 2),
    STRING(train_config, checkpoint_dir),
    INT(train_config, checkpoint_every, 0, 2147483647),
    INT(train_config, keep_checkpoints, 0, 2147483647),
    INT(train_config, steps_this_run, 0, 2147483647),
    STRING(train_config, data),
    STRING(train_config, eval_data),
    INT(train_config, eval_batches, 0, 2147483647),
    STRING(train_config, tokenizer),
    INT(train_config, dynamic_masking, 0, 1),
    {"optimizer", FIELD_CHOICE, offsetof(train_config, optimizer), 0, 0, "lamb|lars|adamw"},
    REAL(train_config, weight_decay, 0.0, 10.0),
    REAL(train_config, max_grad_norm, 1e-30, 1e30),
    REAL(train_config, beta1, 0.0, 1.0),
    REAL(train_config, beta2, 0.0, 1.0),
    REAL(train_config, eps, 0.0, 1.0),
    REAL(train_config, momentum, 0.0, 1.0),
    REAL(train_config, trust_coefficient, 0.0, 1e3),
    {"lr_schedule", FIELD_CHOICE, offsetof(train_config, lr_schedule), 0, 0, "poly|cosine|linear|constant"},
    REAL(train_config, base_learning_rate, 0.0, 1e3),
    INT(train_config, base_batch_size, 1, 1 << 24),
    {"lr_scaling", FIELD_CHOICE, offsetof(train_config, lr_scaling), 0, 0, "none|linear|sqrt"},
    REAL(train_config, label_smoothing, 0.0, 0.999),
    REAL(train_config, comm_timeout_s, 0.0, 1e6),
    INT(train_config, zero_stage, 0, 1),
    {"unpad", FIELD_CHOICE, offsetof(train_config, unpad), 0, 0, "auto|on|off"},
    {NULL, 0, 0, 0, 0, NULL},
};

static int choice_allowed(const char *choices, const char *value) {
    size_t n = strlen(value);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, value, n) == 0) return 1;
        p += len + (bar ? 1 : 0);
    }
    return 0;
}

static void read_section(void *dst, const field_t *fields, json_t *obj, const char *where) {
    if (!json_is_object(obj)) fatal("%s: expected a JSON object", where);
    const char *key;
    json_t *value;
    json_object_foreach(obj, key, value) {
        const field_t *f = fields;
        while (f->name && strcmp(f->name, key) != 0) f++;
        if (!f->name) fatal("%s: unknown field '%s'", where, key);
        char *text = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);
        if (f->kind == FIELD_INT) {
            if (!json_is_integer(value)) fatal("%s: field '%s' must be an integer, got %s", where, key, text);
            json_int_t v = json_integer_value(value);
            if (v < f->min || v > f->max)
                fatal("%s: field '%s' = %s is out of range [%.0f, %.0f]", where, key, text, f->min, f->max);
            *(int *)((char *)dst + f->offset) = (int)v;
        } else if (f->kind == FIELD_REAL) {
            if (!json_is_number(value)) fatal("%s: field '%s' must be a number, got %s", where, key, text);
            double v = json_number_value(value);
            if (!(v >= f->min && v <= f->max))
                fatal("%s: field '%s' = %s is out of range [%g, %g]", where, key, text, f->min, f->max);
            *(double *)((char *)dst + f->offset) = v;
        } else if (f->kind == FIELD_CHOICE) {
            if (!json_is_string(value) || !choice_allowed(f->choices, json_string_value(value)))
                fatal("%s: field '%s' = %s is not supported (allowed: %s)", where, key, text, f->choices);
            if (f->offset != (size_t)-1) snprintf((char *)dst + f->offset, 16, "%s", json_string_value(value));
        } else if (f->kind == FIELD_STRING) {
            if (!json_is_string(value)) fatal("%s: field '%s' must be a string, got %s", where, key, text);
            if (strlen(json_string_value(value)) >= (size_t)f->max)
                fatal("%s: field '%s' = %s is longer than %.0f characters", where, key, text, f->max - 1);
            snprintf((char *)dst + f->offset, (size_t)f->max, "%s", json_string_value(value));
        }
        free(text);
    }
}

static void bert_config_defaults(bert_config *cfg) {
    // BertConfig's own defaults (bert-base-uncased), so that Hub configs that omit a field
    // mean what they mean in transformers.
    *cfg = (bert_config){.vocab_size = 30522,
                         .hidden_size = 768,
                         .num_hidden_layers = 12,
                         .num_attention_heads = 12,
                         .intermediate_size = 3072,
                         .max_position_embeddings = 512,
                         .type_vocab_size = 2,
                         .pad_token_id = 0,
                         .hidden_dropout_prob = 0.1,
                         .attention_probs_dropout_prob = 0.1,
                         .initializer_range = 0.02,
                         .layer_norm_eps = 1e-12};
}

void bert_config_from_json(bert_config *cfg, json_t *obj, const char *where) {
    bert_config_defaults(cfg);
    read_section(cfg, bert_fields, obj, where);
    if (cfg->hidden_size % cfg->num_attention_heads != 0)
        fatal("%s: field 'hidden_size' = %d is not a multiple of 'num_attention_heads' = %d", where,
              cfg->hidden_size, cfg->num_attention_heads);
    if (cfg->pad_token_id >= cfg->vocab_size)
        fatal("%s: field 'pad_token_id' = %d is not below 'vocab_size' = %d", where, cfg->pad_token_id,
              cfg->vocab_size);
}

static json_t *load_json_file(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        fatal("%s: is a directory; give the path of a JSON config file", path);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        if (err.line < 0) fatal("%s: cannot read: %s", path, err.text);
        fatal("%s:%d:%d: invalid JSON: %s", path, err.line, err.column, err.text);
    }
    return root;
}

void bert_config_load(bert_config *cfg, const char *path) {
    json_t *root = load_json_file(path);
    bert_config_from_json(cfg, root, path);
    json_decref(root);
}

json_t *bert_config_to_json(const bert_config *cfg) {
    return json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:s, s:s}",
                     "architectures", "BertForPreTraining", "model_type", "bert", "vocab_size", cfg->vocab_size,
                     "hidden_size", cfg->hidden_size, "num_hidden_layers", cfg->num_hidden_layers,
                     "num_attention_heads", cfg->num_attention_heads, "intermediate_size",
                     cfg->intermediate_size, "max_position_embeddings", cfg->max_position_embeddings,
                     "type_vocab_size", cfg->type_vocab_size, "pad_token_id", cfg->pad_token_id,
                     "hidden_dropout_prob", cfg->hidden_dropout_prob, "attention_probs_dropout_prob",
                     cfg->attention_probs_dropout_prob, "initializer_range", cfg->initializer_range,
                     "layer_norm_eps", cfg->layer_norm_eps, "hidden_act", "gelu", "position_embedding_type",
                     "absolute");
}

json_t *train_config_to_json(const train_config *t) {
    json_t *obj = json_object();
    for (const field_t *f = train_fields; f->name; f++) {
        const char *p = (const char *)t + f->offset;
        json_t *v = NULL;
        if (f->kind == FIELD_INT) v = json_integer(*(const int *)p);
        else if (f->kind == FIELD_REAL) v = json_real(*(const double *)p);
        else if (f->kind == FIELD_CHOICE || f->kind == FIELD_STRING) v = json_string(p);
        if (v) json_object_set_new(obj, f->name, v);
    }
    return obj;
}

// "section.field=value": the value is parsed as JSON, a bare word as a string.
static void apply_override(json_t *root, const char *override, const char *path) {
    const char *eq = strchr(override, '=');
    const char *dot = strchr(override, '.');
    if (!eq || !dot || dot > eq)
        fatal("--set '%s': expected section.field=value (for example train.steps=100)", override);
    char section[64], field[128];
    snprintf(section, sizeof section, "%.*s", (int)(dot - override), override);
    snprintf(field, sizeof field, "%.*s", (int)(eq - dot - 1), dot + 1);
    json_t *obj = json_object_get(root, section);
    if (!json_is_object(obj))
        fatal("--set '%s': %s has no object section '%s' to override", override, path, section);
    json_error_t err;
    json_t *value = json_loads(eq + 1, JSON_DECODE_ANY, &err);
    if (!value) value = json_string(eq + 1);
    json_object_set_new(obj, field, value);
}

void run_config_load(run_config *cfg, const char *path, int n_overrides, char **overrides, int world_size) {
    memset(cfg, 0, sizeof *cfg);
    json_t *root = load_json_file(path);
    if (!json_is_object(root)) fatal("%s: expected a JSON object with sections 'model' and 'train'", path);
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value) {
        if (strcmp(key, "model") != 0 && strcmp(key, "train") != 0)
            fatal("%s: unknown section '%s' (expected 'model' and 'train')", path, key);
    }
    json_t *model = json_object_get(root, "model");
    char where[2400];
    if (json_is_string(model)) {
        // A path, relative to the directory of this config file.
        char model_path[2048];
        const char *slash = strrchr(path, '/');
        const char *rel = json_string_value(model);
        if (rel[0] == '/' || !slash)
            snprintf(model_path, sizeof model_path, "%s", rel);
        else
            snprintf(model_path, sizeof model_path, "%.*s/%s", (int)(slash - path), path, rel);
        json_t *loaded = load_json_file(model_path);
        json_object_set_new(root, "model", loaded);
        model = loaded;
        snprintf(where, sizeof where, "%s (model of %s)", model_path, path);
    } else if (json_is_object(model)) {
        snprintf(where, sizeof where, "%s: section 'model'", path);
    } else {
        fatal("%s: section 'model' must be a BertConfig object or the path of one", path);
    }
    if (!json_object_get(root, "train")) json_object_set_new(root, "train", json_object());
    for (int i = 0; i < n_overrides; i++) apply_override(root, overrides[i], path);
    bert_config_from_json(&cfg->model, model, where);
    if (cfg->model.type_vocab_size < 2)
        fatal("%s: field 'type_vocab_size' = %d: pretraining gives sentence A segment id 0 and sentence B 1, so it "
              "must be at least 2", where, cfg->model.type_vocab_size);

    cfg->train = (train_config){.backend = "auto",
                                .precision = "auto",
                                .seed = 42,
                                .micro_batch_size = 8,
                                .seq_length = 128,
                                .max_predictions_per_seq = 20,
                                .steps = 100,
                                .learning_rate = -1.0,  // unset: 1e-3 or from base_learning_rate
                                .warmup_proportion = 0.01,  // run_pretraining.py's default
                                .log_every = 10,
                                .loss_scale_initial = 65536.0,
                                .loss_scale_min = 1.0,
                                .loss_scale_growth_interval = 2000,
                                .loss_scale_max_skips = 32,
                                .phase = 1,
                                .keep_checkpoints = 3,
                                .optimizer = "lamb",
                                .weight_decay = 0.01,
                                .max_grad_norm = 1.0,
                                .beta1 = -1.0,
                                .beta2 = -1.0,
                                .eps = -1.0,
                                .momentum = -1.0,
                                .trust_coefficient = -1.0,
                                .lr_schedule = "poly",
                                .base_learning_rate = -1.0,
                                .lr_scaling = "none",
                                .comm_timeout_s = 50.0,
                                .unpad = "auto"};
    snprintf(where, sizeof where, "%s: section 'train'", path);
    read_section(&cfg->train, train_fields, json_object_get(root, "train"), where);
    // Global batch = micro-batch x accumulation steps x ranks: the config states the first two
    // and the launcher the ranks; the accumulation count follows or the combination is refused.
    train_config *t = &cfg->train;
    t->world_size = world_size;
    long per_step = (long)t->micro_batch_size * world_size;
    if (t->global_batch_size == 0) t->global_batch_size = (int)per_step;
    if (t->global_batch_size < per_step)
        fatal("%s: field 'global_batch_size' = %d is smaller than one micro-batch on every rank: "
              "'micro_batch_size' = %d x %d ranks = %ld", where, t->global_batch_size, t->micro_batch_size,
              world_size, per_step);
    if (t->global_batch_size % per_step != 0)
        fatal("%s: field 'global_batch_size' = %d is not a multiple of 'micro_batch_size' = %d x %d ranks = %ld "
              "(the global batch must split into whole micro-batches on every rank)", where,
              t->global_batch_size, t->micro_batch_size, world_size, per_step);
    t->accumulation_steps = (int)(t->global_batch_size / per_step);
    optim_config_resolve(t, where);
    schedule_config_resolve(t, where);
    if (cfg->train.seq_length > cfg->model.max_position_embeddings)
        fatal("%s: field 'seq_length' = %d exceeds the model's max_position_embeddings = %d", where,
              cfg->train.seq_length, cfg->model.max_position_embeddings);
    if (cfg->train.max_predictions_per_seq > cfg->train.seq_length - 2)
        fatal("%s: field 'max_predictions_per_seq' = %d must leave room for [CLS] and [SEP] in seq_length = %d",
              where, cfg->train.max_predictions_per_seq, cfg->train.seq_length);
    json_decref(root);
}
