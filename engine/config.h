// Model and training configuration. Model fields carry Hugging Face BertConfig names, so a
// config.json from the Hub is read as it is. Configs are JSON (parsed with jansson); an
// unknown field, a wrong type or a value out of range is an error naming file, field, value.
#pragma once
#include <jansson.h>

typedef struct {
    int vocab_size;
    int hidden_size;
    int num_hidden_layers;
    int num_attention_heads;
    int intermediate_size;
    int max_position_embeddings;
    int type_vocab_size;
    int pad_token_id;
    double hidden_dropout_prob;
    double attention_probs_dropout_prob;
    double initializer_range;
    double layer_norm_eps;
    char hidden_act[24];  // "gelu" (erf), "gelu_new", "gelu_pytorch_tanh" or "gelu_fast" (tanh form)
    // The heads, not a BertConfig field: 0 is BertForPreTraining (masked LM, pooler and NSP),
    // 1 BertForMaskedLM (masked LM only: no pooler, no NSP head). Set by run_config_load from
    // train.objective and by checkpoint_open from the stored architectures; written to JSON as
    // "architectures" (bert_config_to_json).
    int mlm_only;
    // The architecture, from model_type: MODEL_BERT ("bert", the fields above) or
    // MODEL_MODERNBERT ("modernbert": transformers' ModernBertForMaskedLM, read from
    // ModernBertConfig's names; hidden_activation is hidden_act, norm_eps layer_norm_eps,
    // attention_dropout attention_probs_dropout_prob, and the fields below). A ModernBERT is
    // always MLM-only and has no position or segment table (type_vocab_size 0).
    int arch;
    // ModernBERT only (0 for BERT):
    int local_attention;  // the sliding window: a local layer's query attends to keys within local_attention / 2
    double global_rope_theta, local_rope_theta;  // RoPE's base in the global and the local layers
    int norm_bias, attention_bias, mlp_bias, classifier_bias, decoder_bias;  // 1: those tensors have biases
    char classifier_activation[24];  // the prediction head's activation (hidden_act's choices)
    double embedding_dropout, mlp_dropout;
    double initializer_cutoff_factor;  // initial weights: normal truncated at this many standard deviations
    int cls_token_id, sep_token_id, bos_token_id, eos_token_id;
    unsigned char layer_global[1024];  // per layer: 1 full ("full_attention"), 0 sliding window
} bert_config;

enum { MODEL_BERT = 0, MODEL_MODERNBERT = 1 };

enum { CONFIG_PATH_MAX = 1024 };

typedef struct {
    char backend[16];    // "auto", "cpu" or "cuda"
    char precision[16];  // "auto", "fp32", "fp16" or "bf16": the activation type
    int seed;
    int micro_batch_size;
    int global_batch_size;  // micro_batch_size x accumulation_steps x world_size
    int accumulation_steps; // derived
    int world_size;         // ranks (processes), from the launcher
    int seq_length;
    int max_predictions_per_seq;
    int steps;
    double learning_rate;
    double warmup_proportion;  // of the steps, see engine/schedule.h
    int log_every;
    char metrics_file[1024];   // JSON lines, one object per log step; "" = none
    char tensorboard_dir[1024];  // TensorBoard event files written as the run goes (cli/tensorboard.h); "" = none
    double peak_tflops;        // the GPU's dense peak for "% of peak"; 0 = from the GPU's name
    double loss_scale;         // 0: dynamic loss scaling (fp16); > 0: this static scale
    double loss_scale_initial, loss_scale_min;
    int loss_scale_growth_interval, loss_scale_max_skips;
    int phase;                 // 1 or 2 of NVIDIA's recipe: stored in checkpoints, checked on resume
    char checkpoint_dir[1024]; // checkpoints go to CHECKPOINT_DIR/step-N (engine/checkpoint.h); "" = none
    int checkpoint_every;      // applied steps between checkpoints; 0 = only at the end and on a signal
    int keep_checkpoints;      // the newest K complete checkpoints are kept; 0 = all
    int steps_this_run;        // stop (with a checkpoint) after this many updates; 0 = run to `steps`
    // Real data (data/loader.h); empty data means synthetic batches: a shard file, a
    // directory of shards, a glob, comma-separated. Every path field, once loaded, is
    // relative to the current directory (run_config_load).
    char data[CONFIG_PATH_MAX];
    char eval_data[CONFIG_PATH_MAX];
    int eval_batches;     // micro-batches evaluated after training (0: one pass over eval_data)
    int eval_every;       // also evaluate every N applied steps, off the training clock (0: at the end only)
    char tokenizer[CONFIG_PATH_MAX];  // SentencePiece model: vocabulary check and special ids
    int dynamic_masking;  // 1: fresh masks each epoch instead of the shards' stored ones
    double mask_prob;     // dynamic masking: share of a row's tokens masked (data/masking.h)
    int whole_word_mask;  // dynamic masking: whole words (data/masking.h)
    // Optimizer (engine/optim.h). Values < 0 mark a field the config left unset: it takes the
    // chosen optimizer's default (optim_config_resolve).
    char optimizer[16];  // "lamb", "lars", "adamw" or "stableadamw"
    double weight_decay, max_grad_norm, beta1, beta2, eps, momentum, trust_coefficient;
    int decoupled_weight_decay;  // adamw, stableadamw: decay (lr / learning_rate) wd instead of lr wd
    // Learning rate (engine/schedule.h): the schedule's shape, and learning_rate derived from
    // base_learning_rate at base_batch_size by lr_scaling when those are given.
    char lr_schedule[16];       // "poly", "cosine", "linear", "constant" or "wsd"
    double decay_proportion;    // wsd: the share of the steps its decay takes (< 0: unset, 0.1)
    int batch_warmup_min_size;     // batch-size warmup's first global batch (sequences; 0: off)
    double batch_warmup_tokens;    // the tokens over which the batch grows to global_batch_size
    double base_learning_rate;  // < 0: unset
    int base_batch_size;        // 0: unset
    char lr_scaling[16];        // "none", "linear" or "sqrt"
    double label_smoothing;     // of the MLM cross-entropy (model.h)
    double comm_timeout_s;  // a wait for other ranks longer than this ends the job (engine/dist.h); 0 = none
    int zero_stage;         // 1: LAMB's state sharded over the ranks (engine/zero.h); 0 = replicated
    int zero_overlap;       // 1: ZeRO-1's collectives per layer, overlapped (engine/zero.h); 0: after the backward
    char allreduce_dtype[16];  // "fp32", "bf16" or "fp16": the type the gradients are summed in (engine/comm.h)
    char unpad[16];         // "auto", "on" or "off": compute only the real tokens (engine/model.h)
    char objective[16];     // "mlm+nsp" (BertForPreTraining) or "mlm" (BertForMaskedLM): bert_config.mlm_only
} train_config;

typedef struct run_config {
    bert_config model;
    train_config train;
} run_config;

// Reads a BertConfig JSON file; exits with a message naming the file and field on error.
void bert_config_load(bert_config *cfg, const char *path);
// Fills cfg from a JSON object; `where` names its origin in error messages.
void bert_config_from_json(bert_config *cfg, json_t *obj, const char *where);
// The BertConfig JSON of cfg (new reference), with the fields transformers needs; its
// architectures is BertForMaskedLM when cfg->mlm_only, else BertForPreTraining.
json_t *bert_config_to_json(const bert_config *cfg);

// The training section as JSON (every field of the table, new reference): what a checkpoint
// stores, and what resuming compares field by field.
json_t *train_config_to_json(const train_config *t);

// json_dumps (JSON_ENCODE_ANY added) with every real in its shortest form that reads back
// exactly (0.05, not 0.050000000000000003), as Python's json writes them. Free the text.
char *json_dumps_exact(const json_t *json, size_t flags);
// json_dumps_exact and a newline written to path (created, truncated; the commit that puts it
// in place fsyncs it, kernels/common/files.h): 0, or -1 with errno set.
int write_json_file(const char *path, const json_t *json, size_t flags);

// One row of a section's field table as text: what `bertpre train --help` and
// docs/CONFIG.md (`bertpre config-doc`) show.
typedef struct {
    const char *name;
    const char *help;  // NULL for a field transformers writes, accepted and ignored
    const char *type;  // "integer", "number", "choice", "path" or "ignored"
    char range[160];   // "1..1024", ">= 0", "auto|cpu|cuda|cuda-emu"; "" for paths
    char def[96];      // "768", "auto", "none", or what a derived value comes from
} config_field_doc;
// Row i (from 0) of section "model" (BertConfig's fields), "modernbert" (ModernBertConfig's) or
// "train"; 0 past the last.
int config_field_doc_get(const char *section, int i, config_field_doc *d);

// Reads a training config: {"model": {BertConfig} or "path relative to this file", "train": {...}}.
// Each override is "section.field=JSON value" (a bare word is taken as a string). Path fields
// of the file are relative to its directory and those of overrides to the current one: the
// loaded config holds them relative to the current directory (or absolute).
// world_size is the number of ranks: the global batch must split into micro-batches on each.
// The optimizer's and the schedule's own fields are left as given: run_config_load
// (engine/train.h) reads a config and resolves them.
void run_config_read(run_config *cfg, const char *path, int n_overrides, char **overrides, int world_size);
// The architecture a model of these heads is, for transformers: "BertForPreTraining",
// "BertForMaskedLM" or "ModernBertForMaskedLM".
const char *bert_architecture(const bert_config *cfg);
// The RoPE base of layer l of a ModernBERT: global_rope_theta or local_rope_theta.
double modernbert_rope_theta(const bert_config *cfg, int l);
// The half-width of layer l's attention window: local_attention / 2 in a sliding-window
// layer, 0 (every key) in a global one and in BERT.
int model_attention_window(const bert_config *cfg, int l);
// The training section with every field at its default (new reference): what a field a
// config or checkpoint leaves out means.
json_t *train_config_defaults_json(void);
