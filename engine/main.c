// bertpre: command-line entry. Subcommands are added as the engine grows; each has --help.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "backend.h"
#include "commands.h"
#include "common/check.h"
#include "config.h"
#include "lamb.h"
#include "model.h"
#include "synthetic.h"
#include "train.h"
#include "train_data.h"

static const char *usage_main =
    "usage: bertpre <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG [--set section.field=value ...]   pretrain BertForPreTraining\n"
    "  tokenizer train|encode|decode|info            SentencePiece model with BERT's special tokens\n"
    "  prep --tokenizer MODEL --output DIR INPUT...   text to HDF5 shards (NSP pairs, masked LM)\n"
    "  bench data ...                                 prep MB/s and loader batches/s\n"
    "\n"
    "Run 'bertpre <command> --help' for the options of a command.\n";

static const char *usage_train =
    "usage: bertpre train CONFIG [--set section.field=value ...]\n"
    "\n"
    "CONFIG is JSON: {\"model\": BertConfig object or path, \"train\": {...}}.\n"
    "train fields: backend (auto|cpu), seed, micro_batch_size, global_batch_size,\n"
    "  seq_length, max_predictions_per_seq, steps, learning_rate, log_every,\n"
    "  data, eval_data, eval_batches, tokenizer, dynamic_masking.\n"
    "global_batch_size / micro_batch_size micro-batches are accumulated per step.\n"
    "The loop runs LAMB on the CPU backend with linear warmup (10% of the steps) and\n"
    "polynomial decay (power 0.5), on HDF5 shards (train.data: file, directory or glob) or,\n"
    "without train.data, on synthetic batches (see data/synthetic.h).\n";

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmd_train(int argc, char **argv) {
    const char *path = NULL;
    char *overrides[256];
    int n_overrides = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_train, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--set")) {
            if (i + 1 >= argc) fatal("--set needs section.field=value");
            if (n_overrides == 256) fatal("too many --set options (at most 256)");
            overrides[n_overrides++] = argv[++i];
        } else if (argv[i][0] == '-') {
            fatal("train: unknown option '%s'\n%s", argv[i], usage_train);
        } else if (path) {
            fatal("train: more than one CONFIG given ('%s' and '%s')", path, argv[i]);
        } else {
            path = argv[i];
        }
    }
    if (!path) fatal("train: missing CONFIG\n%s", usage_train);
    run_config cfg;
    run_config_load(&cfg, path, n_overrides, overrides);
    const train_config *t = &cfg.train;
    const backend_t *be = &backend_cpu;  // "auto" resolves to the only backend built so far

    bert_model model;
    bert_init(&model, &cfg.model, be, t->micro_batch_size, t->seq_length, t->max_predictions_per_seq);
    bert_init_weights(&model, (uint64_t)t->seed);
    lamb_state opt;
    lamb_init(&opt, model.n_params);
    int accum = t->accumulation_steps;
    train_data *data = train_data_open(&cfg, 0, 1);
    batch_t *micro = xcalloc(accum, sizeof(batch_t));
    for (int k = 0; k < accum; k++)
        batch_alloc(&micro[k], t->micro_batch_size, t->seq_length, t->max_predictions_per_seq);
    printf("bertpre train: %s on %s, %zu parameters, L=%d C=%d NH=%d, global batch %d = %d x %d accumulated, "
           "seq %d, %d steps\n",
           path, be->name, model.n_params, cfg.model.num_hidden_layers, cfg.model.hidden_size,
           cfg.model.num_attention_heads, t->global_batch_size, t->micro_batch_size, accum, t->seq_length, t->steps);
    printf("data: %s\n", train_data_describe(data));
    int warmup = t->steps / 10 > 0 ? t->steps / 10 : 1;
    double start = now_seconds(), mlm_loss = 0.0, nsp_loss = 0.0;
    long correct = 0, predicted = 0, sequences = 0;
    for (int step = 0; step < t->steps; step++) {
        train_data_fill(data, &cfg, micro, accum, step);
        double progress = (double)step / t->steps;
        double lr = step < warmup ? t->learning_rate * (step + 1) / warmup
                                  : t->learning_rate * sqrt(1.0 - progress);
        step_stats s = train_step(&model, &opt, micro, accum, lr, 1, (uint64_t)t->seed, (uint32_t)step);
        mlm_loss += s.mlm_loss;
        nsp_loss += s.nsp_loss;
        correct += s.mlm_correct;
        predicted += s.n_pred;
        sequences += s.sequences;
        if ((step + 1) % t->log_every == 0 || step + 1 == t->steps) {
            int n = (step + 1) % t->log_every ? (step + 1) % t->log_every : t->log_every;
            double elapsed = now_seconds() - start;
            printf("step %5d/%d | mlm loss %.4f | nsp loss %.4f | mlm acc %.3f | lr %.2e | %.1f seq/s\n", step + 1,
                   t->steps, mlm_loss / n, nsp_loss / n, predicted ? (double)correct / predicted : 0.0, lr,
                   sequences / elapsed);
            fflush(stdout);
            mlm_loss = nsp_loss = 0.0;
            correct = predicted = 0;
        }
    }
    train_data_evaluate(data, &cfg, &model, &micro[0]);
    train_data_close(data);
    for (int k = 0; k < accum; k++) batch_free(&micro[k]);
    free(micro);
    lamb_free(&opt);
    bert_free(&model);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage_main, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(argv[1], "tokenizer")) return cmd_tokenizer(argc - 2, argv + 2);
    if (!strcmp(argv[1], "prep")) return cmd_prep(argc - 2, argv + 2);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 2, argv + 2);
    fprintf(stderr, "bertpre: unknown command '%s'\n%s", argv[1], usage_main);
    return 2;
}
