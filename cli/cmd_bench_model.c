// `bertpre bench model CONFIG`: the roofline model of one training step on a named GPU
// (engine/roofline.h): every kernel launch of a micro-batch with its FLOPs, minimum DRAM
// bytes, instruction estimate and predicted time; totals, step time, sequences/s and MFU.
// Nothing runs on a GPU: the engine's own forward, backward and optimizer step are driven
// through a recording backend.
#include <stdio.h>
#include <string.h>
#include <jansson.h>
#include "cli/commands.h"
#include "cli/options.h"
#include "engine/config.h"
#include "engine/optim.h"
#include "engine/roofline.h"
#include "kernels/common/check.h"

static const char *about_bench_model =
    "Predicts one training step from the op sequence the engine runs (a roofline model).\n"
    "CONFIG: a training config (model + train sections) or a model config (BertConfig).";

int cmd_bench_model(int argc, char **argv) {
    const char *config = NULL, *gpu_key = "h100";
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
        {"--by-kernel", CLI_FLAG, &by_kernel, NULL, .help = "one line per kernel and shape instead of every launch"},
        {"--tsv", CLI_FLAG, &tsv, NULL, .help = "every launch tab-separated at full precision (for scripts)"},
        {NULL},
    };
    const cli_command command = {"bench model", "bench model CONFIG [options]", about_bench_model, NULL, options,
                                 "CONFIG", 1, 1};
    char **operands = xcalloc((size_t)argc + 1, sizeof(char *));
    int n_operands = 0;
    if (cli_parse(&command, argc, argv, operands, &n_operands)) return 0;
    config = operands[0];
    const roofline_gpu *gpu = roofline_gpu_find(gpu_key);
    if (!gpu) fatal("bench model: option --gpu: '%s' is not one of %s", gpu_key, roofline_gpu_keys());

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

    roofline_result r;
    roofline_run(&r, &rc.model, B, T, P, accumulation, gpu, opt);
    roofline_print(&r, by_kernel, tsv, stdout);
    roofline_free(&r);
    return 0;
}
