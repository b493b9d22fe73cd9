// bertpre train: reads the config, derives the batch plan (global = micro x accumulation x
// ranks), and runs the pretraining loop: fill the micro-batches, one train_step (forward and
// backward over every micro-batch, one LAMB update) at NVIDIA's learning-rate schedule, and
// every log_every steps a log line and a JSON line with losses, accuracy, rates and ETA;
// checkpoints every train.checkpoint_every steps, at the end, and on SIGTERM / SIGUSR1
// (preemption: the signal only sets a flag, looked at between steps), and resume from one.
#include "cli/cmd_train.h"
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "kernels/backend.h"
#include "bertpre_config.h"
#include "engine/checkpoint.h"
#include "engine/comm.h"
#include "kernels/common/check.h"
#include "engine/config.h"
#include "engine/dist.h"
#include "engine/lamb.h"
#include "engine/model.h"
#include "engine/schedule.h"
#include "engine/setup.h"
#include "data/synthetic.h"
#include "engine/throughput.h"
#include "engine/train.h"
#include "engine/train_data.h"
#include "engine/zero.h"

static const char *usage_train =
    "usage: [mpirun -np N] bertpre train CONFIG [--set section.field=value ...] [--dry-run [--ranks N]]\n"
    "                                     [--resume auto|DIR] [--init-from DIR]\n"
    "\n"
    "CONFIG is JSON: {\"model\": BertConfig object or path, \"train\": {...}}.\n"
    "train fields: backend (auto|cpu|cuda), precision (auto|fp32|fp16|bf16), seed,\n"
    "  micro_batch_size, global_batch_size, seq_length, max_predictions_per_seq, steps,\n"
    "  learning_rate, warmup_proportion, log_every, metrics_file, peak_tflops, loss_scale\n"
    "  (0 = dynamic for fp16, or a static scale), loss_scale_initial, loss_scale_min,\n"
    "  loss_scale_growth_interval, loss_scale_max_skips, phase, checkpoint_dir,\n"
    "  checkpoint_every, keep_checkpoints, steps_this_run, data, eval_data, eval_batches,\n"
    "  tokenizer, dynamic_masking, comm_timeout_s, zero_stage.\n"
    "global_batch_size = micro_batch_size x accumulation steps x ranks.\n"
    "The learning rate follows NVIDIA's BERT schedule: linear warmup over warmup_proportion\n"
    "of the steps, then decay with power 0.5 to zero. Batches come from HDF5 shards\n"
    "(train.data: a file, directory or glob; train.eval_data is evaluated after training) or,\n"
    "without train.data, are synthetic (data/synthetic.h).\n"
    "--dry-run reads and checks the config, prints the plan and exits; --ranks N plans for\n"
    "N ranks instead of the ranks of this launch.\n"
    "--resume auto continues from the newest complete checkpoint in train.checkpoint_dir (or\n"
    "starts at step 0 when there is none); --resume DIR from that checkpoint. --init-from DIR\n"
    "starts a new run from a checkpoint's weights (phase 2 from phase 1, or an import).\n"
    "SIGTERM or SIGUSR1 writes a checkpoint (with train.checkpoint_dir) and exits 0.\n";

static volatile sig_atomic_t stop_signal = 0;
static void on_stop_signal(int signo) { stop_signal = signo; }

// Whether any rank was asked to stop: all ranks must leave the loop at the same step.
static int stop_requested(int world_size) {
    double stop = stop_signal != 0;
    if (world_size > 1) dist_sum_doubles(&stop, 1);
    return stop > 0;
}

// The number in the run of this rank's first micro-batch of step `iteration`: micro-batch k
// of rank r at step s is number (s x ranks + r) x accum + k, for data and dropout alike, so
// the batches of a step do not depend on how it is split over ranks and micro-batches.
static uint32_t first_micro_batch(long iteration, int world_size, int rank, int accum) {
    return ((uint32_t)iteration * (uint32_t)world_size + (uint32_t)rank) * (uint32_t)accum;
}

// Every rank takes part (the data cursors are gathered); rank 0 writes.
static void save_checkpoint(const run_config *cfg, const train_data *data, const bert_model *m,
                            const lamb_state *opt, const loss_scaler *scaler, long applied, long iteration,
                            long skipped, int rank) {
    const train_config *t = &cfg->train;
    int64_t mine[CHECKPOINT_CURSOR_MAX];
    int n = train_data_cursor(data, first_micro_batch(iteration, t->world_size, rank, t->accumulation_steps), mine,
                              CHECKPOINT_CURSOR_MAX);
    train_state s = {.applied = applied, .iteration = iteration, .skipped = skipped, .scaler = *scaler,
                     .world_size = t->world_size, .cursor_len = n};
    s.cursors = xcalloc((size_t)t->world_size * n, sizeof(int64_t));
    dist_gather_int64(mine, n, s.cursors);
    lamb_state gathered;
    const lamb_state *whole = zero_gather((bert_model *)m, opt, &gathered);
    if (rank == 0) {
        char dir[1200];
        checkpoint_save(t->checkpoint_dir, cfg, m, whole, &s, t->keep_checkpoints, dir, sizeof dir);
        printf("checkpoint %s (step %ld)\n", dir, applied);
        fflush(stdout);
    }
    free(s.cursors);
    zero_release(&gathered, whole);
    dist_barrier_untimed();  // the others wait for the write without a timeout
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// How many updates are in warmup (progress n / steps < warmup_proportion, see schedule.h).
static long warmup_updates(const train_config *t) {
    long n = 1;
    while (n < t->steps && (double)n / t->steps < t->warmup_proportion) n++;
    return n - 1;
}

static void print_plan(const run_config *cfg, const char *path, const char *backend_name) {
    const train_config *t = &cfg->train;
    const bert_config *m = &cfg->model;
    printf("bertpre train: %s on %s (%s activations)\n", path, backend_name, t->precision);
    printf("  model: L=%d C=%d NH=%d I=%d V=%d\n", m->num_hidden_layers, m->hidden_size, m->num_attention_heads,
           m->intermediate_size, m->vocab_size);
    printf("  global batch %d = micro-batch %d x %d accumulated x %d rank%s, seq %d, max predictions %d\n",
           t->global_batch_size, t->micro_batch_size, t->accumulation_steps, t->world_size,
           t->world_size == 1 ? "" : "s", t->seq_length, t->max_predictions_per_seq);
    printf("  %d steps, lr %g, warmup %g of the steps (%ld updates), then decay with power 0.5\n", t->steps,
           t->learning_rate, t->warmup_proportion, t->steps ? warmup_updates(t) : 0L);
    double flops = model_flops(m, t->global_batch_size, t->seq_length,
                               (long)t->global_batch_size * t->max_predictions_per_seq);
    printf("  %.4g model TFLOP per step (at most max_predictions masked positions), %.4g sequences in all\n",
           flops * 1e-12, (double)t->global_batch_size * t->steps);
}

// Sums over the steps since the last log line.
typedef struct {
    int steps;
    double mlm_loss, nsp_loss, flops, start;
    long mlm_correct, n_pred, nsp_correct, sequences;
} log_window;

static void log_step(const run_config *cfg, FILE *metrics, const log_window *w, long step, double lr,
                     double loss_scale, long skipped, double peak, double elapsed) {
    const train_config *t = &cfg->train;
    double seconds = now_seconds() - w->start;
    double seq_per_s = w->sequences / seconds, tokens_per_s = seq_per_s * t->seq_length;
    double tflops = w->flops / seconds * 1e-12;
    double mlm_acc = w->n_pred ? (double)w->mlm_correct / w->n_pred : 0.0;
    double nsp_acc = w->sequences ? (double)w->nsp_correct / w->sequences : 0.0;
    double eta = seconds / w->steps * (double)(t->steps - step);
    char peak_text[32] = "";
    if (peak > 0) snprintf(peak_text, sizeof peak_text, " (%.1f%% of peak)", 100.0 * tflops / peak);
    printf("step %5ld/%d | mlm loss %.4f | nsp loss %.4f | mlm acc %.3f | lr %.3e | scale %g | skipped %ld | "
           "%.1f seq/s | %.0f tok/s | %.3g TFLOP/s%s | eta %.0fs\n",
           step, t->steps, w->mlm_loss / w->steps, w->nsp_loss / w->steps, mlm_acc, lr, loss_scale, skipped,
           seq_per_s, tokens_per_s, tflops, peak_text, eta);
    fflush(stdout);
    if (!metrics) return;
    json_t *line = json_pack("{s:I, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:f}", "step",
                             (json_int_t)step, "steps", t->steps, "mlm_loss", w->mlm_loss / w->steps, "nsp_loss",
                             w->nsp_loss / w->steps, "mlm_accuracy", mlm_acc, "nsp_accuracy", nsp_acc, "lr", lr,
                             "loss_scale", loss_scale, "skipped_steps", (json_int_t)skipped, "seq_per_s",
                             seq_per_s, "tokens_per_s", tokens_per_s, "model_tflops", tflops, "eta_s", eta,
                             "elapsed_s", elapsed);
    json_object_set_new(line, "peak_percent", peak > 0 ? json_real(100.0 * tflops / peak) : json_null());
    char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(17));
    fprintf(metrics, "%s\n", text);
    fflush(metrics);
    free(text);
    json_decref(line);
}

int cmd_train(int argc, char **argv) {
    const char *path = NULL;
    char *overrides[256];
    int n_overrides = 0, dry_run = 0, ranks = 0;
    const char *resume = NULL, *init_from = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_train, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--set")) {
            if (i + 1 >= argc) fatal("--set needs section.field=value");
            if (n_overrides == 256) fatal("too many --set options (at most 256)");
            overrides[n_overrides++] = argv[++i];
        } else if (!strcmp(argv[i], "--resume") || !strcmp(argv[i], "--init-from")) {
            if (i + 1 >= argc) fatal("%s needs a checkpoint directory%s", argv[i],
                                     argv[i][2] == 'r' ? " or 'auto'" : "");
            if (argv[i][2] == 'r') resume = argv[++i];
            else init_from = argv[++i];
        } else if (!strcmp(argv[i], "--dry-run")) {
            dry_run = 1;
        } else if (!strcmp(argv[i], "--ranks")) {
            char *end = NULL;
            long n = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *end || n < 1 || n > 1 << 20)
                fatal("--ranks needs a whole number of ranks between 1 and %d, got '%s'", 1 << 20,
                      i + 1 < argc ? argv[i + 1] : "");
            ranks = (int)n;
            i++;
        } else if (argv[i][0] == '-') {
            fatal("train: unknown option '%s'\n%s", argv[i], usage_train);
        } else if (path) {
            fatal("train: more than one CONFIG given ('%s' and '%s')", path, argv[i]);
        } else {
            path = argv[i];
        }
    }
    if (!path) fatal("train: missing CONFIG\n%s", usage_train);
    if (ranks && !dry_run) fatal("train: --ranks plans a launch and goes with --dry-run; ranks come from mpirun");
    if (resume && init_from)
        fatal("train: --resume continues a run and --init-from starts a new one from weights: give one of them");
    dist_init();
    int world_size = dist_world_size(), rank = dist_rank();
    run_config cfg;
    run_config_load(&cfg, path, n_overrides, overrides, ranks ? ranks : world_size);
    const backend_t *be = train_select_backend(&cfg.train, path);
    comm_setup(be, &cfg.train);  // the rank's GPU before any other device call; NCCL
    zero_check(&cfg.train, be, path);
    if (cfg.train.steps_this_run && !cfg.train.checkpoint_dir[0])
        fatal("%s: section 'train': field 'steps_this_run' = %d stops the run early, which needs "
              "'checkpoint_dir' to continue from", path, cfg.train.steps_this_run);
    const train_config *t = &cfg.train;
    memory_plan plan = bert_memory_plan(&cfg.model, be, t->micro_batch_size, t->seq_length,
                                        t->max_predictions_per_seq);
    if (rank == 0) {
        print_plan(&cfg, path, be->name);
        memory_plan_print(&plan, stdout);
    }
    if (be->memory_available && !dry_run) {
        // 5% of the free memory stays for the CUDA context, cuBLASLt and fragmentation.
        double usable = 0.95 * (double)be->memory_available();
        if (memory_plan_total(&plan) > usable) {
            int fits = bert_max_micro_batch(&cfg.model, be, t->micro_batch_size, t->seq_length,
                                            t->max_predictions_per_seq, usable);
            fatal("%s: the memory plan above (%.1f GiB) does not fit in the %.1f GiB usable on %s; "
                  "train.micro_batch_size = %d: %s%d would fit (keep global_batch_size a multiple of it times the "
                  "ranks)",
                  path, memory_plan_total(&plan) / 1073741824.0, usable / 1073741824.0, be->device_name(),
                  t->micro_batch_size, fits ? "a micro-batch of " : "not even ", fits ? fits : 1);
        }
    }
    if (dry_run) {
        comm_finish();
        dist_finalize();
        return 0;
    }

    // `applied` counts the updates LAMB applied: the schedule advances with it, and a step
    // skipped for overflow is retried with the same rate. `iteration` numbers the batches.
    long applied = 0, skipped = 0, first_iteration = 0;
    char resume_dir[1200] = "";
    if (resume && !strcmp(resume, "auto")) {
        if (!t->checkpoint_dir[0])
            fatal("--resume auto looks in train.checkpoint_dir, which %s does not set", path);
        if (!checkpoint_latest(t->checkpoint_dir, resume_dir, sizeof resume_dir) && rank == 0)
            printf("  no complete checkpoint in %s: starting at step 0\n", t->checkpoint_dir);
    } else if (resume) {
        snprintf(resume_dir, sizeof resume_dir, "%s", resume);
    }
    // A checkpoint that does not fit is reported before the loader starts its threads.
    checkpoint from;
    memset(&from, 0, sizeof from);
    if (resume_dir[0] || init_from) {
        checkpoint_open(&from, resume_dir[0] ? resume_dir : init_from);
        if (resume_dir[0]) checkpoint_check_resume(&from, &cfg, path);
        else checkpoint_check_model(&from, &cfg.model, path);
    }
    // Rank 0 logs; the numbers it logs are those of the global batch. A resumed run appends.
    FILE *metrics = NULL;
    if (rank == 0 && t->metrics_file[0]) {
        metrics = fopen(t->metrics_file, resume_dir[0] ? "a" : "w");
        check_file(metrics, t->metrics_file, "opening the metrics file (train.metrics_file)");
    }
    // The data first: a missing shard or a tokenizer that does not fit the model is reported
    // before any memory is allocated.
    train_data *data = train_data_open(&cfg, rank, world_size);
    bert_model model;
    bert_init(&model, &cfg.model, be, t->micro_batch_size, t->seq_length, t->max_predictions_per_seq);
    bert_init_weights(&model, (uint64_t)t->seed);
    if (rank == 0) printf("  %zu parameters\n", model.n_params);
    lamb_state opt;
    lamb_init(&opt, be, model.n_params);
    loss_scaler scaler;
    train_init_loss_scaler(&scaler, t);
    int accum = t->accumulation_steps;
    if (rank == 0) printf("  data: %s\n", train_data_describe(data));
    if (resume_dir[0]) {
        train_state resumed;
        checkpoint_resume(&from, &cfg, path, &model, &opt, &resumed);
        applied = resumed.applied;
        skipped = resumed.skipped;
        first_iteration = resumed.iteration;
        scaler = resumed.scaler;
        train_data_resume(data, first_micro_batch(first_iteration, world_size, rank, accum),
                          resumed.cursors + (size_t)rank * resumed.cursor_len, resumed.cursor_len, resume_dir);
        free(resumed.cursors);
        if (rank == 0) printf("  resumed from %s at step %ld\n", resume_dir, applied);
    } else if (init_from) {
        checkpoint_load_weights(&from, &model);
        if (rank == 0) printf("  weights from %s\n", init_from);
    }
    if (resume_dir[0] || init_from) checkpoint_close(&from);
    zero_attach(t, &model, &opt);
    struct sigaction action = {.sa_handler = on_stop_signal};
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGUSR1, &action, NULL);
    batch_t *micro = xcalloc(accum, sizeof(batch_t));
    for (int k = 0; k < accum; k++)
        batch_alloc(&micro[k], t->micro_batch_size, t->seq_length, t->max_predictions_per_seq);
    // Peak of all ranks' GPUs for "% of peak": only on a GPU, from the config or the name the
    // backend gives its device.
    double peak = 0.0;
    if (strcmp(be->name, "cpu") != 0)
        peak = world_size * (t->peak_tflops > 0 ? t->peak_tflops
                                                : gpu_peak_tflops(be->device_name ? be->device_name() : NULL));

    double start = now_seconds();
    log_window w = {.start = start};
    int stopped = 0, paused = 0;
    long first_applied = applied;
    for (uint32_t iteration = (uint32_t)first_iteration; applied < t->steps && !stopped; iteration++) {
        train_data_fill(data, &cfg, micro, accum, first_micro_batch(iteration, world_size, rank, accum));
        double lr = schedule_lr(t->learning_rate, t->warmup_proportion, t->steps, applied + 1);
        step_stats s = train_step(&model, &opt, &scaler, micro, accum, lr, 1, (uint64_t)t->seed, iteration);
        if (s.skipped) skipped++;
        else applied++;
        w.steps++;
        w.mlm_loss += s.mlm_loss;
        w.nsp_loss += s.nsp_loss;
        w.mlm_correct += s.mlm_correct;
        w.n_pred += s.n_pred;
        w.nsp_correct += s.nsp_correct;
        w.sequences += s.sequences;
        w.flops += model_flops(&cfg.model, s.sequences, t->seq_length, s.n_pred);
        if ((!s.skipped && applied % t->log_every == 0) || applied == t->steps) {
            if (rank == 0) log_step(&cfg, metrics, &w, applied, lr, s.loss_scale, skipped, peak, now_seconds() - start);
            w = (log_window){.start = now_seconds()};
        }
        stopped = stop_requested(world_size);
        paused = t->steps_this_run && applied - first_applied == t->steps_this_run && applied < t->steps;
        int due = !s.skipped && t->checkpoint_every && applied % t->checkpoint_every == 0;
        if (t->checkpoint_dir[0] && (due || stopped || paused || applied == t->steps)) {
            save_checkpoint(&cfg, data, &model, &opt, &scaler, applied, (long)iteration + 1, skipped, rank);
            if (w.steps == 0) w.start = now_seconds();  // the next log window leaves the write out
        }
        stopped |= paused;
    }
    if (paused && rank == 0) {
        printf("train.steps_this_run = %d steps done (step %ld of %d); continue with --resume auto\n",
               t->steps_this_run, applied, t->steps);
    } else if (stopped && rank == 0) {
        char cause[64] = "a signal to another rank";
        if (stop_signal) snprintf(cause, sizeof cause, "signal %d", (int)stop_signal);
        if (t->checkpoint_dir[0]) printf("stopped by %s after step %ld; resume with --resume auto\n", cause, applied);
        else printf("stopped by %s after step %ld; no train.checkpoint_dir, so nothing was saved\n", cause, applied);
    }
    if (metrics) check_file(fclose(metrics) == 0, t->metrics_file, "closing the metrics file");
    // Every rank holds the same weights: rank 0 alone evaluates, after a run that finished.
    if (rank == 0 && !stopped) train_data_evaluate(data, &cfg, &model, &micro[0]);
    train_data_close(data);
    for (int k = 0; k < accum; k++) batch_free(&micro[k]);
    free(micro);
    lamb_free(&opt);
    bert_free(&model);
    comm_finish();
    dist_finalize();
    return 0;
}
