// bertpre export: a checkpoint as a Hugging Face model directory for fine-tuning.
//   config.json             BertConfig, architectures BertForPreTraining (BertForMaskedLM for a
//                           train.objective mlm run), the real vocab size
//   model.safetensors       every parameter under its transformers name, FP32 or FP16,
//                           __metadata__ {"format": "pt"}; the MLM decoder is tied to the
//                           word embeddings, as transformers saves it
//   tokenizer.json, spiece.model, tokenizer_config.json, special_tokens_map.json
//                           a SentencePiece Unigram or BPE model as the tokenizers library's
//                           tokenizer.json (tokenizer/spm_json.c), which transformers 4 and 5
//                           load as PreTrainedTokenizerFast without the sentencepiece package:
//                           SentencePiece's ids, [CLS] A [SEP] B [SEP] with segment ids 0/1
//                           as prep writes, "a [MASK] b" as a masked word in the data. The
//                           model file rides along for SentencePiece itself.
//                           A model tokenizer.json cannot express (char and word models,
//                           byte fallback, user-defined pieces) gets spiece.model for transformers'
//                           BigBirdTokenizer instead, with a notice: it hands text to
//                           SentencePiece unchanged under transformers 4 (AlbertTokenizer,
//                           the other SentencePiece + [CLS]/[SEP] class, rewrites `` and ''
//                           as " first), needs the sentencepiece package, and transformers 5
//                           rebuilds it without the model's normalization.
//   or tokenizer.json, tokenizer_config.json, special_tokens_map.json
//                           a byte-level BPE tokenizer.json (ModernBERT's), copied as it is,
//                           for PreTrainedTokenizerFast (a ModernBERT's model_input_names
//                           without token_type_ids, which ModernBertForMaskedLM does not take)
//   or vocab.txt, tokenizer.json, tokenizer_config.json, special_tokens_map.json
//                           a WordPiece vocabulary, for BertTokenizer with the casing the
//                           data was tokenized with (do_lower_case, strip_accents); the
//                           tokenizer.json adds the NFC that pretraining applied, which
//                           transformers 4's BertTokenizerFast then applies too (transformers
//                           5's BertTokenizer builds its own normalizer without it).
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kernels/backend.h"
#include "bertpre_config.h"
#include "engine/checkpoint.h"
#include "cli/commands.h"
#include "kernels/common/check.h"
#include "engine/model.h"
#include "kernels/common/files.h"
#include "engine/safetensors.h"
#include "tokenizer/tokenizer.h"

static const char *about_export =
    "Writes DIR/config.json, DIR/model.safetensors and the tokenizer files, so that\n"
    "transformers' AutoModelForPreTraining (AutoModelForMaskedLM for a model trained with\n"
    "train.objective mlm, a BertForMaskedLM) and AutoTokenizer load DIR. CHECKPOINT is a\n"
    "checkpoint directory, or a train.checkpoint_dir (its newest complete checkpoint).\n";

// IEEE binary16 with round-to-nearest-even, as PyTorch's .half() rounds.
static uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, mant = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        int shift = 14 - e;
        uint32_t half = mant >> shift, rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = (uint32_t)e << 10 | mant >> 13, rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1))) half++;  // may carry into the exponent: correct
    return (uint16_t)(sign | half);
}

// The directory being written (a temporary sibling of --out): removed before an error exits.
static char staging[1200];

static void write_failed(const char *path, const char *what) {
    staged_dir_abort(staging);
    fatal("export: %s '%s' failed: %s (nothing was written to --out)", what, path, strerror(errno));
}

// Numbers in their shortest exact form (0.05, not 0.050000000000000003).
static void write_json(const char *path, json_t *obj) {
    if (write_json_file(path, obj, JSON_INDENT(2)) != 0) write_failed(path, "writing");
}

// The tokenizer's special pieces and kind, read and checked before anything is written.
typedef struct {
    const char *model;
    char piece[5][128];  // padding, unknown, [CLS], [SEP], [MASK]
    int wordpiece, bpe, lower, strip;
    int vocab_size;
    json_t *fast;        // SentencePiece: the tokenizer.json, or NULL when it cannot be written
    char why_not[512];   // why not
} tokenizer_pieces;

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    check_file(in, from, "opening the tokenizer model");
    FILE *out = fopen(to, "wb");
    if (!out) write_failed(to, "creating");
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) write_failed(to, "writing");
    if (ferror(in)) write_failed(from, "reading");
    fclose(in);
    if (close_written(out) != 0) write_failed(to, "writing");
}

// The special pieces come from the model itself (tokenizer_specials), so tokenizer_config.json
// names exactly the tokens whose ids prep wrote.
static void read_tokenizer(tokenizer_pieces *t, const char *model, const tokenizer_options *opt) {
    t->model = model;
    tokenizer *tok;
    tokenizer_status status = tokenizer_load_with(&tok, model, opt);
    if (!status.ok) fatal("export: tokenizer %s: %s", model, status.message);
    char casing[1024];
    if (tokenizer_casing_warning(tok, model, casing, sizeof casing))
        fprintf(stderr, "bertpre: warning: export: %s\n", casing);
    tokenizer_special_ids ids = tokenizer_specials(tok);
    int id[5] = {ids.pad, ids.unk, ids.cls, ids.sep, ids.mask};
    static const char *what[5] = {"padding", "unknown", "[CLS]", "[SEP]", "[MASK]"};
    for (int i = 0; i < 5; i++) {
        if (id[i] < 0) fatal("export: tokenizer %s has no %s token; bertpre's data needs all five", model, what[i]);
        status = tokenizer_id_to_piece(tok, id[i], t->piece[i], sizeof t->piece[i]);
        if (!status.ok) fatal("export: tokenizer %s: %s", model, status.message);
    }
    t->wordpiece = tokenizer_type(tok) == TOKENIZER_WORDPIECE;
    t->bpe = tokenizer_type(tok) == TOKENIZER_BPE;
    t->lower = tokenizer_lower_case(tok);
    t->strip = tokenizer_strip_accents(tok);
    t->vocab_size = tokenizer_vocab_size(tok);
    status = tokenizer_fast_json(tok, &t->fast);
    snprintf(t->why_not, sizeof t->why_not, "%s", status.message);
    tokenizer_free(tok);
}

// The tokenizer files into dir; returns the name of the model's file. segments: the model
// takes token_type_ids (BERT; not ModernBERT).
static const char *write_tokenizer(const char *dir, const tokenizer_pieces *t, int max_length, int segments) {
    const char(*piece)[128] = t->piece;
    const char *file = t->wordpiece ? "vocab.txt" : t->bpe ? "tokenizer.json" : "spiece.model";
    char path[1300];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    copy_file(t->model, path);  // a BPE tokenizer.json as it is
    if (t->fast && !t->bpe) {
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        write_json(path, t->fast);
    }
    json_t *special = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "bos_token", piece[2], "eos_token", piece[3],
                                "unk_token", piece[1], "sep_token", piece[3], "pad_token", piece[0], "cls_token",
                                piece[2], "mask_token", piece[4]);
    json_t *extra = json_pack("{s:s, s:i, s:[s,s,s]}", "tokenizer_class",
                              t->wordpiece ? "BertTokenizer" : t->fast ? "PreTrainedTokenizerFast" : "BigBirdTokenizer",
                              "model_max_length", max_length,
                              "model_input_names", "input_ids", "token_type_ids", "attention_mask");
    if (!segments) json_array_remove(json_object_get(extra, "model_input_names"), 1);
    if (t->wordpiece) {
        // BERT's special tokens only ([CLS] ... [SEP]), no <s>/</s>; strip_accents null means
        // "as do_lower_case", BertTokenizer's default.
        json_object_del(special, "bos_token");
        json_object_del(special, "eos_token");
        json_object_set_new(extra, "do_lower_case", json_boolean(t->lower));
        json_object_set_new(extra, "strip_accents", t->strip == t->lower ? json_null() : json_boolean(t->strip));
        json_object_set_new(extra, "tokenize_chinese_chars", json_true());
    }
    snprintf(path, sizeof path, "%s/special_tokens_map.json", dir);
    write_json(path, special);
    json_t *config = json_deep_copy(special);
    json_object_update(config, extra);
    json_decref(extra);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    write_json(path, config);
    json_decref(config);
    json_decref(special);
    return file;
}

int cmd_export(int argc, char **argv) {
    const char *out = NULL, *tokenizer = NULL;
    int half = 0;
    cli_casing casing = {0};
    const cli_option options[] = {
        {"--out", CLI_STRING, &out, "DIR", .help = "the Hugging Face model directory to write", .required = 1},
        {"--dtype", CLI_CHOICE, &half, NULL, .help = "the weights' type in model.safetensors", .choices = "fp32|fp16"},
        {"--tokenizer", CLI_STRING, &tokenizer, "MODEL",
         .help = "the SentencePiece FILE.model, WordPiece vocab.txt or BPE tokenizer.json the data was prepared with; without it and "
         "without the checkpoint's train.tokenizer, no tokenizer files are written",
         .shown_default = "the checkpoint's train.tokenizer"},
        CLI_CASING_OPTIONS(casing),
        {NULL},
    };
    const cli_command command = {"export", "export CHECKPOINT --out DIR [--dtype fp32|fp16] [--tokenizer MODEL [casing]]",
                                 about_export, NULL, options, "CHECKPOINT", 1, 1};
    char *operands[1];
    int n = 0;
    if (cli_parse(&command, argc, argv, operands, &n)) return 0;
    tokenizer_options topt;
    cli_tokenizer_options("export", &casing, &topt.lower_case, &topt.strip_accents);
    const char *source = operands[0], *dtype = half ? "fp16" : "fp32";

    // Like import, export never writes over files: an existing directory must be empty. It is
    // checked now, and everything the export needs (the checkpoint, the tokenizer) is read
    // before anything is written; the files go into a temporary sibling of DIR, renamed to DIR
    // when all are written.
    staged_dir_check(out, "export: --out");
    char dir[1200], path[1300];
    cli_checkpoint_dir("export", source, dir, sizeof dir);
    checkpoint c;
    checkpoint_open(&c, dir);
    json_t *train = json_object_get(json_object_get(c.state, "config"), "train");
    const char *trained_with = json_string_value(json_object_get(train, "tokenizer"));
    if (!tokenizer && trained_with && trained_with[0]) {
        if (access(trained_with, R_OK) != 0)
            fatal("export: the checkpoint's train.tokenizer '%s' cannot be read from here; pass --tokenizer PATH",
                  trained_with);
        tokenizer = trained_with;
    }
    tokenizer_pieces pieces;
    if (tokenizer) read_tokenizer(&pieces, tokenizer, &topt);
    // Ids past the model's embedding table would fail in transformers' first forward: refused
    // here as train.tokenizer refuses them.
    if (tokenizer && pieces.vocab_size > c.model.vocab_size)
        fatal("export: tokenizer %s has %d pieces, more than the model's vocab_size = %d (%s): export with the "
              "tokenizer the model was trained with", tokenizer, pieces.vocab_size, c.model.vocab_size, dir);
    bert_model m;
    bert_init(&m, &c.model, &backend_cpu, 1, 1, 1);
    checkpoint_load_weights(&c, &m);
    float *host = xmalloc(m.n_params * sizeof(float));
    m.be->download(host, m.params, m.n_params * sizeof(float));

    staged_dir_begin(out, "export: --out", 0, staging, sizeof staging);
    json_t *config = bert_config_to_json(&c.model);
    json_object_set_new(config, "torch_dtype", json_string(half ? "float16" : "float32"));
    snprintf(path, sizeof path, "%s/config.json", staging);
    write_json(path, config);
    json_decref(config);

    uint16_t *halves = half ? xmalloc(m.n_params * sizeof(uint16_t)) : NULL;
    if (half)
        for (size_t i = 0; i < m.n_params; i++) halves[i] = float_to_half(host[i]);
    st_entry *entries = xcalloc(m.n_tensors, sizeof(st_entry));
    for (int i = 0; i < m.n_tensors; i++) {
        const param_info *p = &m.table[i];
        entries[i] = (st_entry){p->name, half ? "F16" : "F32", p->ndim, {p->shape[0], p->shape[1]},
                                half ? (const void *)(halves + p->offset) : (const void *)(host + p->offset)};
    }
    json_t *meta = json_pack("{s:s}", "format", "pt");
    snprintf(path, sizeof path, "%s/model.safetensors", staging);
    if (st_write_file(path, entries, m.n_tensors, meta) != 0) write_failed(path, "writing");
    json_decref(meta);
    const char *tokenizer_file = tokenizer ? write_tokenizer(staging, &pieces, c.model.max_position_embeddings,
                                                             c.model.arch == MODEL_BERT) : NULL;
    staged_dir_commit(staging, out, "export: --out", 0);
    printf("export: %s -> %s/model.safetensors (%s, %d tensors, %s), %s/config.json\n", dir, out,
           bert_architecture(&c.model), m.n_tensors, dtype, out);
    if (tokenizer) {
        printf("export: tokenizer %s -> %s/%s%s, tokenizer_config.json, special_tokens_map.json\n", tokenizer,
               out, pieces.fast ? "tokenizer.json, " : "", tokenizer_file);
        if (!pieces.wordpiece && !pieces.fast)
            fprintf(stderr, "bertpre: notice: export: no tokenizer.json for %s: %s. transformers converts "
                    "spiece.model (BigBirdTokenizer) when the sentencepiece package is installed; under transformers "
                    "5 that conversion drops the model's normalization, so check its ids against `bertpre tokenizer "
                    "encode` before fine-tuning\n", tokenizer, pieces.why_not);
        json_decref(pieces.fast);
    } else
        printf("export: no --tokenizer given: %s has no tokenizer files\n", out);
    free(entries);
    free(halves);
    free(host);
    bert_free(&m);
    checkpoint_close(&c);
    return 0;
}
