// Table-driven JSON config reading: one field table per section, one validation path for
// files and for --set overrides (overrides edit the JSON tree before it is validated).
#include "engine/config.h"
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "data/masking.h"
#include "kernels/common/check.h"
#include "kernels/common/files.h"
#include "kernels/common/json_any.h"

// FIELD_BOOL: a JSON boolean stored as an int. FIELD_CUSTOM: read by the section's own code
// (a list or an object, or a field that sets others); `choices` names its type for the docs.
typedef enum { FIELD_INT, FIELD_REAL, FIELD_CHOICE, FIELD_PATH, FIELD_IGNORED, FIELD_FIXED_BOOL, FIELD_BOOL,
               FIELD_CUSTOM } field_kind;

// One row per config field: it drives reading and checking (read_section), the defaults
// (set_defaults), `bertpre train --help` and docs/CONFIG.md (config_field_describe).
typedef struct {
    const char *name;
    field_kind kind;
    size_t offset;        // into the section's struct; (size_t)-1: checked, not stored
    double min, max;      // inclusive range for numbers; max is the buffer size for strings and paths
    const char *choices;  // "a|b|c" for FIELD_CHOICE
    double def;           // a number's default
    const char *def_text; // a path's or choice's default; for a number, shown instead of `def` when set
    const char *help;
} field_t;

#define INT(st, f, lo, hi, d, help) {#f, FIELD_INT, offsetof(st, f), lo, hi, NULL, d, NULL, help}
#define REAL(st, f, lo, hi, d, help) {#f, FIELD_REAL, offsetof(st, f), lo, hi, NULL, d, NULL, help}
// A number whose default `d` (outside the range) means "derived": `shown` says from what.
#define INT_DERIVED(st, f, lo, hi, d, shown, help) {#f, FIELD_INT, offsetof(st, f), lo, hi, NULL, d, shown, help}
#define REAL_DERIVED(st, f, lo, hi, d, shown, help) {#f, FIELD_REAL, offsetof(st, f), lo, hi, NULL, d, shown, help}
#define CHOICE(st, f, choices, d, help) {#f, FIELD_CHOICE, offsetof(st, f), 0, sizeof(((st *)0)->f), choices, 0, d, help}
// A file or directory: relative to the config file's directory (run_config_read).
#define PATH(st, f, help) {#f, FIELD_PATH, offsetof(st, f), 0, sizeof(((st *)0)->f), NULL, 0, "", help}
#define IGNORED(f) {f, FIELD_IGNORED, 0, 0, 0, NULL, 0, NULL, NULL}
// Read and not applied, with a note on stderr where the value is not `usual` (what bertpre does
// anyway): the note says what bertpre does instead.
#define NOTED(f, usual, help) {f, FIELD_IGNORED, 0, 0, 0, NULL, 0, usual, help}
// Fields of BertConfig that bertpre supports with one value only: checked, not stored.
#define FIXED(f, choices, help) {f, FIELD_CHOICE, (size_t)-1, 0, 0, choices, 0, choices, help}
// A BertConfig flag that bertpre's BERT has with one value only (1: true, 0: false).
#define FIXED_BOOL(f, value, help) {f, FIELD_FIXED_BOOL, (size_t)-1, 0, 0, NULL, value, (value) ? "true" : "false", help}
// A field stored under another member's name (ModernBertConfig's name for what BERT's member holds).
#define INT_AS(name, st, f, lo, hi, d, help) {name, FIELD_INT, offsetof(st, f), lo, hi, NULL, d, NULL, help}
#define REAL_AS(name, st, f, lo, hi, d, help) {name, FIELD_REAL, offsetof(st, f), lo, hi, NULL, d, NULL, help}
#define CHOICE_AS(name, st, f, choices, d, help) \
    {name, FIELD_CHOICE, offsetof(st, f), 0, sizeof(((st *)0)->f), choices, 0, d, help}
#define BOOL(st, f, d, help) {#f, FIELD_BOOL, offsetof(st, f), 0, 1, NULL, d, (d) ? "true" : "false", help}
#define CUSTOM(f, type, d, help) {f, FIELD_CUSTOM, (size_t)-1, 0, 0, type, 0, d, help}

// BertConfig's own defaults (bert-base-uncased), so that Hub configs that omit a field mean
// what they mean in transformers.
static const field_t bert_fields[] = {
    INT(bert_config, vocab_size, 1, 1 << 24, 30522, "tokens in the vocabulary (at least the tokenizer's pieces)"),
    INT(bert_config, hidden_size, 1, 1 << 16, 768, "width of the encoder; a multiple of num_attention_heads"),
    INT(bert_config, num_hidden_layers, 1, 1024, 12, "encoder layers"),
    INT(bert_config, num_attention_heads, 1, 1024, 12, "attention heads per layer"),
    INT(bert_config, intermediate_size, 1, 1 << 18, 3072, "width of the feed-forward block"),
    INT(bert_config, max_position_embeddings, 1, 1 << 16, 512, "longest sequence (train.seq_length at most this)"),
    INT(bert_config, type_vocab_size, 1, 1 << 10, 2, "segment ids; pretraining needs at least 2 (sentences A, B)"),
    INT(bert_config, pad_token_id, 0, 1 << 24, 0, "id of [PAD]; below vocab_size"),
    REAL(bert_config, hidden_dropout_prob, 0.0, 0.999, 0.1, "dropout after embeddings, attention output and FFN"),
    REAL(bert_config, attention_probs_dropout_prob, 0.0, 0.999, 0.1, "dropout of the attention probabilities"),
    REAL(bert_config, initializer_range, 0.0, 10.0, 0.02, "standard deviation of the initial weights"),
    REAL(bert_config, layer_norm_eps, 0.0, 1.0, 1e-12, "epsilon of every LayerNorm"),
    CHOICE(bert_config, hidden_act, "gelu|gelu_new|gelu_pytorch_tanh|gelu_fast", "gelu", "activation of the "
           "feed-forward block and the MLM head's transform: gelu is the exact (erf) GELU; the others are "
           "transformers' names of the tanh approximation"),
    FIXED("position_embedding_type", "absolute", "learned absolute position embeddings"),
    FIXED("model_type", "bert", "the Hugging Face model type"),
    FIXED_BOOL("tie_word_embeddings", 1, "the MLM decoder shares the word embeddings"),
    FIXED_BOOL("is_decoder", 0, "an encoder (no causal mask)"),
    FIXED_BOOL("add_cross_attention", 0, "no cross-attention layers"),
    FIXED_BOOL("is_encoder_decoder", 0, "an encoder alone"),
    // Written by transformers into every config.json; they do not change pretraining.
    IGNORED("architectures"),
    IGNORED("_name_or_path"),
    IGNORED("transformers_version"),
    NOTED("torch_dtype", "float32", "the dtype the weights were saved in (transformers 4): bertpre reads them into "
          "FP32 master weights, and train.precision sets the compute type"),
    NOTED("dtype", "float32", "the dtype the weights were saved in (transformers 5): bertpre reads them into FP32 "
          "master weights, and train.precision sets the compute type"),
    IGNORED("use_cache"),
    IGNORED("classifier_dropout"),
    IGNORED("gradient_checkpointing"),
    IGNORED("directionality"),
    IGNORED("pooler_fc_size"),
    IGNORED("pooler_num_attention_heads"),
    IGNORED("pooler_num_fc_layers"),
    IGNORED("pooler_size_per_head"),
    IGNORED("pooler_type"),
    // Set by fine-tuning or generation code: no effect on the encoder or the pretraining heads.
    IGNORED("id2label"),
    IGNORED("label2id"),
    IGNORED("num_labels"),
    IGNORED("problem_type"),
    IGNORED("finetuning_task"),
    IGNORED("output_past"),
    IGNORED("output_hidden_states"),
    IGNORED("output_attentions"),
    IGNORED("return_dict"),
    IGNORED("torchscript"),
    IGNORED("chunk_size_feed_forward"),
    IGNORED("tokenizer_class"),
    IGNORED("bos_token_id"),
    IGNORED("eos_token_id"),
    IGNORED("sep_token_id"),
    {NULL, 0, 0, 0, 0, NULL, 0, NULL, NULL},
};

// ModernBertConfig's fields and defaults (answerdotai/ModernBERT-base), by transformers' names.
#define GELU_CHOICES "gelu|gelu_new|gelu_pytorch_tanh|gelu_fast"
static const field_t modernbert_fields[] = {
    INT(bert_config, vocab_size, 1, 1 << 24, 50368, "tokens in the vocabulary (at least the tokenizer's pieces)"),
    INT(bert_config, hidden_size, 1, 1 << 16, 768, "width of the encoder; a multiple of num_attention_heads"),
    INT(bert_config, num_hidden_layers, 1, 1024, 22, "encoder layers"),
    INT(bert_config, num_attention_heads, 1, 1024, 12, "attention heads per layer; the head width is even (RoPE)"),
    INT(bert_config, intermediate_size, 1, 1 << 18, 1152, "width of the GeGLU: Wi maps to 2 x this, Wo back"),
    INT(bert_config, max_position_embeddings, 1, 1 << 20, 8192, "longest sequence (train.seq_length at most this)"),
    INT(bert_config, pad_token_id, 0, 1 << 24, 50283, "id of [PAD]; below vocab_size; its embedding row gets no "
        "gradient"),
    INT(bert_config, cls_token_id, 0, 1 << 24, 50281, "id of [CLS]"),
    INT(bert_config, sep_token_id, 0, 1 << 24, 50282, "id of [SEP]"),
    INT(bert_config, bos_token_id, 0, 1 << 24, 50281, "id of the first token (ModernBERT's is [CLS])"),
    INT(bert_config, eos_token_id, 0, 1 << 24, 50282, "id of the last token (ModernBERT's is [SEP])"),
    CHOICE_AS("hidden_activation", bert_config, hidden_act, GELU_CHOICES, "gelu", "activation of the GeGLU's "
              "input half: gelu is the exact (erf) GELU; the others are transformers' names of the tanh form"),
    CHOICE(bert_config, classifier_activation, GELU_CHOICES, "gelu", "activation of the prediction head"),
    REAL_AS("norm_eps", bert_config, layer_norm_eps, 0.0, 1.0, 1e-5, "epsilon of every LayerNorm"),
    BOOL(bert_config, norm_bias, 0, "the LayerNorms have biases"),
    BOOL(bert_config, attention_bias, 0, "Wqkv and the attention's Wo have biases"),
    BOOL(bert_config, mlp_bias, 0, "the GeGLU's Wi and Wo have biases"),
    BOOL(bert_config, classifier_bias, 0, "the prediction head's dense layer has a bias"),
    BOOL(bert_config, decoder_bias, 1, "the decoder (tied to the token embeddings) has a bias"),
    REAL(bert_config, embedding_dropout, 0.0, 0.999, 0.0, "dropout after the embeddings' LayerNorm"),
    REAL_AS("attention_dropout", bert_config, attention_probs_dropout_prob, 0.0, 0.999, 0.0, "dropout of the "
            "attention probabilities and of the attention's output"),
    REAL(bert_config, mlp_dropout, 0.0, 0.999, 0.0, "dropout of the GeGLU's output, before Wo"),
    REAL(bert_config, initializer_range, 0.0, 10.0, 0.02, "standard deviation of the initial weights (the output "
         "projections: divided by sqrt(2 x num_hidden_layers))"),
    REAL(bert_config, initializer_cutoff_factor, 0.0, 100.0, 2.0, "initial weights are normal, truncated at this "
         "many standard deviations"),
    INT(bert_config, local_attention, 2, 1 << 20, 128, "width of the sliding window: a local layer's token attends "
        "to the tokens at most local_attention / 2 positions away"),
    CUSTOM("layer_types", "list", "from global_attn_every_n_layers", "per layer \"full_attention\" or "
           "\"sliding_attention\" (transformers 5)"),
    CUSTOM("global_attn_every_n_layers", "integer", "3", "layer l is global when l is a multiple of it, else "
           "sliding (transformers 4; layer_types wins where both are given and must agree)"),
    CUSTOM("rope_parameters", "object", "from the thetas", "{\"full_attention\": {\"rope_type\": \"default\", "
           "\"rope_theta\": ...}, \"sliding_attention\": {...}} (transformers 5; rope_type default only)"),
    CUSTOM("global_rope_theta", "number", "160000", "RoPE's base in the global layers (transformers 4)"),
    CUSTOM("local_rope_theta", "number or null", "10000", "RoPE's base in the sliding-window layers; null: "
           "global_rope_theta (transformers 4)"),
    CUSTOM("rope_scaling", "null", "null", "RoPE scaling: none (only the default RoPE is computed)"),
    FIXED("model_type", "modernbert", "the Hugging Face model type"),
    FIXED_BOOL("tie_word_embeddings", 1, "the decoder shares the token embeddings"),
    // Written by transformers into every config.json, or fine-tuning and inference settings:
    // they change neither the encoder nor the masked LM's loss.
    IGNORED("architectures"),
    IGNORED("_name_or_path"),
    IGNORED("transformers_version"),
    NOTED("torch_dtype", "float32", "the dtype the weights were saved in (transformers 4): bertpre reads them into "
          "FP32 master weights, and train.precision sets the compute type"),
    NOTED("dtype", "float32", "the dtype the weights were saved in (transformers 5): bertpre reads them into FP32 "
          "master weights, and train.precision sets the compute type"),
    IGNORED("layer_norm_eps"),
    IGNORED("position_embedding_type"),
    IGNORED("classifier_pooling"),
    IGNORED("classifier_dropout"),
    IGNORED("sparse_prediction"),
    IGNORED("sparse_pred_ignore_index"),
    IGNORED("deterministic_flash_attn"),
    IGNORED("reference_compile"),
    IGNORED("repad_logits_with_grad"),
    IGNORED("gradient_checkpointing"),
    IGNORED("id2label"),
    IGNORED("label2id"),
    IGNORED("num_labels"),
    IGNORED("problem_type"),
    IGNORED("output_hidden_states"),
    IGNORED("output_attentions"),
    IGNORED("return_dict"),
    IGNORED("use_cache"),
    IGNORED("tokenizer_class"),
    {NULL, 0, 0, 0, 0, NULL, 0, NULL, NULL},
};

#define T train_config
static const field_t train_fields[] = {
    CHOICE(T, backend, "auto|cpu|cuda|cuda-emu", "auto", "auto picks cuda when this build has it and a GPU is "
           "visible, else cpu; cuda-emu runs the CUDA kernels through the host emulation (slow, for tests)"),
    CHOICE(T, precision, "auto|fp32|fp16|bf16", "auto", "activation type: auto is fp16 on CUDA, fp32 on the CPU "
           "(which computes in fp32 only)"),
    INT(T, seed, 0, 2147483647, 42, "weights, dropout and synthetic data"),
    INT(T, micro_batch_size, 1, 1 << 20, 8, "sequences per forward and backward on one rank"),
    INT_DERIVED(T, global_batch_size, 1, 1 << 24, 0, "micro_batch_size x ranks", "sequences per optimizer step "
                "= micro_batch_size x accumulation steps x ranks; a multiple of micro_batch_size x ranks"),
    INT(T, seq_length, 2, 1 << 16, 128, "tokens per sequence (the shards' length)"),
    INT(T, max_predictions_per_seq, 1, 1 << 16, 20, "masked positions per sequence at most"),
    INT(T, steps, 1, 2147483647, 100, "optimizer updates of the whole run (the schedule's length)"),
    REAL_DERIVED(T, learning_rate, 0.0, 1e3, -1.0, "1e-3, or from base_learning_rate", "peak learning rate, "
                 "reached at the end of warmup"),
    REAL(T, warmup_proportion, 0.0, 1.0, 0.01, "share of the steps over which the rate rises linearly from 0"),
    INT(T, log_every, 1, 2147483647, 10, "steps between log lines"),
    PATH(T, metrics_file, "JSON lines, one object per log line (none when empty); a resumed run appends, a new "
         "run keeps an earlier run's file as FILE.N; a path naming the config, tokenizer or data, a FIFO or a file "
         "of other bytes is refused"),
    PATH(T, tensorboard_dir, "TensorBoard event files of the metrics lines, written as the run goes (tensorboard "
         "--logdir DIR shows it live; a resumed run adds a file); made with its parents; none when empty"),
    REAL_DERIVED(T, peak_tflops, 0.0, 1e6, 0.0, "from the GPU's name", "the GPU's dense peak TFLOP/s for \"% of "
                 "peak\" (not shown on the CPU)"),
    REAL_DERIVED(T, loss_scale, 0.0, 1e30, 0.0, "0: dynamic under fp16, none otherwise", "a static loss scale "
                 "(> 0), or 0 for dynamic loss scaling under fp16"),
    REAL(T, loss_scale_initial, 1.0, 1e30, 65536.0, "dynamic scaling: the first scale"),
    REAL(T, loss_scale_min, 1e-30, 1e30, 1.0, "dynamic scaling: the scale is not halved below this"),
    INT(T, loss_scale_growth_interval, 1, 2147483647, 2000, "dynamic scaling: the scale doubles after this many "
        "steps without overflow"),
    INT(T, loss_scale_max_skips, 1, 2147483647, 32, "dynamic scaling: the run stops after this many overflowing "
        "steps in a row"),
    INT(T, phase, 1, 2, 1, "1 or 2 of NVIDIA's recipe: stored in checkpoints; resuming needs the same phase"),
    PATH(T, checkpoint_dir, "where checkpoints go (step-N directories, docs/CHECKPOINTS.md); none when empty"),
    INT(T, checkpoint_every, 0, 2147483647, 0, "applied steps between checkpoints; 0: only after the last step, "
        "steps_this_run, or a signal"),
    INT(T, keep_checkpoints, 0, 2147483647, 3, "the newest K complete checkpoints are kept; 0: all"),
    INT(T, steps_this_run, 0, 2147483647, 0, "stop with a checkpoint after this many updates (continue with "
        "--resume auto); 0: run to steps"),
    PATH(T, data, "HDF5 shards: a file, a directory, or a glob; comma-separated (the path rule applies to "
         "each entry). Empty: synthetic batches"),
    PATH(T, eval_data, "shards evaluated after training (MLM/NSP loss and accuracy, as bertpre eval prints)"),
    INT(T, eval_batches, 0, 2147483647, 0, "micro-batches of eval_data evaluated; 0: one pass"),
    INT(T, eval_every, 0, 2147483647, 0, "evaluate eval_data every N steps as well (the ranks share its rows; "
        "the time is left out of elapsed_s); 0: only after training"),
    PATH(T, tokenizer, "SentencePiece model, WordPiece vocab.txt or BPE tokenizer.json: its vocabulary must fit vocab_size, and it "
         "gives the special ids for dynamic masking"),
    INT(T, dynamic_masking, 0, 1, 0, "1: fresh masks for every sample each epoch instead of the shards' stored ones"),
    REAL(T, mask_prob, 0.001, 1.0, MASK_PROB_DEFAULT, "dynamic masking: round(tokens x mask_prob) positions of "
         "each row masked (create_pretraining_data.py's masked_lm_prob; 0.15 BERT, 0.3 MosaicBERT and ModernBERT); "
         "needs dynamic_masking 1 and max_predictions_per_seq >= round(seq_length x mask_prob). Stored masks keep "
         "the rate prep used (--masked-lm-prob); synthetic batches take it to the percent"),
    INT(T, whole_word_mask, 0, 1, 0, "dynamic masking: 1 masks whole words (a piece and the WordPiece ## or "
        "SentencePiece pieces without a leading \u2581 that continue it) from train.tokenizer's pieces, as "
        "create_pretraining_data.py's do_whole_word_mask (80/10/10 per token); needs dynamic_masking 1 and "
        "train.tokenizer (stored masks keep what prep --whole-word-mask chose)"),
    CHOICE(T, optimizer, "lamb|lars|adamw|stableadamw", "lamb", "the optimizer (engine/optim.h; stableadamw: "
           "torch-optimi's StableAdamW, ModernBERT's); resuming with another is an error"),
    REAL(T, weight_decay, 0.0, 10.0, 0.01, "decoupled weight decay (not biases, not LayerNorm)"),
    REAL(T, max_grad_norm, 0.0, 1e30, 1.0, "clipping of the global gradient norm; 0: none (ModernBERT's recipe: stableadamw clips each tensor's update instead)"),
    INT(T, decoupled_weight_decay, 0, 1, 0, "adamw and stableadamw: 1 decays the weights by (lr / learning_rate) x "
        "weight_decay per step, independent of the rate's size (Composer's DecoupledAdamW, torch-optimi's decouple_lr; "
        "MosaicBERT's and ModernBERT's weight decay 1e-5 is meant so); 0: by lr x weight_decay (torch.optim.AdamW)"),
    REAL_DERIVED(T, beta1, 0.0, 1.0, -1.0, "0.9 (lamb, adamw, stableadamw)", "first-moment decay, below 1 (lamb, "
                 "adamw, stableadamw; an error with lars)"),
    REAL_DERIVED(T, beta2, 0.0, 1.0, -1.0, "0.999 (lamb, adamw), 0.99 (stableadamw)", "second-moment decay, below 1 "
                 "(lamb, adamw, stableadamw; an error with lars)"),
    REAL_DERIVED(T, eps, 0.0, 1.0, -1.0, "1e-6 (lamb, stableadamw), 1e-8 (adamw, lars)", "denominator term of the "
                 "update (lamb, adamw, stableadamw) or of the trust ratio (lars)"),
    REAL_DERIVED(T, momentum, 0.0, 1.0, -1.0, "0.9 (lars)", "momentum of the SGD buffer, below 1 (lars only)"),
    REAL_DERIVED(T, trust_coefficient, 0.0, 1e3, -1.0, "0.001 (lars)", "eta of the trust ratio (lars only)"),
    CHOICE(T, lr_schedule, "poly|cosine|linear|constant|wsd", "poly", "decay after warmup; poly is NVIDIA's BERT "
           "decay with power 0.5 to zero; wsd holds the peak rate, then decays it as 1 - sqrt over the last "
           "decay_proportion of the steps (warmup-stable-decay, ModernBERT's)"),
    REAL_DERIVED(T, decay_proportion, 0.0, 1.0, -1.0, "0.1 (wsd)", "wsd only: the share of the steps its decay "
                 "takes (0: the peak rate to the end)"),
    INT(T, batch_warmup_min_size, 0, 1 << 24, 0, "batch-size warmup (ModernBERT's): the first steps' global batch "
        "in sequences, a multiple of micro_batch_size x ranks below global_batch_size; the batch then grows by "
        "one micro-batch per rank at a time to global_batch_size over batch_warmup_tokens, the same number of "
        "steps at each size; 0: off"),
    REAL(T, batch_warmup_tokens, 0.0, 1e18, 0.0, "batch-size warmup: the tokens (rows x seq_length, summed over "
         "the ranks) it takes to reach global_batch_size"),
    REAL_DERIVED(T, base_learning_rate, 0.0, 1e3, -1.0, "unset", "instead of learning_rate: the rate at "
                 "base_batch_size, scaled to global_batch_size by lr_scaling"),
    INT_DERIVED(T, base_batch_size, 1, 1 << 24, 0, "unset", "the global batch base_learning_rate is for"),
    CHOICE(T, lr_scaling, "none|linear|sqrt", "none", "base_learning_rate x G/b (linear) or x sqrt(G/b) (sqrt)"),
    REAL(T, label_smoothing, 0.0, 0.999, 0.0, "label smoothing of the MLM cross-entropy (NSP is not smoothed)"),
    REAL(T, comm_timeout_s, 0.0, 1e6, 50.0, "seconds a rank waits for the others before the job ends naming "
         "them; 0: forever"),
    INT(T, zero_stage, 0, 1, 0, "1: the optimizer's state sharded over the ranks (ZeRO-1); 0: replicated"),
    INT(T, zero_overlap, 0, 1, 1, "with zero_stage 1: 1 reduces each layer's gradients during the backward and "
        "gathers each layer's weights while the next step's first forward runs; 0: one reduce-scatter after the "
        "backward and one all-gather after the update"),
    CHOICE(T, allreduce_dtype, "fp32|bf16|fp16", "fp32", "the type the gradients are summed over the ranks in "
           "(fp16 pre-scaled by 1/ranks; cast back into the FP32 gradients before the optimizer; CUDA only)"),
    CHOICE(T, unpad, "auto|on|off", "auto", "compute only the real tokens (the padded model's function, "
           "docs/ARCHITECTURE.md); auto: on whenever a micro-batch has padding"),
    CHOICE(T, objective, "mlm+nsp|mlm", "mlm+nsp", "mlm+nsp: BERT's masked LM and next-sentence prediction "
           "(BertForPreTraining); mlm: masked LM only, as RoBERTa and later encoders (BertForMaskedLM: no pooler, "
           "no NSP head, their weights, FLOPs and optimizer state not spent); resuming with another is an error"),
    {NULL, 0, 0, 0, 0, NULL, 0, NULL, NULL},
};
#undef T

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

// The shortest text of v that reads back as v, as Python's repr writes it: positional
// between 1e-4 and 1e16, else with an exponent, and ".0" when it would read as an integer.
static int shortest_real(double v, char *out, size_t size) {
    int p = 1;
    while (p < 17) {
        snprintf(out, size, "%.*e", p - 1, v);
        if (strtod(out, NULL) == v) break;
        p++;
    }
    int exp = (int)strtol(strchr(out, 'e') + 1, NULL, 10);
    int n = exp >= -4 && exp < 16 ? snprintf(out, size, "%.*f", p - 1 - exp > 0 ? p - 1 - exp : 0, v)
                                  : snprintf(out, size, "%.*g", p, v);
    if (!strpbrk(out, ".e")) n += snprintf(out + n, size - (size_t)n, ".0");
    return n;
}

char *json_dumps_exact(const json_t *json, size_t flags) {
    char *text = json_dumps(json, flags | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    if (!text) return NULL;
    // Jansson writes each real with 17 significant digits; each number token with a fraction
    // or an exponent is written again in its shortest exact form (never longer).
    char *out = xcalloc(8 * strlen(text) + 1, 1), *o = out;  // "0.0" is the shortest real Jansson writes
    int in_string = 0;
    for (const char *p = text; *p;) {
        if (in_string) {
            if (*p == '\\' && p[1]) *o++ = *p++;
            else if (*p == '"') in_string = 0;
            *o++ = *p++;
        } else if (*p == '"') {
            in_string = 1;
            *o++ = *p++;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            size_t len = strspn(p, "-+0123456789.eE"), digits = strspn(p, "-0123456789");
            char number[64];
            if (digits < len && len < sizeof number) {  // a fraction or an exponent: a real
                snprintf(number, sizeof number, "%.*s", (int)len, p);
                o += shortest_real(strtod(number, NULL), o, 32);
            } else {
                memcpy(o, p, len);
                o += len;
            }
            p += len;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    free(text);
    return out;
}

int write_json_file(const char *path, const json_t *json, size_t flags) {
    char *text = json_dumps_exact(json, flags);
    if (!text) {
        errno = ENOMEM;  // Jansson's dump fails only when it cannot allocate
        return -1;
    }
    size_t len = strlen(text);
    text = realloc(text, len + 2);
    check_alloc(text, len + 2);
    memcpy(text + len, "\n", 2);
    int rc = write_file_bytes(path, text, len + 1), err = errno;
    free(text);
    errno = err;
    return rc;
}

static void read_section(void *dst, const field_t *fields, json_t *obj, const char *where) {
    if (!json_is_object(obj)) fatal("%s: expected a JSON object", where);
    const char *key;
    json_t *value;
    json_object_foreach(obj, key, value) {
        const field_t *f = fields;
        while (f->name && strcmp(f->name, key) != 0) f++;
        if (!f->name) fatal("%s: unknown field '%s'", where, key);
        char *text = json_dumps_exact(value, JSON_COMPACT);
        if (f->kind == FIELD_IGNORED && f->help && !json_is_null(value) &&
            !(json_is_string(value) && !strcmp(json_string_value(value), f->def_text)))
            fprintf(stderr, "bertpre: note: %s: field '%s' = %s is not applied: %s\n", where, key, text, f->help);
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
            if (f->offset != (size_t)-1) snprintf((char *)dst + f->offset, (size_t)f->max, "%s", json_string_value(value));
        } else if (f->kind == FIELD_FIXED_BOOL) {
            if (!json_is_boolean(value) || json_is_true(value) != (f->def != 0))
                fatal("%s: field '%s' = %s is not supported (bertpre's BERT has %s only: %s)", where, key, text,
                      f->def_text, f->help);
        } else if (f->kind == FIELD_BOOL) {
            if (!json_is_boolean(value)) fatal("%s: field '%s' must be true or false, got %s", where, key, text);
            *(int *)((char *)dst + f->offset) = json_is_true(value);
        } else if (f->kind == FIELD_PATH) {
            if (!json_is_string(value)) fatal("%s: field '%s' must be a string, got %s", where, key, text);
            if (strlen(json_string_value(value)) >= (size_t)f->max)
                fatal("%s: field '%s' = %s is longer than %.0f characters", where, key, text, f->max - 1);
            snprintf((char *)dst + f->offset, (size_t)f->max, "%s", json_string_value(value));
        }
        free(text);
    }
}

// Every stored field of the table at its default.
static void set_defaults(void *dst, const field_t *fields) {
    for (const field_t *f = fields; f->name; f++) {
        if (f->kind == FIELD_IGNORED || f->offset == (size_t)-1) continue;
        char *p = (char *)dst + f->offset;
        if (f->kind == FIELD_INT || f->kind == FIELD_BOOL) *(int *)p = (int)f->def;
        else if (f->kind == FIELD_REAL) *(double *)p = f->def;
        else snprintf(p, (size_t)f->max, "%s", f->def_text);
    }
}

// A theta: a positive number (null where `null_ok`: returns 0, "the global one").
static double rope_theta_of(json_t *value, const char *where, const char *field, int null_ok) {
    if (null_ok && json_is_null(value)) return 0.0;
    if (!json_is_number(value) || !(json_number_value(value) > 0.0) || !isfinite(json_number_value(value))) {
        char *text = json_dumps_exact(value, JSON_COMPACT | JSON_ENCODE_ANY);
        fatal("%s: field '%s' = %s must be a positive number%s", where, field, text, null_ok ? " or null" : "");
    }
    return json_number_value(value);
}

// ModernBertConfig's fields that the table leaves to code: which layers are global (layer_types,
// or transformers 4's global_attn_every_n_layers), RoPE's bases (rope_parameters, or transformers
// 4's global_rope_theta and local_rope_theta), and the checks of the whole.
static void modernbert_from_json(bert_config *cfg, json_t *obj, const char *where) {
    int L = cfg->num_hidden_layers;
    json_t *every = json_object_get(obj, "global_attn_every_n_layers"), *types = json_object_get(obj, "layer_types");
    int n = 3;
    if (every && !json_is_null(every)) {
        if (!json_is_integer(every) || json_integer_value(every) < 1 || json_integer_value(every) > 1024) {
            char *text = json_dumps_exact(every, JSON_COMPACT | JSON_ENCODE_ANY);
            fatal("%s: field 'global_attn_every_n_layers' = %s must be an integer in [1, 1024]", where, text);
        }
        n = (int)json_integer_value(every);
    }
    for (int l = 0; l < L; l++) cfg->layer_global[l] = l % n == 0;
    if (types && !json_is_null(types)) {
        if (!json_is_array(types) || (int)json_array_size(types) != L)
            fatal("%s: field 'layer_types' must be a list of num_hidden_layers = %d entries", where, L);
        for (int l = 0; l < L; l++) {
            const char *t = json_string_value(json_array_get(types, l));
            if (!t || (strcmp(t, "full_attention") && strcmp(t, "sliding_attention"))) {
                char *text = json_dumps_exact(json_array_get(types, l), JSON_COMPACT | JSON_ENCODE_ANY);
                fatal("%s: field 'layer_types'[%d] = %s is not supported (allowed: full_attention, "
                      "sliding_attention)", where, l, text);
            }
            int global = !strcmp(t, "full_attention");
            if (every && !json_is_null(every) && global != cfg->layer_global[l])
                fatal("%s: field 'layer_types'[%d] = \"%s\" disagrees with 'global_attn_every_n_layers' = %d", where,
                      l, t, n);
            cfg->layer_global[l] = (unsigned char)global;
        }
    }
    cfg->global_rope_theta = 160000.0;
    cfg->local_rope_theta = 10000.0;
    json_t *g = json_object_get(obj, "global_rope_theta"), *lo = json_object_get(obj, "local_rope_theta");
    if (g) cfg->global_rope_theta = rope_theta_of(g, where, "global_rope_theta", 0);
    if (lo) {
        double v = rope_theta_of(lo, where, "local_rope_theta", 1);
        cfg->local_rope_theta = v > 0.0 ? v : cfg->global_rope_theta;
    }
    json_t *scaling = json_object_get(obj, "rope_scaling");
    if (scaling && !json_is_null(scaling))
        fatal("%s: field 'rope_scaling' is not supported (bertpre computes the default RoPE only): remove it", where);
    json_t *rope = json_object_get(obj, "rope_parameters");
    if (rope && !json_is_null(rope)) {
        if (!json_is_object(rope)) fatal("%s: field 'rope_parameters' must be an object", where);
        const char *kind;
        json_t *params;
        json_object_foreach(rope, kind, params) {
            int global = !strcmp(kind, "full_attention");
            if (!global && strcmp(kind, "sliding_attention"))
                fatal("%s: field 'rope_parameters' has the key '%s' (allowed: full_attention, sliding_attention)",
                      where, kind);
            if (json_is_null(params)) continue;
            if (!json_is_object(params)) fatal("%s: field 'rope_parameters'.%s must be an object", where, kind);
            const char *key;
            json_t *value;
            json_object_foreach(params, key, value) {
                char field[96];
                snprintf(field, sizeof field, "rope_parameters'.%s.'%s", kind, key);
                if (!strcmp(key, "rope_theta")) {
                    double v = rope_theta_of(value, where, field, 0);
                    *(global ? &cfg->global_rope_theta : &cfg->local_rope_theta) = v;
                } else if (!strcmp(key, "rope_type")) {
                    if (!json_is_string(value) || strcmp(json_string_value(value), "default")) {
                        char *text = json_dumps_exact(value, JSON_COMPACT | JSON_ENCODE_ANY);
                        fatal("%s: field '%s' = %s is not supported (bertpre computes the default RoPE only)",
                              where, field, text);
                    }
                } else {
                    fatal("%s: field '%s' is not supported (bertpre computes the default RoPE: rope_type and "
                          "rope_theta only)", where, field);
                }
            }
        }
    }
    if ((cfg->hidden_size / (cfg->num_attention_heads ? cfg->num_attention_heads : 1)) % 2)
        fatal("%s: the head width hidden_size / num_attention_heads = %d / %d is odd: RoPE rotates pairs of "
              "columns", where, cfg->hidden_size, cfg->num_attention_heads);
    cfg->arch = MODEL_MODERNBERT;
    cfg->mlm_only = 1;
    cfg->type_vocab_size = 0;
}

// transformers builds the class that "architectures" names: a class of another model (say
// RobertaForMaskedLM) is not this architecture, whatever model_type says.
static void check_architectures(json_t *obj, const char *where, int modern) {
    const char *prefix = modern ? "ModernBert" : "Bert";
    json_t *arch = json_object_get(obj, "architectures"), *name;
    size_t i;
    if (arch && !json_is_array(arch) && !json_is_null(arch))
        fatal("%s: field 'architectures' must be a list of class names", where);
    json_array_foreach(arch, i, name) {
        if (!json_is_string(name) || strncmp(json_string_value(name), prefix, strlen(prefix)) != 0) {
            char *text = json_dumps_exact(name, JSON_COMPACT | JSON_ENCODE_ANY);
            fatal("%s: field 'architectures' names %s, not a %s class (%s): bertpre reads and trains BERT "
                  "(model_type bert) and ModernBERT (model_type modernbert) models", where,
                  text ? text : "a non-string", modern ? "ModernBERT" : "BERT",
                  modern ? "ModernBertForMaskedLM, ModernBertModel, ..." : "BertForPreTraining, BertForMaskedLM, "
                  "BertModel, ...");
        }
    }
}

void bert_config_from_json(bert_config *cfg, json_t *obj, const char *where) {
    memset(cfg, 0, sizeof *cfg);
    json_t *type = json_is_object(obj) ? json_object_get(obj, "model_type") : NULL;
    if (type && (!json_is_string(type) || (strcmp(json_string_value(type), "bert") &&
                                           strcmp(json_string_value(type), "modernbert")))) {
        char *text = json_dumps_exact(type, JSON_COMPACT | JSON_ENCODE_ANY);
        fatal("%s: field 'model_type' = %s is not supported (allowed: bert|modernbert)", where, text);
    }
    int modern = type && !strcmp(json_string_value(type), "modernbert");
    const field_t *fields = modern ? modernbert_fields : bert_fields;
    set_defaults(cfg, fields);
    read_section(cfg, fields, obj, where);
    check_architectures(obj, where, modern);
    if (cfg->hidden_size % cfg->num_attention_heads != 0)
        fatal("%s: field 'hidden_size' = %d is not a multiple of 'num_attention_heads' = %d", where,
              cfg->hidden_size, cfg->num_attention_heads);
    if (cfg->pad_token_id >= cfg->vocab_size)
        fatal("%s: field 'pad_token_id' = %d is not below 'vocab_size' = %d", where, cfg->pad_token_id,
              cfg->vocab_size);
    if (modern) modernbert_from_json(cfg, obj, where);
}

static json_t *load_json_file(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        fatal("%s: is a directory; give the path of a JSON config file", path);
    json_error_t err;
    json_t *root = json_any_load_file(path, 0, &err);
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

const char *bert_architecture(const bert_config *cfg) {
    if (cfg->arch == MODEL_MODERNBERT) return "ModernBertForMaskedLM";
    return cfg->mlm_only ? "BertForMaskedLM" : "BertForPreTraining";
}

double modernbert_rope_theta(const bert_config *cfg, int l) {
    return cfg->layer_global[l] ? cfg->global_rope_theta : cfg->local_rope_theta;
}

int model_attention_window(const bert_config *cfg, int l) {
    return cfg->arch == MODEL_MODERNBERT && !cfg->layer_global[l] ? cfg->local_attention / 2 : 0;
}

// ModernBertConfig's JSON as transformers 5 writes it (layer_types, rope_parameters), with
// transformers 4's global_attn_every_n_layers and thetas beside them, so that both read it.
static json_t *modernbert_config_to_json(const bert_config *c) {
    json_t *types = json_array();
    int every = 0;  // the n of global_attn_every_n_layers that gives layer_types, if one does
    for (int n = 1; n <= c->num_hidden_layers && !every; n++) {
        int same = 1;
        for (int l = 0; l < c->num_hidden_layers; l++) same &= c->layer_global[l] == (l % n == 0);
        if (same) every = n;
    }
    for (int l = 0; l < c->num_hidden_layers; l++)
        json_array_append_new(types, json_string(c->layer_global[l] ? "full_attention" : "sliding_attention"));
    json_t *obj = json_pack(
        "{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:s, s:f, s:b, s:b, s:b, s:b, s:b, "
        "s:f, s:f, s:f, s:f, s:f, s:i, s:o, s:b}",
        "architectures", "ModernBertForMaskedLM", "model_type", "modernbert", "vocab_size", c->vocab_size,
        "hidden_size", c->hidden_size, "num_hidden_layers", c->num_hidden_layers, "num_attention_heads",
        c->num_attention_heads, "intermediate_size", c->intermediate_size, "max_position_embeddings",
        c->max_position_embeddings, "pad_token_id", c->pad_token_id, "cls_token_id", c->cls_token_id,
        "sep_token_id", c->sep_token_id, "bos_token_id", c->bos_token_id, "eos_token_id", c->eos_token_id,
        "hidden_activation", c->hidden_act, "classifier_activation", c->classifier_activation, "norm_eps",
        c->layer_norm_eps, "norm_bias", c->norm_bias, "attention_bias", c->attention_bias, "mlp_bias", c->mlp_bias,
        "classifier_bias", c->classifier_bias, "decoder_bias", c->decoder_bias, "embedding_dropout",
        c->embedding_dropout, "attention_dropout", c->attention_probs_dropout_prob, "mlp_dropout", c->mlp_dropout,
        "initializer_range", c->initializer_range, "initializer_cutoff_factor", c->initializer_cutoff_factor,
        "local_attention", c->local_attention, "layer_types", types, "tie_word_embeddings", 1);
    json_object_set_new(obj, "rope_parameters",
                        json_pack("{s:{s:s, s:f}, s:{s:s, s:f}}", "full_attention", "rope_type", "default",
                                  "rope_theta", c->global_rope_theta, "sliding_attention", "rope_type", "default",
                                  "rope_theta", c->local_rope_theta));
    if (every) {
        json_object_set_new(obj, "global_attn_every_n_layers", json_integer(every));
        json_object_set_new(obj, "global_rope_theta", json_real(c->global_rope_theta));
        json_object_set_new(obj, "local_rope_theta", json_real(c->local_rope_theta));
    }
    return obj;
}


json_t *bert_config_to_json(const bert_config *cfg) {
    if (cfg->arch == MODEL_MODERNBERT) return modernbert_config_to_json(cfg);
    return json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:s, s:s}",
                     "architectures", bert_architecture(cfg), "model_type", "bert", "vocab_size", cfg->vocab_size,
                     "hidden_size", cfg->hidden_size, "num_hidden_layers", cfg->num_hidden_layers,
                     "num_attention_heads", cfg->num_attention_heads, "intermediate_size",
                     cfg->intermediate_size, "max_position_embeddings", cfg->max_position_embeddings,
                     "type_vocab_size", cfg->type_vocab_size, "pad_token_id", cfg->pad_token_id,
                     "hidden_dropout_prob", cfg->hidden_dropout_prob, "attention_probs_dropout_prob",
                     cfg->attention_probs_dropout_prob, "initializer_range", cfg->initializer_range,
                     "layer_norm_eps", cfg->layer_norm_eps, "hidden_act", cfg->hidden_act, "position_embedding_type",
                     "absolute");
}

json_t *train_config_to_json(const train_config *t) {
    json_t *obj = json_object();
    for (const field_t *f = train_fields; f->name; f++) {
        const char *p = (const char *)t + f->offset;
        json_t *v = NULL;
        if (f->kind == FIELD_INT) v = json_integer(*(const int *)p);
        else if (f->kind == FIELD_REAL) v = json_real(*(const double *)p);
        else if (f->kind == FIELD_CHOICE || f->kind == FIELD_PATH) v = json_string(p);
        if (v) json_object_set_new(obj, f->name, v);
    }
    return obj;
}

json_t *train_config_defaults_json(void) {
    train_config t;
    memset(&t, 0, sizeof t);
    set_defaults(&t, train_fields);
    return train_config_to_json(&t);
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

// `rel` as seen from the current directory when it is relative to the directory of the
// config file `config_path`: that directory joined to it (absolute paths stay).
static void relative_to_config(const char *config_path, const char *rel, char *out, size_t size) {
    const char *slash = strrchr(config_path, '/');
    int n;
    if (rel[0] == '/' || !rel[0] || !slash) n = snprintf(out, size, "%s", rel);
    else n = snprintf(out, size, "%.*s/%s", (int)(slash - config_path), config_path, rel);
    if (n < 0 || (size_t)n >= size) fatal("%s: the path '%s' is too long relative to the config file", config_path, rel);
}

// The path fields of section `obj` as read from the config file, made relative to the current
// directory (each comma-separated entry of a list). Values of another type are left to
// read_section's error.
static void resolve_paths(json_t *obj, const field_t *fields, const char *config_path) {
    if (!json_is_object(obj)) return;
    for (const field_t *f = fields; f->name; f++) {
        json_t *value = json_object_get(obj, f->name);
        if (f->kind != FIELD_PATH || !json_is_string(value)) continue;
        const char *text = json_string_value(value);
        size_t room = strlen(config_path) + strlen(text) + 2, size = (strlen(text) + 1) * room;
        char *out = xcalloc(size, 1), *rel = xcalloc(room, 1), *entry = xcalloc(room, 1);
        size_t used = 0;
        for (const char *p = text;;) {
            size_t len = strcspn(p, ",");
            snprintf(rel, room, "%.*s", (int)len, p);
            relative_to_config(config_path, rel, entry, room);
            used += (size_t)snprintf(out + used, size - used, "%s%s", p == text ? "" : ",", entry);
            if (!p[len]) break;
            p += len + 1;
        }
        json_object_set_new(obj, f->name, json_string(out));
        free(rel);
        free(entry);
        free(out);
    }
}

void run_config_read(run_config *cfg, const char *path, int n_overrides, char **overrides, int world_size) {
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
        char model_path[2048];
        relative_to_config(path, json_string_value(model), model_path, sizeof model_path);
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
    resolve_paths(json_object_get(root, "train"), train_fields, path);  // the file's; --set values stay as given
    for (int i = 0; i < n_overrides; i++) apply_override(root, overrides[i], path);
    bert_config_from_json(&cfg->model, model, where);
    if (cfg->model.arch == MODEL_BERT && cfg->model.type_vocab_size < 2)
        fatal("%s: field 'type_vocab_size' = %d: pretraining gives sentence A segment id 0 and sentence B 1, so it "
              "must be at least 2", where, cfg->model.type_vocab_size);

    set_defaults(&cfg->train, train_fields);
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
    if (cfg->model.arch == MODEL_MODERNBERT) {
        // A ModernBERT has the masked LM only: objective mlm, whether said or left out.
        json_t *objective = json_object_get(json_object_get(root, "train"), "objective");
        if (objective && strcmp(t->objective, "mlm") != 0)
            fatal("%s: field 'objective' = \"%s\": a ModernBERT (%s) has no next-sentence head; set \"mlm\" or leave "
                  "it out", where, t->objective, bert_architecture(&cfg->model));
        snprintf(t->objective, sizeof t->objective, "mlm");
    }
    cfg->model.mlm_only = !strcmp(t->objective, "mlm");
    if (cfg->train.seq_length > cfg->model.max_position_embeddings)
        fatal("%s: field 'seq_length' = %d exceeds the model's max_position_embeddings = %d", where,
              cfg->train.seq_length, cfg->model.max_position_embeddings);
    // A rate that masks more positions than a full row has besides [CLS] and [SEP]: no
    // max_predictions_per_seq can hold it (the two checks below would each send to the other).
    if (t->dynamic_masking && (int)nearbyint(t->seq_length * t->mask_prob) > t->seq_length - 2)
        fatal("%s: field 'mask_prob' = %g masks %d positions of a full row of seq_length = %d tokens, more than the "
              "%d that are not [CLS] and [SEP]: lower mask_prob below %.4f", where, t->mask_prob,
              (int)nearbyint(t->seq_length * t->mask_prob), t->seq_length, t->seq_length - 2,
              (t->seq_length - 1.5) / t->seq_length);
    if (cfg->train.max_predictions_per_seq > cfg->train.seq_length - 2)
        fatal("%s: field 'max_predictions_per_seq' = %d must leave room for [CLS] and [SEP] in seq_length = %d",
              where, cfg->train.max_predictions_per_seq, cfg->train.seq_length);
    // The rate of dynamic masking: stored masks have prep's, and a row masks round(len x rate)
    // positions (data/masking.h), which must fit max_predictions_per_seq or the rate would be
    // cut silently.
    if (t->mask_prob != MASK_PROB_DEFAULT && !t->dynamic_masking)
        fatal("%s: field 'mask_prob' = %g sets the rate of dynamic masking, which dynamic_masking = 0 leaves off "
              "(the shards' stored masks keep the rate bertpre prep --masked-lm-prob gave them): set "
              "dynamic_masking 1", where, t->mask_prob);
    if (t->whole_word_mask && (!t->dynamic_masking || !t->tokenizer[0]))
        fatal("%s: field 'whole_word_mask' = 1 needs dynamic_masking = 1 and a train.tokenizer (its pieces say where "
              "words start; the shards' stored masks keep what bertpre prep --whole-word-mask chose)", where);
    if (t->dynamic_masking && (int)nearbyint(t->seq_length * t->mask_prob) > t->max_predictions_per_seq)
        fatal("%s: field 'max_predictions_per_seq' = %d is below the %d positions that mask_prob = %g masks in a "
              "row of seq_length = %d tokens: raise it to %d (or lower mask_prob)", where,
              t->max_predictions_per_seq, (int)nearbyint(t->seq_length * t->mask_prob), t->mask_prob,
              t->seq_length, (int)nearbyint(t->seq_length * t->mask_prob));
    if (t->eval_every && !t->eval_data[0])
        fatal("%s: field 'eval_every' = %d evaluates train.eval_data, which is not set", where, t->eval_every);
    json_decref(root);
}

int config_field_doc_get(const char *section, int i, config_field_doc *d) {
    const field_t *fields = !strcmp(section, "model")        ? bert_fields
                            : !strcmp(section, "modernbert") ? modernbert_fields
                                                             : train_fields;
    for (int k = 0; k < i; k++)
        if (!fields[k].name) return 0;
    const field_t *f = &fields[i];
    if (!f->name) return 0;
    static const char *const types[] = {"integer", "number", "choice", "path", "ignored", "boolean", "boolean", ""};
    *d = (config_field_doc){.name = f->name, .help = f->help,
                            .type = f->kind == FIELD_CUSTOM ? f->choices : types[f->kind]};
    if (f->kind == FIELD_INT || f->kind == FIELD_REAL) {
        if (f->max >= 2147483647.0) snprintf(d->range, sizeof d->range, ">= %.15g", f->min);
        else snprintf(d->range, sizeof d->range, "%.15g..%.15g", f->min, f->max);
        if (f->def_text) snprintf(d->def, sizeof d->def, "%s", f->def_text);
        else snprintf(d->def, sizeof d->def, "%.15g", f->def);
    } else if (f->kind == FIELD_CHOICE) {
        snprintf(d->range, sizeof d->range, "%s", f->choices);
        snprintf(d->def, sizeof d->def, "%s", f->def_text);
    } else if (f->kind == FIELD_PATH) {
        snprintf(d->def, sizeof d->def, "none");
    } else if (f->kind == FIELD_FIXED_BOOL) {
        snprintf(d->range, sizeof d->range, "%s only", f->def_text);
        snprintf(d->def, sizeof d->def, "%s", f->def_text);
    } else if (f->kind == FIELD_BOOL || f->kind == FIELD_CUSTOM) {
        snprintf(d->def, sizeof d->def, "%s", f->def_text);
    } else if (f->kind == FIELD_IGNORED && f->def_text) {  // NOTED
        d->type = "noted";
        snprintf(d->range, sizeof d->range, "any (a note unless \"%s\")", f->def_text);
    }
    return 1;
}
