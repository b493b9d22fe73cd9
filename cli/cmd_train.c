// bertpre train: reads the config, derives the batch plan (global = micro x accumulation x
// ranks), and runs the pretraining loop: fill the micro-batches, one train_step (forward and
// backward over every micro-batch, one LAMB update) at NVIDIA's learning-rate schedule, and
// every log_every steps a log line and a JSON line with losses, accuracy, rates and ETA;
// checkpoints every train.checkpoint_every steps, at the end, and on SIGTERM / SIGUSR1
// (preemption: the signal only sets a flag, looked at between steps), and resume from one.
#include "cli/cmd_train.h"
#include "cli/options.h"
#include "cli/train_plan.h"
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
#include "engine/optim.h"
#include "engine/model.h"
#include "engine/preflight.h"
#include "engine/schedule.h"
#include "engine/setup.h"
#include "data/synthetic.h"
#include "engine/throughput.h"
#include "engine/train.h"
#include "engine/train_data.h"
#include "engine/zero.h"

static const char *about_train =
    "CONFIG is JSON: {\"model\": BertConfig object or path, \"train\": {...}}.\n"
    "train fields: backend (auto|cpu|cuda|cuda-emu: auto picks cuda when this build has it and\n"
    "  a GPU is visible, else cpu; cuda-emu runs the CUDA kernels through the host emulation,\n"
    "  slow, for tests), precision (auto|fp32|fp16|bf16), seed,\n"
    "  micro_batch_size, global_batch_size, seq_length, max_predictions_per_seq, steps,\n"
    "  learning_rate, warmup_proportion, log_every, metrics_file, peak_tflops, loss_scale\n"
    "  (0 = dynamic for fp16, or a static scale), loss_scale_initial, loss_scale_min,\n"
    "  loss_scale_growth_interval, loss_scale_max_skips, phase, checkpoint_dir,\n"
    "  checkpoint_every, keep_checkpoints, steps_this_run, data, eval_data, eval_batches,\n"
    "  tokenizer, dynamic_masking, optimizer (lamb|lars|adamw), weight_decay, max_grad_norm,\n"
    "  beta1, beta2, eps (lamb, adamw), momentum, trust_coefficient (lars), lr_schedule\n"
    "  (poly|cosine|linear|constant), base_learning_rate, base_batch_size, lr_scaling\n"
    "  (none|linear|sqrt), label_smoothing, comm_timeout_s, zero_stage.\n"
    "global_batch_size = micro_batch_size x accumulation steps x ranks.\n"
    "The learning rate warms up linearly over warmup_proportion of the steps, then follows\n"
    "lr_schedule (default poly: NVIDIA's BERT decay with power 0.5 to zero); with\n"
    "base_learning_rate it is scaled from base_batch_size to global_batch_size by lr_scaling.\n"
    "Batches come from HDF5 shards\n"
    "(train.data: a file, directory or glob; train.eval_data is evaluated after training) or,\n"
    "without train.data, are synthetic (data/synthetic.h).\n";
static const char *notes_train =
    "--dry-run also opens the data and tokenizer the config names (shard headers, vocabulary).\n"
    "A new run refuses a train.checkpoint_dir holding checkpoints (continue with --resume auto,\n"
    "or --overwrite-checkpoints removes them first), and so does --resume DIR from outside it.\n"
    "A new run keeps an earlier run's train.metrics_file as FILE.N (the first free N) and\n"
    "starts a new one; --resume appends.\n"
    "SIGTERM or SIGUSR1 writes a checkpoint (with train.checkpoint_dir) and exits 0; without\n"
    "train.checkpoint_dir nothing is saved and the exit status is 128 + the signal.\n";

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
                            const optim_state *opt, const loss_scaler *scaler, long applied, long iteration,
                            long skipped, int rank) {
    const train_config *t = &cfg->train;
    int64_t mine[CHECKPOINT_CURSOR_MAX];
    int n = train_data_cursor(data, first_micro_batch(iteration, t->world_size, rank, t->accumulation_steps), mine,
                              CHECKPOINT_CURSOR_MAX);
    train_state s = {.applied = applied, .iteration = iteration, .skipped = skipped, .scaler = *scaler,
                     .world_size = t->world_size, .cursor_len = n};
    s.cursors = xcalloc((size_t)t->world_size * n, sizeof(int64_t));
    dist_gather_int64(mine, n, s.cursors);
    optim_state gathered;
    const optim_state *whole = zero_gather((bert_model *)m, opt, &gathered);
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
    printf("  %d steps, lr %g, warmup %g of the steps (%ld updates), then %s decay\n", t->steps, t->learning_rate,
           t->warmup_proportion, t->steps ? warmup_updates(t) : 0L, t->lr_schedule);
    if (t->base_learning_rate > 0.0 && strcmp(t->lr_scaling, "none") != 0)
        printf("  lr %g = base_learning_rate %g at batch %d, %s-scaled to batch %d\n", t->learning_rate,
               t->base_learning_rate, t->base_batch_size, t->lr_scaling, t->global_batch_size);
    printf("  optimizer %s, weight decay %g, gradient clipping at norm %g\n", t->optimizer, t->weight_decay,
           t->max_grad_norm);
    printf("  unpad %s: %s\n", t->unpad,
           !strcmp(t->unpad, "off")  ? "every micro-batch computes all B x T rows"
           : !strcmp(t->unpad, "on") ? "every micro-batch computes its real tokens only"
                                     : "micro-batches with padding compute their real tokens only");
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

// What the command line asks for (parse_args).
typedef struct {
    const char *path, *resume, *init_from;
    char *overrides[256];
    int n_overrides, dry_run, ranks, help, overwrite;
} train_args;

// Everything one run holds, from the plan to the report.
typedef struct {
    const char *path;
    run_config cfg;
    const backend_t *be;
    int rank, world_size;
    char resume_dir[1200];  // the checkpoint resumed from; empty for a fresh start
    checkpoint from;        // open between restore_open and restore_state
    FILE *metrics;          // rank 0's metrics file, or NULL
    train_data *data;
    bert_model model;
    optim_state opt;
    loss_scaler scaler;
    batch_t *micro;
    // `applied` counts the updates LAMB applied: the schedule advances with it, and a step
    // skipped for overflow is retried with the same rate. `iteration` numbers the batches.
    long applied, skipped, first_iteration;
    int stopped, paused;
} train_run;

static void parse_args(int argc, char **argv, train_args *a) {
    memset(a, 0, sizeof *a);
    cli_list sets = {(const char **)a->overrides, 0, 256};
    const cli_option options[] = {
        {"--set", CLI_LIST, &sets, "section.field=value", .help = "overrides a config field"},
        {"--dry-run", CLI_FLAG, &a->dry_run, NULL, .help = "reads and checks the config, prints the plan and exits"},
        {"--ranks", CLI_INT, &a->ranks, "N", .help = "with --dry-run: plans for N ranks instead of this launch's", 1, 1 << 20,
         .shown_default = "the ranks of this launch"},
        {"--resume", CLI_STRING, &a->resume, "auto|DIR",
         .help = "continues from the newest complete checkpoint in train.checkpoint_dir (auto; step 0 when there is none) "
         "or from checkpoint DIR"},
        {"--init-from", CLI_STRING, &a->init_from, "DIR",
         .help = "starts a new run from a checkpoint's weights (phase 2 from phase 1, or an import)"},
        {"--overwrite-checkpoints", CLI_FLAG, &a->overwrite, NULL,
         .help = "a new run removes the checkpoints already in train.checkpoint_dir (else it refuses them)"},
        {NULL},
    };
    const cli_command command = {"train",
                                 "train CONFIG [--set section.field=value ...] [--dry-run [--ranks N]]\n"
                                 "   [--resume auto|DIR] [--init-from DIR] [--overwrite-checkpoints]\n"
                                 "   (under [mpirun -np N])",
                                 about_train, notes_train, options, "CONFIG", 1, 1};
    char *operands[1];
    int n = 0;
    a->help = cli_parse(&command, argc, argv, operands, &n);
    if (a->help) return;
    a->path = operands[0];
    a->n_overrides = sets.n;
    if (a->ranks && !a->dry_run) fatal("train: --ranks plans a launch and goes with --dry-run; ranks come from mpirun");
    if (a->resume && a->init_from)
        fatal("train: --resume continues a run and --init-from starts a new one from weights: give one of them");
}

// Loads and checks the config, picks the backend, prints the plan and checks its memory.
static void plan_run(train_run *r, const train_args *a) {
    dist_init();
    r->world_size = dist_world_size();
    r->rank = dist_rank();
    r->path = a->path;
    run_config_load(&r->cfg, a->path, a->n_overrides, (char **)a->overrides, a->ranks ? a->ranks : r->world_size);
    r->be = train_select_backend(&r->cfg.train, a->path);
    comm_setup(r->be, &r->cfg.train);  // the rank's GPU before any other device call; NCCL
    zero_check(&r->cfg.train, r->be, a->path);
    const train_config *t = &r->cfg.train;
    if (t->steps_this_run && !t->checkpoint_dir[0])
        fatal("%s: section 'train': field 'steps_this_run' = %d stops the run early, which needs "
              "'checkpoint_dir' to continue from", a->path, t->steps_this_run);
    memory_plan plan = bert_memory_plan(&r->cfg.model, r->be, t->micro_batch_size, t->seq_length,
                                        t->max_predictions_per_seq);
    zero_plan(&plan, t, r->be);
    if (r->rank == 0) {
        print_plan(&r->cfg, a->path, r->be->name);
        memory_plan_print(&plan, stdout);
    }
    train_plan_check(&r->cfg, r->be, &plan, a->path, a->dry_run, r->rank == 0);
}

// Finds the checkpoint to start from and checks it against the config. A checkpoint that
// does not fit is reported before the loader starts its threads.
static void restore_open(train_run *r, const train_args *a) {
    const train_config *t = &r->cfg.train;
    if (a->resume && !strcmp(a->resume, "auto")) {
        if (!t->checkpoint_dir[0])
            fatal("--resume auto looks in train.checkpoint_dir, which %s does not set", r->path);
        if (!checkpoint_latest(t->checkpoint_dir, r->resume_dir, sizeof r->resume_dir) && r->rank == 0)
            printf("  no complete checkpoint in %s: starting at step 0\n", t->checkpoint_dir);
    } else if (a->resume) {
        snprintf(r->resume_dir, sizeof r->resume_dir, "%s", a->resume);
    }
    memset(&r->from, 0, sizeof r->from);
    if (r->resume_dir[0] || a->init_from) {
        checkpoint_open(&r->from, r->resume_dir[0] ? r->resume_dir : a->init_from);
        if (r->resume_dir[0]) checkpoint_check_resume(&r->from, &r->cfg, r->path);
        else checkpoint_check_model(&r->from, &r->cfg.model, r->path);
    }
}

// The metrics file, the data, the model, LAMB and the loss scaler, freshly initialized.
static void setup_run(train_run *r) {
    const train_config *t = &r->cfg.train;
    // Rank 0 logs; the numbers it logs are those of the global batch. A resumed run appends.
    if (r->rank == 0 && t->metrics_file[0]) {
        r->metrics = fopen(t->metrics_file, r->resume_dir[0] ? "a" : "w");
        check_file(r->metrics, t->metrics_file, "opening the metrics file (train.metrics_file)");
    }
    // The data first: a missing shard or a tokenizer that does not fit the model is reported
    // before any memory is allocated.
    r->data = train_data_open(&r->cfg, r->rank, r->world_size);
    bert_init(&r->model, &r->cfg.model, r->be, t->micro_batch_size, t->seq_length, t->max_predictions_per_seq);
    bert_init_weights(&r->model, (uint64_t)t->seed);
    r->model.label_smoothing = (float)t->label_smoothing;
    r->model.unpad = unpad_mode_of(t->unpad);
    if (r->rank == 0) printf("  %zu parameters\n", r->model.n_params);
    optim_init_config(&r->opt, t, r->be, r->model.n_params);
    train_init_loss_scaler(&r->scaler, t);
    if (r->rank == 0) printf("  data: %s\n", train_data_describe(r->data));
}

// Weights, LAMB, scaler, counters and data cursors from the checkpoint resumed from, or the
// weights of --init-from.
static void restore_state(train_run *r, const train_args *a) {
    if (r->resume_dir[0]) {
        train_state resumed;
        checkpoint_resume(&r->from, &r->cfg, r->path, &r->model, &r->opt, &resumed);
        r->applied = resumed.applied;
        r->skipped = resumed.skipped;
        r->first_iteration = resumed.iteration;
        r->scaler = resumed.scaler;
        train_data_resume(r->data,
                          first_micro_batch(r->first_iteration, r->world_size, r->rank,
                                            r->cfg.train.accumulation_steps),
                          resumed.cursors + (size_t)r->rank * resumed.cursor_len, resumed.cursor_len,
                          r->resume_dir);
        free(resumed.cursors);
        if (r->rank == 0) printf("  resumed from %s at step %ld\n", r->resume_dir, r->applied);
    } else if (a->init_from) {
        checkpoint_load_weights(&r->from, &r->model);
        if (r->rank == 0) printf("  weights from %s\n", a->init_from);
    }
    if (r->resume_dir[0] || a->init_from) checkpoint_close(&r->from);
    zero_attach(&r->cfg.train, &r->model, &r->opt);
}

// Adds one step's numbers to the log window.
static void window_add(log_window *w, const run_config *cfg, const step_stats *s) {
    w->steps++;
    w->mlm_loss += s->mlm_loss;
    w->nsp_loss += s->nsp_loss;
    w->mlm_correct += s->mlm_correct;
    w->n_pred += s->n_pred;
    w->nsp_correct += s->nsp_correct;
    w->sequences += s->sequences;
    w->flops += model_flops(&cfg->model, s->sequences, cfg->train.seq_length, s->n_pred);
}

// Peak of all ranks' GPUs for "% of peak": only on a GPU, from the config or the name the
// backend gives its device.
static double peak_tflops(const train_run *r) {
    const train_config *t = &r->cfg.train;
    if (!strcmp(r->be->name, "cpu")) return 0.0;
    return r->world_size * (t->peak_tflops > 0 ? t->peak_tflops
                                               : gpu_peak_tflops(r->be->device_name ? r->be->device_name() : NULL));
}

// The training loop: steps until train.steps, train.steps_this_run or a stop signal, with
// log lines and checkpoints.
static void train_loop(train_run *r) {
    const train_config *t = &r->cfg.train;
    int accum = t->accumulation_steps, rank = r->rank;
    double peak = peak_tflops(r), start = now_seconds();
    log_window w = {.start = start};
    long first_applied = r->applied;
    for (uint32_t iteration = (uint32_t)r->first_iteration; r->applied < t->steps && !r->stopped; iteration++) {
        train_data_fill(r->data, &r->cfg, r->micro, accum, first_micro_batch(iteration, r->world_size, rank, accum));
        double lr = schedule_config_lr(t, r->applied + 1);
        step_stats s = train_step(&r->model, &r->opt, &r->scaler, r->micro, accum, lr, 1, (uint64_t)t->seed,
                                  iteration);
        if (s.skipped) r->skipped++;
        else r->applied++;
        window_add(&w, &r->cfg, &s);
        if ((!s.skipped && r->applied % t->log_every == 0) || r->applied == t->steps) {
            if (rank == 0)
                log_step(&r->cfg, r->metrics, &w, r->applied, lr, s.loss_scale, r->skipped, peak,
                         now_seconds() - start);
            w = (log_window){.start = now_seconds()};
        }
        r->stopped = stop_requested(r->world_size);
        r->paused = t->steps_this_run && r->applied - first_applied == t->steps_this_run && r->applied < t->steps;
        int due = !s.skipped && t->checkpoint_every && r->applied % t->checkpoint_every == 0;
        if (t->checkpoint_dir[0] && (due || r->stopped || r->paused || r->applied == t->steps)) {
            save_checkpoint(&r->cfg, r->data, &r->model, &r->opt, &r->scaler, r->applied, (long)iteration + 1,
                            r->skipped, rank);
            if (w.steps == 0) w.start = now_seconds();  // the next log window leaves the write out
        }
        r->stopped |= r->paused;
    }
}

// How the run ended, the metrics file closed, and the evaluation of a finished run.
static void report_run(train_run *r) {
    const train_config *t = &r->cfg.train;
    if (r->paused && r->rank == 0) {
        printf("train.steps_this_run = %d steps done (step %ld of %d); continue with --resume auto\n",
               t->steps_this_run, r->applied, t->steps);
    } else if (r->stopped && r->rank == 0) {
        char cause[64] = "a signal to another rank";
        if (stop_signal) snprintf(cause, sizeof cause, "signal %d", (int)stop_signal);
        if (t->checkpoint_dir[0])
            printf("stopped by %s after step %ld; resume with --resume auto\n", cause, r->applied);
        else
            printf("stopped by %s after step %ld; no train.checkpoint_dir, so nothing was saved\n", cause,
                   r->applied);
    }
    if (r->metrics) check_file(fclose(r->metrics) == 0, t->metrics_file, "closing the metrics file");
    // Every rank holds the same weights: rank 0 alone evaluates, after a run that finished.
    if (r->rank == 0 && !r->stopped) train_data_evaluate(r->data, &r->cfg, &r->model, &r->micro[0]);
}

static void install_stop_handlers(void) {
    struct sigaction action = {.sa_handler = on_stop_signal};
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGUSR1, &action, NULL);
}

static void free_run(train_run *r) {
    train_data_close(r->data);
    for (int k = 0; k < r->cfg.train.accumulation_steps; k++) batch_free(&r->micro[k]);
    free(r->micro);
    optim_free(&r->opt);
    bert_free(&r->model);
}

int cmd_train(int argc, char **argv) {
    static train_args a;
    static train_run r;
    parse_args(argc, argv, &a);
    if (a.help) return 0;
    plan_run(&r, &a);
    if (a.dry_run) {
        // The data and tokenizer paths open as in a run (shard headers, the tokenizer's vocabulary).
        train_data_close(train_data_open(&r.cfg, r.rank, r.world_size));
        comm_finish();
        dist_finalize();
        return 0;
    }
    restore_open(&r, &a);
    if (r.rank == 0) {
        preflight_checkpoint_dir(&r.cfg.train, r.path, a.resume != NULL, a.overwrite,
                                 r.resume_dir[0] ? r.resume_dir : a.init_from);
        preflight_metrics_file(&r.cfg.train, r.resume_dir[0] != 0);
    }
    setup_run(&r);
    if (r.rank == 0) preflight_disk_space(&r.cfg.train, r.model.n_params);
    restore_state(&r, &a);
    install_stop_handlers();
    const train_config *t = &r.cfg.train;
    r.micro = xcalloc(t->accumulation_steps, sizeof(batch_t));
    for (int k = 0; k < t->accumulation_steps; k++)
        batch_alloc(&r.micro[k], t->micro_batch_size, t->seq_length, t->max_predictions_per_seq);
    train_loop(&r);
    report_run(&r);
    // Stopped by a signal with nothing saved: a failure for the scheduler (128 + the signal).
    int status = r.stopped && !r.paused && !t->checkpoint_dir[0] ? 128 + (stop_signal ? stop_signal : SIGTERM) : 0;
    free_run(&r);
    comm_finish();
    dist_finalize();
    return status;
}
