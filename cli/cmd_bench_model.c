// `bertpre bench model CONFIG`: the roofline model of one training step on a named GPU
// (engine/roofline.h): every kernel launch of a micro-batch with its FLOPs, minimum DRAM
// bytes, instruction estimate and predicted time; totals, step time, sequences/s and MFU.
// Nothing runs on a GPU: the engine's own forward, backward and optimizer step are driven
// through a recording backend.
#include <stdio.h>
#include <string.h>
#include <jansson.h>
#include "cli/commands.h"
#include "engine/config.h"
#include "engine/roofline.h"
#include "kernels/common/check.h"

static const char *usage_bench_model =
    "usage: bertpre bench model CONFIG [options]\n"
    "\n"
    "Predicts one training step from the op sequence the engine runs (a roofline model).\n"
    "CONFIG: a training config (model + train sections) or a model config (BertConfig).\n"
    "  --gpu h100|h200|a100       published peaks of this GPU (default h100)\n"
    "  --micro-batch N            sequences per micro-batch (default: train.micro_batch_size, else 8)\n"
    "  --seq N                    sequence length (default: train.seq_length, else 128)\n"
    "  --predictions N            masked positions per sequence, all present (default:\n"
    "                             train.max_predictions_per_seq, else 20)\n"
    "  --accumulation N           micro-batches per optimizer step (default: the config's, else 1)\n"
    "  --gemm-efficiency F        fraction of the tensor peak GEMMs reach (default 0.70)\n"
    "  --dram-efficiency F        fraction of the DRAM bandwidth streaming kernels reach (default 0.80)\n"
    "  --sync-us F                cost of one host round trip in microseconds (default 10)\n"
    "  --baseline                 cost the unfused kernels the fused ones replaced (the 'before')\n"
    "  --by-kernel                one line per kernel and shape instead of every launch\n"
    "  --tsv                      every launch tab-separated at full precision (for scripts)\n";

int cmd_bench_model(int argc, char **argv) {
    const char *config = NULL;
    const roofline_gpu *gpu = roofline_gpu_find("h100");
    roofline_options opt = roofline_defaults();
    int B = 0, T = 0, P = -1, accumulation = 0, by_kernel = 0, tsv = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_bench_model, stdout);
            return 0;
        } else if (!strcmp(a, "--gpu")) {
            const char *v = cli_value(argc, argv, &i);
            if (!(gpu = roofline_gpu_find(v)))
                fatal("bench model: option --gpu: '%s' is not one of %s", v, roofline_gpu_keys());
        } else if (!strcmp(a, "--micro-batch")) B = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 16);
        else if (!strcmp(a, "--seq")) T = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 16);
        else if (!strcmp(a, "--predictions")) P = cli_int(a, cli_value(argc, argv, &i), 0, 1 << 16);
        else if (!strcmp(a, "--accumulation")) accumulation = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 24);
        else if (!strcmp(a, "--gemm-efficiency")) opt.gemm_eff = cli_real(a, cli_value(argc, argv, &i), 1e-3, 1.0);
        else if (!strcmp(a, "--dram-efficiency")) opt.dram_eff = cli_real(a, cli_value(argc, argv, &i), 1e-3, 1.0);
        else if (!strcmp(a, "--sync-us")) opt.sync_us = cli_real(a, cli_value(argc, argv, &i), 0.0, 1e6);
        else if (!strcmp(a, "--baseline")) opt.baseline = 1;
        else if (!strcmp(a, "--by-kernel")) by_kernel = 1;
        else if (!strcmp(a, "--tsv")) tsv = 1;
        else if (a[0] == '-') fatal("bench model: unknown option '%s'\n%s", a, usage_bench_model);
        else if (config) fatal("bench model: one CONFIG expected, got '%s' and '%s'", config, a);
        else config = a;
    }
    if (!config) fatal("bench model: CONFIG is required\n%s", usage_bench_model);

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

    roofline_result r;
    roofline_run(&r, &rc.model, B, T, P, accumulation, gpu, opt);
    roofline_print(&r, by_kernel, tsv, stdout);
    roofline_free(&r);
    return 0;
}
