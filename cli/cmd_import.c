// bertpre import: a Hugging Face BERT checkpoint (config.json + model.safetensors) into a
// bertpre weights checkpoint, to continue pretraining from with `train --init-from`.
// BertForPreTraining checkpoints carry every tensor ("bert." names and the "cls." heads);
// BertModel checkpoints (encoder only, names without "bert.") lack the heads, and may lack
// the pooler: those tensors start as in a fresh model (bert_init_weights with --seed), and
// a warning names them.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "kernels/backend.h"
#include "engine/checkpoint.h"
#include "cli/commands.h"
#include "kernels/common/check.h"
#include "engine/model.h"
#include "engine/safetensors.h"
#include "kernels/common/json_any.h"

static const char *about_import =
    "Reads HF_DIR/config.json (a BertConfig) and HF_DIR/model.safetensors (BertForPreTraining\n"
    "or BertModel) and writes a weights checkpoint to CHECKPOINT (a new directory); start\n"
    "training from it with 'bertpre train CONFIG --init-from CHECKPOINT'. Tensors the source\n"
    "lacks (the pretraining heads of an encoder-only BertModel, a missing pooler) are\n"
    "initialized as in a fresh model from --seed (default 42), with a warning naming them.\n"
    "A checkpoint in another format (pytorch_model.bin) must be converted to safetensors first.\n";

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

// Tensors a BERT checkpoint may hold that are not parameters of their own: buffers, and
// the decoder that transformers ties to the word embeddings and cls.predictions.bias.
static int is_known_extra(const char *name) {
    size_t n = strlen(name);
    return (n >= 12 && !strcmp(name + n - 12, "position_ids")) || !strcmp(name, "cls.predictions.decoder.weight") ||
           !strcmp(name, "cls.predictions.decoder.bias");
}

int cmd_import(int argc, char **argv) {
    const char *out = NULL;
    int seed = 42;
    const cli_option options[] = {
        {"--out", CLI_STRING, &out, "CHECKPOINT", .help = "the weights checkpoint to write (a new directory)", .required = 1},
        {"--seed", CLI_INT, &seed, "N", .help = "initializes the tensors the source lacks", 0, 2147483647},
        {NULL},
    };
    const cli_command command = {"import", "import HF_DIR --out CHECKPOINT [--seed N]", about_import, NULL, options,
                                 "HF_DIR", 1, 1};
    char *operands[1];
    int n = 0;
    if (cli_parse(&command, argc, argv, operands, &n)) return 0;
    const char *source = operands[0];
    char path[1200];
    struct stat st;
    snprintf(path, sizeof path, "%s/model.safetensors", source);
    if (stat(path, &st) != 0) {
        char bin[1200];
        snprintf(bin, sizeof bin, "%s/pytorch_model.bin", source);
        if (stat(bin, &st) == 0)
            fatal("%s: no model.safetensors, only pytorch_model.bin: convert it first, e.g. in Python "
                  "safetensors.torch.save_file(torch.load('pytorch_model.bin'), 'model.safetensors')", source);
        fatal("%s: no model.safetensors (a Hugging Face BERT checkpoint directory has config.json and "
              "model.safetensors)", source);
    }
    bert_config cfg;
    char config_path[1200];
    snprintf(config_path, sizeof config_path, "%s/config.json", source);
    // Another architecture (GPT-2, RoBERTa, ...) is named as such rather than by its first
    // field that BertConfig lacks.
    json_error_t raw_err;
    json_t *raw = json_any_load_file(config_path, 0, &raw_err);
    json_t *type = json_object_get(raw, "model_type");
    if (json_is_string(type) && strcmp(json_string_value(type), "bert") != 0)
        fatal("%s: field 'model_type' = '%s': not a BERT checkpoint; import reads BERT models (model_type 'bert': "
              "BertModel, BertForPreTraining)", config_path, json_string_value(type));
    json_decref(raw);
    bert_config_load(&cfg, config_path);

    st_file f;
    st_open(&f, path);
    // BertForPreTraining names its encoder "bert.*"; BertModel saves the same tensors without it.
    int prefixed = 0;
    for (int i = 0; i < f.n_tensors; i++) prefixed |= starts_with(f.tensors[i].name, "bert.");

    bert_model m;
    bert_init(&m, &cfg, &backend_cpu, 1, 1, 1);
    bert_init_weights(&m, (uint64_t)seed);
    float *host = xmalloc(m.n_params * sizeof(float));
    m.be->download(host, m.params, m.n_params * sizeof(float));
    char *used = xcalloc(f.n_tensors, 1);
    char missing[8192] = "";
    int n_missing = 0, n_loaded = 0;
    for (int i = 0; i < m.n_tensors; i++) {
        const param_info *p = &m.table[i];
        const char *name = p->name;
        if (!prefixed && starts_with(name, "bert.")) name += 5;
        const st_tensor *t = st_find(&f, name);
        if (!t && !strcmp(p->name, "cls.predictions.bias")) t = st_find(&f, "cls.predictions.decoder.bias");
        if (!t) {
            if (!starts_with(p->name, "cls.") && !starts_with(p->name, "bert.pooler."))
                fatal("%s: missing tensor '%s' (config.json describes %d layers of hidden size %d)", path, name,
                      cfg.num_hidden_layers, cfg.hidden_size);
            size_t len = strlen(missing);
            snprintf(missing + len, sizeof missing - len, "%s%s", n_missing ? ", " : "", p->name);
            n_missing++;
            continue;
        }
        int same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
        if (!same)
            fatal("%s: tensor '%s' has %d dimensions [%lld, %lld], config.json implies %d [%d, %d]", path, name,
                  t->ndim, (long long)(t->ndim > 0 ? t->shape[0] : 0), (long long)(t->ndim > 1 ? t->shape[1] : 0),
                  p->ndim, p->shape[0], p->ndim > 1 ? p->shape[1] : 0);
        st_read_float(&f, t, host + p->offset);
        // Checked here as --init-from and export check a checkpoint: nothing non-finite is written.
        for (size_t k = 0; k < p->numel; k++)
            if (!isfinite(host[p->offset + k]))
                fatal("%s: tensor '%s' element %zu is %g: import takes finite weights only (nothing written)", path,
                      name, k, (double)host[p->offset + k]);
        used[t - f.tensors] = 1;
        n_loaded++;
    }
    char extra[8192] = "";
    for (int i = 0; i < f.n_tensors; i++) {
        if (used[i] || is_known_extra(f.tensors[i].name)) continue;
        size_t len = strlen(extra);
        snprintf(extra + len, sizeof extra - len, "%s%s", len ? ", " : "", f.tensors[i].name);
    }
    const st_tensor *decoder = st_find(&f, "cls.predictions.decoder.weight");
    if (decoder && decoder->numel == (size_t)cfg.vocab_size * cfg.hidden_size) {
        float *w = xmalloc(decoder->numel * sizeof(float));
        st_read_float(&f, decoder, w);
        if (memcmp(w, host + m.off.wte, decoder->numel * sizeof(float)) != 0)
            fprintf(stderr, "bertpre: warning: %s: cls.predictions.decoder.weight differs from the word embeddings; "
                            "bertpre ties them, so the word embeddings are used\n", path);
        free(w);
    }
    if (n_missing)
        fprintf(stderr, "bertpre: warning: %s has no %s: initialized as in a fresh model (seed %d)\n", path, missing,
                seed);
    if (extra[0]) fprintf(stderr, "bertpre: warning: %s: tensors not used by BertForPreTraining: %s\n", path, extra);
    m.be->upload(m.params, host, m.n_params * sizeof(float));
    checkpoint_save_weights(out, &m, source);
    printf("import: %s -> %s (%d tensors loaded, %d initialized fresh)\n", source, out, n_loaded, n_missing);
    free(used);
    free(host);
    bert_free(&m);
    st_close(&f);
    return 0;
}
