// `bertpre bench model CONFIG`: the roofline model of one training step on a named GPU
// (engine/roofline.h): every kernel launch of a micro-batch with its FLOPs, minimum DRAM
// bytes, instruction estimate and predicted time; totals, step time, sequences/s and MFU.
// Nothing runs on a GPU: the engine's own forward, backward and optimizer step are driven
// through a recording backend. With a length distribution (--lengths SHARDS or
// --length-histogram FILE) the unpadded step is predicted beside the padded one.
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "bertpre_config.h"
#include "cli/commands.h"
#include "data/synthetic.h"
#include "cli/options.h"
#include "engine/config.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "engine/roofline.h"
#include "engine/train.h"
#include "kernels/common/check.h"
#if BERTPRE_HAVE_HDF5
#include "data/loader.h"
#endif

// Lengths of every row of the shards of `spec` (the loader's spec: files, directories, globs),
// each the count of ones in its input_mask; the shards must have sequence length T.
static void lengths_from_shards(roofline_lengths *h, const char *spec, int T) {
#if BERTPRE_HAVE_HDF5
    loader_options o = {.batch_size = 1, .world_size = 1, .vocab_size = 1 << 30, .seq_length = T};
    loader *l = loader_open(spec, &o);
    batch_t b;
    batch_alloc(&b, 1, T, loader_max_predictions(l));
    h->T = T;
    h->count = xcalloc((size_t)T + 1, sizeof(long));
    h->rows = loader_samples(l);
    for (long i = 0; i < h->rows; i++) {  // in file order (shuffle off): every row once
        loader_next_batch(l, &b);
        int len = 0;
        for (int t = 0; t < T; t++) len += b.input_mask[t] != 0;
        h->count[len]++;
    }
    batch_free(&b);
    loader_close(l);
#else
    (void)h, (void)T;
    fatal("bench model: option --lengths '%s': this bertpre was built without HDF5 (install libhdf5-dev and "
          "rebuild), or give a --length-histogram file", spec);
#endif
}

// A histogram file (docs/PERFORMANCE.md, "Unpadded"): a line "LENGTH COUNT" per length, two
// non-negative integers, LENGTH at most T and named once; '#' starts a comment; blank lines
// are ignored; at least one row in all.
static void lengths_from_histogram(roofline_lengths *h, const char *path, int T) {
    FILE *f = fopen(path, "r");
    if (!f) fatal("%s: cannot open the length histogram: %s", path, strerror(errno));
    h->T = T;
    h->count = xcalloc((size_t)T + 1, sizeof(long));
    h->rows = 0;
    char *seen = xcalloc((size_t)T + 1, 1);
    char line[4096];
    for (int no = 1; fgets(line, sizeof line, f); no++) {
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p) continue;
        char *end;
        errno = 0;
        long len = strtol(p, &end, 10);
        int ok = end != p && errno == 0 && isspace((unsigned char)*end);
        char *q = end;
        errno = 0;
        long count = ok ? strtol(q, &end, 10) : 0;
        ok = ok && end != q && errno == 0;
        while (ok && isspace((unsigned char)*end)) end++;
        if (!ok || *end) {
            char *nl = strchr(p, '\n');
            if (nl) *nl = 0;
            fatal("%s: line %d: '%s' is not 'LENGTH COUNT' (two integers)", path, no, p);
        }
        if (len < 0 || len > T) fatal("%s: line %d: length %ld is outside [0, seq %d]", path, no, len, T);
        if (count < 0) fatal("%s: line %d: count %ld of length %ld is negative", path, no, count, len);
        if (seen[len]) fatal("%s: line %d: length %ld appears a second time", path, no, len);
        seen[len] = 1;
        h->count[len] = count;
        h->rows += count;
    }
    free(seen);
    fclose(f);
    if (h->rows <= 0) fatal("%s: the length histogram holds no row", path);
}

static const char *about_bench_model =
    "Predicts one training step from the op sequence the engine runs (a roofline model).\n"
    "CONFIG: a training config (model + train sections) or a model config (BertConfig).";

int cmd_bench_model(int argc, char **argv) {
    const char *config = NULL, *gpu_key = "h100", *lengths = NULL, *histogram = NULL;
    roofline_options opt = roofline_defaults();
    int B = 0, T = 0, P = -1, accumulation = 0, by_kernel = 0, tsv = 0;
    const cli_option options[] = {
        {"--gpu", CLI_STRING, &gpu_key, "NAME", .help = "published peaks of this GPU (h100, h200, a100)"},
        {"--micro-batch", CLI_INT, &B, "N", .help = "sequences per micro-batch", 1, 1 << 16,
         .shown_default = "train.micro_batch_size, else 8"},
        {"--seq", CLI_INT, &T, "N", .help = "sequence length", 1, 1 << 16,
         .shown_default = "train.seq_length, else 128"},
        {"--predictions", CLI_INT, &P, "N", .help = "masked positions per sequence, all present", 0, 1 << 16,
         .shown_default = "train.max_predictions_per_seq, else 20"},
        {"--accumulation", CLI_INT, &accumulation, "N", .help = "micro-batches per optimizer step", 1, 1 << 24,
         .shown_default = "the config's, else 1"},
        {"--gemm-efficiency", CLI_REAL, &opt.gemm_eff, "F", .help = "fraction of the tensor peak GEMMs reach", 1e-3,
         1.0},
        {"--dram-efficiency", CLI_REAL, &opt.dram_eff, "F",
         .help = "fraction of the DRAM bandwidth streaming kernels reach", 1e-3, 1.0},
        {"--sync-us", CLI_REAL, &opt.sync_us, "F", .help = "cost of one host round trip in microseconds", 0.0, 1e6},
        {"--baseline", CLI_FLAG, &opt.baseline, NULL, .help = "cost the unfused kernels the fused ones replaced"},
        {"--bias-grad-epilogue", CLI_FLAG, &opt.bias_grad_epilogue, NULL,
         .help = "the bias gradients in the weight-gradient GEMMs' BGRADB epilogue (BERTPRE_BIAS_GRAD=epilogue)"},
        {"--by-kernel", CLI_FLAG, &by_kernel, NULL, .help = "one line per kernel and shape instead of every launch"},
        {"--tsv", CLI_FLAG, &tsv, NULL, .help = "every launch tab-separated at full precision (for scripts)"},
        {"--lengths", CLI_STRING, &lengths, "SHARDS",
         .help = "predict the unpadded step too, for the lengths (ones of input_mask) of these shards"},
        {"--length-histogram", CLI_STRING, &histogram, "FILE",
         .help = "likewise from a histogram file: lines 'LENGTH COUNT'"},
        {NULL},
    };
    const cli_command command = {"bench model", "bench model CONFIG [options]", about_bench_model, NULL, options,
                                 "CONFIG", 1, 1};
    char **operands = xcalloc((size_t)argc + 1, sizeof(char *));
    int n_operands = 0;
    if (cli_parse(&command, argc, argv, operands, &n_operands)) return 0;
    config = operands[0];
    const gpu_spec *gpu = gpu_by_key(gpu_key);
    if (!gpu) fatal("bench model: option --gpu: '%s' is not one of %s", gpu_key, gpu_keys());

    // A training config has a "model" or "train" section; anything else is read as a BertConfig.
    json_error_t err;
    json_t *root = json_load_file(config, 0, &err);
    if (!root) fatal("%s: line %d: %s", config, err.line, err.text);
    int training = json_is_object(root) && (json_object_get(root, "model") || json_object_get(root, "train"));
    json_decref(root);
    run_config rc;
    memset(&rc, 0, sizeof rc);
    if (training) {
        run_config_load(&rc, config, 0, NULL, 1);
        opt.optimizer = optim_kind_of(rc.train.optimizer);
        if (!strcmp(rc.train.precision, "fp32"))
            fatal("%s: field 'train.precision' = fp32: the roofline model covers fp16 and bf16 activations", config);
    } else {
        bert_config_load(&rc.model, config);
        rc.train.micro_batch_size = 8, rc.train.seq_length = 128, rc.train.max_predictions_per_seq = 20;
        rc.train.accumulation_steps = 1;
    }
    if (!B) B = rc.train.micro_batch_size;
    if (!T) T = rc.train.seq_length;
    if (P < 0) P = rc.train.max_predictions_per_seq;
    if (!accumulation) accumulation = rc.train.accumulation_steps;
    if (T > rc.model.max_position_embeddings)
        fatal("bench model: --seq %d exceeds %s's max_position_embeddings = %d", T, config,
              rc.model.max_position_embeddings);
    if (P >= T) fatal("bench model: %d masked positions per sequence do not fit seq %d", P, T);

    if (lengths && histogram) fatal("bench model: give --lengths or --length-histogram, not both");
    roofline_lengths h = {0};
    if (lengths) lengths_from_shards(&h, lengths, T);
    if (histogram) lengths_from_histogram(&h, histogram, T);

    roofline_result r;
    roofline_run(&r, &rc.model, B, T, P, accumulation, gpu, opt);
    roofline_print(&r, by_kernel, tsv, stdout);
    if (rc.model.arch == MODEL_BERT) {
        // Both GELU forms: the config's, then the other (exact <-> tanh, whose bias + GELU runs
        // in the FFN GEMMs' epilogues), with the same shapes. (ModernBERT's GeGLU has one
        // kernel for both.)
        int tanh_act = bert_gelu_kind(&rc.model) == GELU_TANH;
        bert_config other = rc.model;
        snprintf(other.hidden_act, sizeof other.hidden_act, "%s", tanh_act ? "gelu" : "gelu_new");
        roofline_result o;
        roofline_run(&o, &other, B, T, P, accumulation, gpu, opt);
        roofline_print_gelu_forms(&r, rc.model.hidden_act[0] ? rc.model.hidden_act : "gelu", &o, other.hidden_act,
                                  tsv, stdout);
        roofline_free(&o);
    }
    if (h.count) {
        roofline_result u;
        roofline_run_unpadded(&u, &rc.model, B, T, P, accumulation, gpu, opt, &h);
        roofline_print_unpadded(&r, &u, &h, tsv, stdout);
        roofline_free(&u);
        free(h.count);
    }
    roofline_free(&r);
    return 0;
}
