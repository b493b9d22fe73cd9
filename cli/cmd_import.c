// bertpre import: a Hugging Face BERT checkpoint (config.json + model.safetensors, or the
// shards of model.safetensors.index.json) into a
// bertpre weights checkpoint, to continue pretraining from with `train --init-from`.
// BertForPreTraining checkpoints carry every tensor ("bert." names and the "cls." heads);
// BertForMaskedLM checkpoints the masked-LM head without pooler and NSP head: they become
// MLM-only weights checkpoints (architectures BertForMaskedLM), which train.objective mlm
// continues as they are and mlm+nsp with a fresh pooler and NSP head (checkpoint_load_weights);
// BertModel checkpoints (encoder only, names without "bert.") lack the heads, and may lack
// the pooler: those tensors start as in a fresh model (bert_init_weights with --seed), and
// a warning names them. A ModernBertForMaskedLM ("model." names, "head." and "decoder.bias")
// or a ModernBertModel (no "model." prefix, no head) is read the same way.

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kernels/backend.h"
#include "engine/checkpoint.h"
#include "cli/commands.h"
#include "kernels/common/check.h"
#include "engine/model.h"
#include "engine/safetensors.h"
#include "kernels/common/json_any.h"
#include "tokenizer/tokenizer.h"

static const char *about_import =
    "Reads HF_DIR/config.json (a BertConfig) and HF_DIR/model.safetensors (BertForPreTraining,\n"
    "BertForMaskedLM or BertModel) and writes a weights checkpoint to CHECKPOINT (a new\n"
    "directory); start training from it with 'bertpre train CONFIG --init-from CHECKPOINT'.\n"
    "A BertForMaskedLM (the masked-LM head, no pooler, no NSP head) stays one: train.objective\n"
    "mlm continues it as it is, mlm+nsp adds a fresh pooler and NSP head. Tensors the source\n"
    "lacks (the pretraining heads of an encoder-only BertModel, a missing pooler) are\n"
    "initialized as in a fresh model from --seed (default 42), with a warning naming them.\n"
    "A sharded checkpoint (model.safetensors.index.json and its files) is read whole. A checkpoint\n"
    "in another format (pytorch_model.bin) must be converted to safetensors first.\n"
    "A ModernBERT (config.json's model_type modernbert: ModernBertForMaskedLM or ModernBertModel)\n"
    "is read the same way; it continues with train.objective mlm.\n";

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

// Tensors a BERT checkpoint may hold that are not parameters of their own: buffers, and
// the decoder that transformers ties to the word embeddings and cls.predictions.bias.
static int is_known_extra(const char *name) {
    size_t n = strlen(name);
    return (n >= 12 && !strcmp(name + n - 12, "position_ids")) || !strcmp(name, "cls.predictions.decoder.weight") ||
           !strcmp(name, "cls.predictions.decoder.bias") || !strcmp(name, "decoder.weight");
}

enum { MAX_SHARDS = 256 };

// A tensor in any of the files (names are unique across a sharded checkpoint's files).
static const st_tensor *find_tensor(const st_file *files, int n, const char *name, int *which) {
    for (int k = 0; k < n; k++) {
        const st_tensor *t = st_find(&files[k], name);
        if (t) {
            *which = k;
            return t;
        }
    }
    return NULL;
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
    // The weights: model.safetensors, or the shards that model.safetensors.index.json lists
    // (transformers' save_pretrained above its max_shard_size).
    char path[1200], shard_paths[MAX_SHARDS][1300];
    int n_files = 0;
    struct stat st;
    snprintf(path, sizeof path, "%s/model.safetensors", source);
    if (stat(path, &st) == 0) {
        snprintf(shard_paths[n_files++], sizeof shard_paths[0], "%s", path);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", source);
        if (stat(path, &st) == 0) {
            json_error_t err;
            json_t *index = json_any_load_file(path, 0, &err);
            if (!index) fatal("%s:%d: not JSON: %s", path, err.line, err.text);
            json_t *map = json_object_get(index, "weight_map");
            if (!json_is_object(map) || json_object_size(map) == 0)
                fatal("%s: field 'weight_map' is not an object of tensor names and files", path);
            const char *tensor;
            json_t *file;
            json_object_foreach(map, tensor, file) {
                const char *name = json_string_value(file);
                if (!name || strchr(name, '/'))
                    fatal("%s: tensor '%s' maps to %s, not a file name beside the index", path, tensor,
                          name ? name : "a value that is not a string");
                int seen = 0;
                for (int i = 0; i < n_files && !seen; i++) seen = !strcmp(strrchr(shard_paths[i], '/') + 1, name);
                if (seen) continue;
                if (n_files == MAX_SHARDS) fatal("%s: more than %d shard files", path, MAX_SHARDS);
                snprintf(shard_paths[n_files++], sizeof shard_paths[0], "%s/%s", source, name);
            }
            json_decref(index);
        } else {
            char bin[1200];
            snprintf(bin, sizeof bin, "%s/pytorch_model.bin", source);
            int has_bin = stat(bin, &st) == 0;
            snprintf(bin, sizeof bin, "%s/pytorch_model.bin.index.json", source);
            has_bin |= stat(bin, &st) == 0;
            // save_pretrained handles BERT's tied decoder, which safetensors' save_file refuses.
            if (has_bin)
                fatal("%s: no model.safetensors, only pytorch_model.bin: convert it first, e.g. python3 -c \"from "
                      "transformers import BertForPreTraining as M; M.from_pretrained('%s').save_pretrained('%s', "
                      "safe_serialization=True)\"", source, source, source);
            fatal("%s: no model.safetensors or model.safetensors.index.json (a Hugging Face BERT checkpoint "
                  "directory has config.json and model.safetensors)", source);
        }
    }
    bert_config cfg;
    char config_path[1200];
    snprintf(config_path, sizeof config_path, "%s/config.json", source);
    // Another architecture (GPT-2, RoBERTa, ...) is named as such rather than by its first
    // field that BertConfig lacks.
    json_error_t raw_err;
    json_t *raw = json_any_load_file(config_path, 0, &raw_err);
    json_t *type = json_object_get(raw, "model_type");
    if (json_is_string(type) && strcmp(json_string_value(type), "bert") != 0 &&
        strcmp(json_string_value(type), "modernbert") != 0)
        fatal("%s: field 'model_type' = '%s': not a BERT checkpoint; import reads BERT models (model_type 'bert': "
              "BertModel, BertForPreTraining, BertForMaskedLM) and ModernBERT models (model_type 'modernbert': "
              "ModernBertModel, ModernBertForMaskedLM)", config_path, json_string_value(type));
    json_decref(raw);
    bert_config_load(&cfg, config_path);
    // A vocab.txt beside it with more tokens than the embedding table: its ids past the table
    // would surface later as a shard's bad id; said here, with both numbers. Counted as the
    // tokenizer reads it (a vocabulary it cannot read is not this command's to judge).
    char vocab_path[1200];
    snprintf(vocab_path, sizeof vocab_path, "%s/vocab.txt", source);
    tokenizer *vocab;
    if (access(vocab_path, R_OK) == 0 && tokenizer_load(&vocab, vocab_path).ok) {
        int tokens = tokenizer_vocab_size(vocab);
        tokenizer_free(vocab);
        if (tokens > cfg.vocab_size)
            fatal("%s: %d tokens, more than config.json's vocab_size = %d: ids past %d have no embedding; fix "
                  "vocab_size or the vocabulary", vocab_path, tokens, cfg.vocab_size, cfg.vocab_size - 1);
    }

    st_file files[MAX_SHARDS];
    char *used[MAX_SHARDS];
    for (int k = 0; k < n_files; k++) {
        st_open(&files[k], shard_paths[k]);
        used[k] = xcalloc(files[k].n_tensors > 0 ? files[k].n_tensors : 1, 1);
    }
    // BertForPreTraining names its encoder "bert.*" (ModernBertForMaskedLM "model.*"); BertModel
    // (ModernBertModel) saves the same tensors without it.
    int modern = cfg.arch == MODEL_MODERNBERT, prefixed = 0;
    const char *prefix = modern ? "model." : "bert.";
    for (int k = 0; k < n_files; k++)
        for (int i = 0; i < files[k].n_tensors; i++) prefixed |= starts_with(files[k].tensors[i].name, prefix);
    // BertForMaskedLM: the masked-LM head's transform without the pooler and the NSP head.
    int at = 0;
    const char *pooler = prefixed ? "bert.pooler.dense.weight" : "pooler.dense.weight";
    cfg.mlm_only = modern || (find_tensor(files, n_files, "cls.predictions.transform.dense.weight", &at) &&
                              !find_tensor(files, n_files, "cls.seq_relationship.weight", &at) &&
                              !find_tensor(files, n_files, pooler, &at));

    bert_model m;
    bert_init(&m, &cfg, &backend_cpu, 1, 1, 1);
    bert_init_weights(&m, (uint64_t)seed);
    float *host = xmalloc(m.n_params * sizeof(float));
    m.be->download(host, m.params, m.n_params * sizeof(float));
    char missing[8192] = "";
    int n_missing = 0, n_loaded = 0;
    for (int i = 0; i < m.n_tensors; i++) {
        const param_info *p = &m.table[i];
        const char *name = p->name;
        if (!prefixed && starts_with(name, prefix)) name += strlen(prefix);
        int k = 0;
        const st_tensor *t = find_tensor(files, n_files, name, &k);
        if (!t && !strcmp(p->name, "cls.predictions.bias")) t = find_tensor(files, n_files, "cls.predictions.decoder.bias", &k);
        if (!t) {
            if (!starts_with(p->name, "cls.") && !starts_with(p->name, "bert.pooler.") &&
                !starts_with(p->name, "head.") && strcmp(p->name, "decoder.bias"))
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
        st_read_float(&files[k], t, host + p->offset);
        // Checked here as --init-from and export check a checkpoint: nothing non-finite is written.
        for (size_t k = 0; k < p->numel; k++)
            if (!isfinite(host[p->offset + k]))
                fatal("%s: tensor '%s' element %zu is %g: import takes finite weights only (nothing written)", path,
                      name, k, (double)host[p->offset + k]);
        used[k][t - files[k].tensors] = 1;
        n_loaded++;
    }
    char extra[8192] = "";
    for (int k = 0; k < n_files; k++)
        for (int i = 0; i < files[k].n_tensors; i++) {
            if (used[k][i] || is_known_extra(files[k].tensors[i].name)) continue;
            size_t len = strlen(extra);
            snprintf(extra + len, sizeof extra - len, "%s%s", len ? ", " : "", files[k].tensors[i].name);
        }
    int dk = 0;
    const char *decoder_name = modern ? "decoder.weight" : "cls.predictions.decoder.weight";
    const st_tensor *decoder = find_tensor(files, n_files, decoder_name, &dk);
    if (decoder && decoder->numel == (size_t)cfg.vocab_size * cfg.hidden_size) {
        float *w = xmalloc(decoder->numel * sizeof(float));
        st_read_float(&files[dk], decoder, w);
        if (memcmp(w, host + m.off.wte, decoder->numel * sizeof(float)) != 0)
            fprintf(stderr, "bertpre: warning: %s: %s differs from the word embeddings; bertpre ties them, so the "
                            "word embeddings are used\n", path, decoder_name);
        free(w);
    }
    if (n_missing)
        fprintf(stderr, "bertpre: warning: %s has no %s: initialized as in a fresh model (seed %d)\n", path, missing,
                seed);
    if (extra[0])
        fprintf(stderr, "bertpre: warning: %s: tensors not used by %s: %s\n", path, bert_architecture(&cfg), extra);
    m.be->upload(m.params, host, m.n_params * sizeof(float));
    checkpoint_save_weights(out, &m, source);
    printf("import: %s -> %s (%s, %d tensors loaded, %d initialized fresh)\n", source, out, bert_architecture(&cfg),
           n_loaded, n_missing);
    if (cfg.mlm_only && !modern)
        printf("import: a BertForMaskedLM (no pooler, no NSP head): train with train.objective mlm to continue it as "
               "it is; with mlm+nsp its pooler and NSP head start from fresh weights\n");
    for (int k = 0; k < n_files; k++) {
        free(used[k]);
        st_close(&files[k]);
    }
    free(host);
    bert_free(&m);
    return 0;
}
