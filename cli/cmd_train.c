// bertpre train: reads the config, derives the batch plan (global = micro x accumulation x
// ranks), and runs the pretraining loop: fill the micro-batches, one train_step (forward and
// backward over every micro-batch, one LAMB update) at NVIDIA's learning-rate schedule, and
// every log_every steps a log line and a JSON line with losses, accuracy, rates and ETA;
// checkpoints every train.checkpoint_every steps, at the end, and on SIGTERM / SIGUSR1 / SIGHUP
// (preemption: the signal only sets a flag, looked at between steps), and resume from one.
#include "cli/tensorboard.h"
#include "cli/cmd_train.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/train_plan.h"
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "kernels/backend.h"
#include "bertpre_config.h"
#include "engine/checkpoint.h"
#include "engine/comm.h"
#include "kernels/common/check.h"
#include "kernels/common/clock.h"
#include "kernels/cpu/gemm.h"
#include "engine/config.h"
#include "engine/dist.h"
#include "engine/optim.h"
#include "engine/model.h"
#include "engine/preflight.h"
#include "engine/backend.h"
#include "data/synthetic.h"
#include "engine/flops.h"
#include "engine/schedule.h"
#include "engine/train.h"
#include "engine/train_data.h"
#include "engine/zero.h"

static const char *about_train =
    "global_batch_size = micro_batch_size x accumulation steps x ranks.\n"
    "The learning rate warms up linearly over warmup_proportion of the steps, then follows\n"
    "lr_schedule; with base_learning_rate it is scaled from base_batch_size to\n"
    "global_batch_size by lr_scaling. Batches come from HDF5 shards (train.data;\n"
    "train.eval_data is evaluated after training and, with eval_every N, every N steps, that time left\n"
    "out of elapsed_s) or, without train.data, are synthetic.\n\n";
static const char *notes_train =
    "--dry-run makes the run's checks without its work or writes: the config, the memory plan, the\n"
    "checkpoint of --resume or --init-from against the config (its weights finite, and a resume's\n"
    "optimizer state: it reads model.safetensors and optimizer.safetensors whole), train.checkpoint_dir and its lock (a run holding it refuses\n"
    "the dry run as it refuses a run), the metrics file (an input, a FIFO or a file of other\n"
    "bytes there is refused) and its directory, the data and tokenizer\n"
    "(shard headers, vocabulary) and a resumed run's data cursors. Without a GPU, a dry run of\n"
    "train.backend=cuda plans with the CUDA emulation (the same kernels and memory plan), in a\n"
    "build that has it.\n"
    "A new run refuses a train.checkpoint_dir holding checkpoints (continue with --resume auto,\n"
    "or --overwrite-checkpoints removes them first), and so does --resume DIR from outside it.\n"
    "A new run keeps an earlier run's train.metrics_file as FILE.N (the first free N) and\n"
    "starts a new one; --resume appends.\n"
    "SIGTERM, SIGUSR1, SIGHUP (a closed terminal) or a first SIGINT (Ctrl-C, which says so on\n"
    "stderr) ends the run after the step in progress: its metrics line for the steps since the\n"
    "last one, a checkpoint (with train.checkpoint_dir), exit 0;\n"
    "without train.checkpoint_dir nothing is saved and the exit status is 128 + the signal.\n"
    "A second SIGINT ends the process at once, without a checkpoint of the steps since the last.\n"
    "One run at a time per train.checkpoint_dir: a run holds a lock on its lock file\n"
    "(" PREFLIGHT_LOCK_FILE "), and a second run there is refused, naming the first. A run whose\n"
    "directory was removed (rm -rf) makes it again at its next checkpoint, or stops (exit 1)\n"
    "when another run has taken it since.\n"
    "A failed write of train.metrics_file (a full disk) stops the run: its checkpoint is\n"
    "written, then it exits 1 naming the file and the error.\n"
    "Log lines show the loss scale and the skipped steps when loss scaling runs (fp16, or\n"
    "train.loss_scale > 0). A run ends with a summary: the steps, time and throughput of this\n"
    "job, the last checkpoint, the held-out numbers and the commands that come next. The\n"
    "metrics' elapsed_s continues over a resume (checkpoints store it).\n";

static volatile sig_atomic_t stop_signal = 0;
static char interrupt_text[256];  // what the first SIGINT says on stderr
static void on_stop_signal(int signo) {
    stop_signal = signo;
    if (signo == SIGINT) {
        ssize_t written = write(STDERR_FILENO, interrupt_text, strlen(interrupt_text));
        (void)written;
    }
}

// Whether any rank was asked to stop (a signal, or `failed` on this rank): all ranks must leave
// the loop at the same step.
static int stop_requested(int world_size, int failed) {
    double stop = stop_signal != 0 || failed;
    if (world_size > 1) dist_sum_doubles(&stop, 1);
    return stop > 0;
}

// Every rank takes part (the data cursors are gathered); rank 0 writes.
static void save_checkpoint(const char *config_path, const run_config *cfg, const train_data *data,
                            const bert_model *m, const optim_state *opt, const loss_scaler *scaler, long applied,
                            long iteration, long skipped, double elapsed_s, int rank, char *written,
                            size_t written_size) {
    const train_config *t = &cfg->train;
    // The directory still this run's: not removed and taken by another run since its start.
    if (rank == 0) preflight_lock_recheck(t, config_path, applied);
    int64_t mine[CHECKPOINT_CURSOR_MAX];
    int n = train_data_cursor(data, schedule_first_micro_batch(t, iteration, rank), mine,
                              CHECKPOINT_CURSOR_MAX);
    train_state s = {.applied = applied, .iteration = iteration, .skipped = skipped, .elapsed_s = elapsed_s,
                     .scaler = *scaler, .world_size = t->world_size, .cursor_len = n};
    s.cursors = xcalloc((size_t)t->world_size * n, sizeof(int64_t));
    dist_gather_int64(mine, n, s.cursors);
    optim_state gathered;
    const optim_state *whole = zero_gather((bert_model *)m, opt, &gathered);
    if (rank == 0) {
        checkpoint_save(t->checkpoint_dir, cfg, m, whole, &s, t->keep_checkpoints, written, written_size);
        printf("checkpoint %s (step %ld)\n", written, applied);
        fflush(stdout);
    }
    free(s.cursors);
    zero_release(&gathered, whole);
    dist_barrier_untimed();  // the others wait for the write without a timeout
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
    printf("  model: L=%d C=%d NH=%d I=%d V=%d, objective %s (%s%s)\n", m->num_hidden_layers, m->hidden_size,
           m->num_attention_heads, m->intermediate_size, m->vocab_size, t->objective, bert_architecture(m),
           m->mlm_only ? ": no pooler, no NSP head" : "");
    printf("  global batch %d = micro-batch %d x %d accumulated x %d rank%s, seq %d, max predictions %d\n",
           t->global_batch_size, t->micro_batch_size, t->accumulation_steps, t->world_size,
           t->world_size == 1 ? "" : "s", t->seq_length, t->max_predictions_per_seq);
    if (t->batch_warmup_min_size) {
        long ramp = schedule_batch_warmup_iterations(t);
        printf("  batch-size warmup: %d sequences at first, one micro-batch per rank more at a time, %d from step %ld "
               "on (%g tokens)\n", t->batch_warmup_min_size, t->global_batch_size, ramp + 1, t->batch_warmup_tokens);
    }
    printf("  %d steps, lr %g, warmup %g of the steps (%ld updates), then %s decay\n", t->steps, t->learning_rate,
           t->warmup_proportion, t->steps ? warmup_updates(t) : 0L, t->lr_schedule);
    if (t->base_learning_rate > 0.0 && strcmp(t->lr_scaling, "none") != 0)
        printf("  lr %g = base_learning_rate %g at batch %d, %s-scaled to batch %d\n", t->learning_rate,
               t->base_learning_rate, t->base_batch_size, t->lr_scaling, t->global_batch_size);
    if (t->max_grad_norm > 0.0)
        printf("  optimizer %s, weight decay %g, gradient clipping at norm %g\n", t->optimizer, t->weight_decay,
               t->max_grad_norm);
    else
        printf("  optimizer %s, weight decay %g, no gradient clipping (max_grad_norm 0)\n", t->optimizer,
               t->weight_decay);
    printf("  unpad %s: %s\n", t->unpad,
           !strcmp(t->unpad, "off")  ? "every micro-batch computes all B x T rows"
           : !strcmp(t->unpad, "on") ? "every micro-batch computes its real tokens only"
                                     : "micro-batches with padding compute their real tokens only");
    if (!strcmp(backend_name, "cpu")) {
        char threads[320];
        cpu_threads_describe(threads, sizeof threads);
        printf("  CPU threads: %s\n", threads);
    }
    double flops = model_flops(m, t->global_batch_size, t->seq_length,
                               (long)t->global_batch_size * t->max_predictions_per_seq);
    printf("  %.4g model TFLOP per step (at most max_predictions masked positions), %.4g sequences in all\n",
           flops * 1e-12, (double)t->global_batch_size * t->steps);
}

// Sums over the steps since the last log line.
typedef struct {
    int steps;
    double mlm_loss, nsp_loss, flops, start;
    double real_tokens, flops_real;  // the real tokens (input_mask ones) and their model FLOPs
    long mlm_correct, n_pred, nsp_correct, sequences;
} log_window;

// The loss scale and skipped steps are shown when loss scaling runs (fp16, or a static scale).
// Returns 0, or the errno of a failed metrics write (a full disk).
static int log_step(const run_config *cfg, const metrics_sink *metrics, const log_window *w, long step, double lr,
                    const loss_scaler *scaler, double loss_scale, long skipped, double peak, double elapsed) {
    const train_config *t = &cfg->train;
    double seconds = now_seconds() - w->start;
    double seq_per_s = w->sequences / seconds, tokens_per_s = seq_per_s * t->seq_length;
    double tflops = w->flops / seconds * 1e-12;
    double real_tokens_per_s = w->real_tokens / seconds, tflops_real = w->flops_real / seconds * 1e-12;
    double mlm_acc = w->n_pred ? (double)w->mlm_correct / w->n_pred : 0.0;
    double nsp_acc = w->sequences ? (double)w->nsp_correct / w->sequences : 0.0;
    double eta = seconds / w->steps * (double)(t->steps - step);
    char peak_text[32] = "";
    if (peak > 0) snprintf(peak_text, sizeof peak_text, " (%.1f%% of peak)", 100.0 * tflops / peak);
    char scale_text[64] = "";
    if (scaler->dynamic || scaler->scale != 1.0)
        snprintf(scale_text, sizeof scale_text, " | scale %g | skipped %ld", loss_scale, skipped);
    // An MLM-only model has no NSP numbers: none shown, none in the metrics line.
    int nsp = !cfg->model.mlm_only;
    char nsp_text[40] = "";
    if (nsp) snprintf(nsp_text, sizeof nsp_text, " | nsp loss %.4f", w->nsp_loss / w->steps);
    printf("step %5ld/%d | mlm loss %.4f%s | mlm acc %.3f | lr %.3e%s | "
           "%.1f seq/s | %.0f tok/s | %.3g TFLOP/s%s | eta %.0fs\n",
           step, t->steps, w->mlm_loss / w->steps, nsp_text, mlm_acc, lr, scale_text, seq_per_s, tokens_per_s,
           tflops, peak_text, eta);
    fflush(stdout);
    if (!metrics_sink_active(metrics)) return 0;
    json_t *line = json_pack("{s:I, s:i, s:f, s:f, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:f}", "step",
                             (json_int_t)step, "steps", t->steps, "mlm_loss", w->mlm_loss / w->steps, "mlm_accuracy",
                             mlm_acc, "lr", lr, "loss_scale", loss_scale, "skipped_steps", (json_int_t)skipped,
                             "seq_per_s", seq_per_s, "tokens_per_s", tokens_per_s, "model_tflops", tflops, "eta_s",
                             eta, "elapsed_s", elapsed);
    if (nsp) {
        json_object_set_new(line, "nsp_loss", json_real(w->nsp_loss / w->steps));
        json_object_set_new(line, "nsp_accuracy", json_real(nsp_acc));
    }
    json_object_set_new(line, "peak_percent", peak > 0 ? json_real(100.0 * tflops / peak) : json_null());
    // The same rates over the real tokens only: the work a step without padding would do.
    json_object_set_new(line, "real_tokens_per_s", json_real(real_tokens_per_s));
    json_object_set_new(line, "model_tflops_real", json_real(tflops_real));
    metrics_sink_write(metrics, line);  // a failed write of the file: *metrics->write_errno
    json_decref(line);
    return 0;
}

// What the command line asks for (parse_args).
typedef struct {
    const char *path, *resume, *init_from, *eval_json;
    char *overrides[256];
    int n_overrides, dry_run, ranks, help, overwrite, no_next, init_tile;
} train_args;

// Everything one run holds, from the plan to the report.
typedef struct {
    const char *path;
    const train_args *args;
    run_config cfg;
    const backend_t *be;
    int rank, world_size;
    char resume_dir[1200];  // the checkpoint resumed from; empty for a fresh start
    char init_dir[1200];    // the checkpoint of --init-from; empty without it
    checkpoint from;        // open between restore_open and restore_state
    FILE *metrics;          // rank 0's metrics file, or NULL
    tb_writer *tb;          // rank 0's TensorBoard events (train.tensorboard_dir), or NULL
    metrics_sink sink;      // both, for the log and eval lines
    int metrics_errno;      // of its first failed write: the run stops, then fails
    train_data *data;
    bert_model model;
    optim_state opt;
    loss_scaler scaler;
    batch_t *micro;
    // `applied` counts the updates LAMB applied: the schedule advances with it, and a step
    // skipped for overflow is retried with the same rate. `iteration` numbers the batches.
    long applied, skipped, first_iteration;
    int stopped, paused;
    // For the summary: updates and sequences of this job, its loop's seconds, the run's
    // seconds over all its jobs (continued from the checkpoint resumed from), the last
    // checkpoint written.
    long first_applied, sequences;
    double loop_s, elapsed_s;
    char last_checkpoint[1200];
} train_run;

// A metrics line as TensorBoard events (rank 0). A failed write is said once and ends the
// events, not the run (the metrics file, when set, holds every line).
static void tensorboard_line(void *ctx, const json_t *line) {
    train_run *r = ctx;
    int err = tb_write_line(r->tb, line);
    if (!err) return;
    fprintf(stderr, "bertpre: warning: writing %s (train.tensorboard_dir) failed: %s; no more TensorBoard events this "
            "run\n", tb_path(r->tb), strerror(err));
    tb_close(r->tb);
    r->tb = NULL;
    r->sink.also = NULL;
}

// What --eval-json may not be written over: the run's inputs, and the directories it reads or
// writes whole.
static eval_inputs eval_json_inputs(const train_run *r) {
    const train_config *t = &r->cfg.train;
    return (eval_inputs){{r->path, t->tokenizer, t->data, t->eval_data, t->metrics_file, t->checkpoint_dir,
                          r->init_dir[0] ? r->init_dir : r->resume_dir},
                         {"the config", "train.tokenizer", "train.data", "train.eval_data", "train.metrics_file",
                          "train.checkpoint_dir", r->init_dir[0] ? "--init-from" : "--resume"}};
}

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
         "or from checkpoint DIR (a checkpoint root: its newest)"},
        {"--init-from", CLI_STRING, &a->init_from, "DIR",
         .help = "starts a new run from a checkpoint's weights (phase 2 from phase 1, or an import; a checkpoint "
         "root: its newest)"},
        {"--init-tile", CLI_FLAG, &a->init_tile, NULL,
         .help = "with --init-from: the checkpoint is a smaller model of the same architecture, tiled into the "
         "config's (wider, deeper) model as ModernBERT-large was started from ModernBERT-base"},
        {"--overwrite-checkpoints", CLI_FLAG, &a->overwrite, NULL,
         .help = "a new run removes the checkpoints already in train.checkpoint_dir (else it refuses them)"},
        {"--no-next", CLI_FLAG, &a->no_next, NULL,
         .help = "leaves the commands that come next out of the summary and the stop message (for scripts that "
         "print their own)"},
        {"--eval-json", CLI_STRING, &a->eval_json, "FILE",
         .help = "also writes the evaluation of train.eval_data after training to FILE, the JSON object of bertpre "
         "eval --json", .shown_default = "none"},
        {NULL},
    };
    // The usage's text: the prose above, then every config field from engine/config.c's tables.
    static char *about;
    size_t about_size;
    FILE *text = open_memstream(&about, &about_size);
    fputs(about_train, text);
    config_doc_text(text);
    fclose(text);
    const cli_command command = {"train",
                                 "train CONFIG [--set section.field=value ...] [--dry-run [--ranks N]]\n"
                                 "   [--resume auto|DIR] [--init-from DIR [--init-tile]] [--overwrite-checkpoints]\n"
                                 "   (under [mpirun -np N])",
                                 about, notes_train, options, "CONFIG", 1, 1};
    char *operands[1];
    int n = 0;
    a->help = cli_parse(&command, argc, argv, operands, &n);
    if (a->help) return;
    a->path = operands[0];
    a->n_overrides = sets.n;
    if (a->ranks && !a->dry_run) fatal("train: --ranks plans a launch and goes with --dry-run; ranks come from mpirun");
    if (a->resume && a->init_from)
        fatal("train: --resume continues a run and --init-from starts a new one from weights: give one of them");
    if (a->init_tile && !a->init_from)
        fatal("train: --init-tile tiles the weights of --init-from's checkpoint: give --init-from DIR with it");
}

// Loads and checks the config, picks the backend, prints the plan and checks its memory.
static void plan_run(train_run *r, const train_args *a) {
    dist_init();
    r->world_size = dist_world_size();
    r->rank = dist_rank();
    r->path = a->path;
    // Every rank reads the same config and meets the same error in it: rank 0 alone says it
    // (the others' stderr is quiet while they read it, and they exit 1 as it does).
    int saved_stderr = -1;
    if (r->rank > 0) {
        int quiet = open("/dev/null", O_WRONLY | O_CLOEXEC);
        saved_stderr = quiet >= 0 ? dup(STDERR_FILENO) : -1;
        if (saved_stderr >= 0) dup2(quiet, STDERR_FILENO);
        if (quiet >= 0) close(quiet);
    }
    run_config_load(&r->cfg, a->path, a->n_overrides, (char **)a->overrides, a->ranks ? a->ranks : r->world_size);
    if (saved_stderr >= 0) dup2(saved_stderr, STDERR_FILENO), close(saved_stderr);
#if BERTPRE_HAVE_CUDA && BERTPRE_HAVE_CUDA_EMU
    // A dry run on a machine without a GPU (a login node) plans backend cuda with its
    // emulation: the same kernels, buffers and memory plan.
    if (a->dry_run && !strcmp(r->cfg.train.backend, "cuda") && cuda_device_count() == 0) {
        snprintf(r->cfg.train.backend, sizeof r->cfg.train.backend, "cuda-emu");
        if (r->rank == 0)
            printf("no GPU visible: the plan of backend cuda is made with its emulation (cuda-emu: the same "
                   "kernels, buffers and memory plan)\n");
    }
#endif
    r->be = backend_select(&r->cfg.train, a->path);
    comm_setup(r->be, &r->cfg.train, a->path);  // the rank's GPU before any other device call; NCCL
    zero_check(&r->cfg.train, r->be, a->path);
    const train_config *t = &r->cfg.train;
    if (t->steps_this_run && !t->checkpoint_dir[0])
        fatal("%s: section 'train': field 'steps_this_run' = %d stops the run early, which needs "
              "'checkpoint_dir' to continue from", a->path, t->steps_this_run);
    memory_plan plan = bert_memory_plan(&r->cfg.model, r->be, t->micro_batch_size, t->seq_length,
                                        t->max_predictions_per_seq);
    zero_plan(&plan, t, r->be);
    optim_plan(&plan, t);
    comm_plan(&plan, t, r->be);
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
        cli_checkpoint_dir("train --resume", a->resume, r->resume_dir, sizeof r->resume_dir);
    }
    // A checkpoint root (train.checkpoint_dir of a run) stands for its newest checkpoint, as in eval and export.
    if (a->init_from) cli_checkpoint_dir("train --init-from", a->init_from, r->init_dir, sizeof r->init_dir);
    memset(&r->from, 0, sizeof r->from);
    if (r->resume_dir[0] || r->init_dir[0]) {
        checkpoint_open(&r->from, r->resume_dir[0] ? r->resume_dir : r->init_dir);
        if (r->resume_dir[0]) checkpoint_check_resume(&r->from, &r->cfg, r->path);
        else if (a->init_tile) checkpoint_check_tile(&r->from, &r->cfg.model, r->path);
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
    if (r->rank == 0 && t->tensorboard_dir[0]) {
        r->tb = tb_open(t->tensorboard_dir);
        printf("  TensorBoard: events in %s as the run goes (tensorboard --logdir %s)\n", tb_path(r->tb),
               t->tensorboard_dir);
    }
    r->sink = (metrics_sink){r->metrics, &r->metrics_errno, r->tb ? tensorboard_line : NULL, r};
    // The data first: a missing shard or a tokenizer that does not fit the model is reported
    // before any memory is allocated.
    r->data = train_data_open(&r->cfg, r->rank, r->world_size);
    bert_init(&r->model, &r->cfg.model, r->be, t->micro_batch_size, t->seq_length, t->max_predictions_per_seq);
    bert_init_weights(&r->model, (uint64_t)t->seed);
    r->model.label_smoothing = (float)t->label_smoothing;
    r->model.unpad = unpad_mode_of(t->unpad);
    if (r->rank == 0) printf("  %zu parameters\n", r->model.n_params);
    optim_init_config(&r->opt, t, r->be, r->model.n_params);
    loss_scaler_init_for(&r->scaler, t);
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
        r->elapsed_s = resumed.elapsed_s;
        r->scaler = resumed.scaler;
        train_data_resume(r->data,
                          schedule_first_micro_batch(&r->cfg.train, r->first_iteration, r->rank),
                          resumed.cursors + (size_t)r->rank * resumed.cursor_len, resumed.cursor_len,
                          r->resume_dir);
        free(resumed.cursors);
        if (r->rank == 0) printf("  resumed from %s at step %ld\n", r->resume_dir, r->applied);
    } else if (a->init_from && a->init_tile) {
        checkpoint_load_tiled(&r->from, &r->model);
        if (r->rank == 0)
            printf("  weights from %s, tiled from %d layers of %d into %d of %d\n", r->init_dir,
                   r->from.model.num_hidden_layers, r->from.model.hidden_size, r->model.cfg.num_hidden_layers,
                   r->model.cfg.hidden_size);
    } else if (a->init_from) {
        checkpoint_load_weights(&r->from, &r->model);
        const char *heads = checkpoint_heads_note(&r->from, &r->cfg.model);
        if (r->rank == 0) printf("  weights from %s%s%s\n", r->init_dir, heads ? ": " : "", heads ? heads : "");
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
    w->real_tokens += s->real_tokens;
    w->flops_real += model_flops_real(&cfg->model, s->sequences, s->real_tokens, s->real_tokens_sq, s->n_pred);
}

// Peak of all ranks' GPUs for "% of peak": only on a GPU, from the config or the name the
// backend gives its device.
static double peak_tflops(const train_run *r) {
    const train_config *t = &r->cfg.train;
    if (!strcmp(r->be->name, "cpu")) return 0.0;
    return r->world_size * (t->peak_tflops > 0 ? t->peak_tflops
                                               : gpu_peak_tflops(r->be->device_name ? r->be->device_name() : NULL));
}

// The checkpoint of the run after the batches up to `iteration`, and before it the metrics
// file fsynced (it is a log, appended and flushed a line at a time): after a crash the file
// holds every line up to the checkpoint a resume starts from. A device or FIFO that cannot
// sync (EINVAL) is left as it is.
static void save_run_checkpoint(train_run *r, uint32_t iteration) {
    if (r->metrics && fsync(fileno(r->metrics)) != 0 && errno != EINVAL && !r->metrics_errno)
        r->metrics_errno = errno;
    save_checkpoint(r->path, &r->cfg, r->data, &r->model, &r->opt, &r->scaler, r->applied, (long)iteration + 1,
                    r->skipped, r->elapsed_s, r->rank, r->last_checkpoint, sizeof r->last_checkpoint);
}

// The log line (rank 0) and metrics line of the steps in `w`, which starts anew.
static void log_window_line(train_run *r, log_window *w, double lr, double loss_scale, double peak) {
    int err = r->rank == 0 ? log_step(&r->cfg, &r->sink, w, r->applied, lr, &r->scaler, loss_scale, r->skipped,
                                      peak, r->elapsed_s)
                           : 0;
    if (err && !r->metrics_errno) r->metrics_errno = err;
    *w = (log_window){.start = now_seconds()};
}

// The training loop: steps until train.steps, train.steps_this_run or a stop signal, with
// log lines and checkpoints.
static void train_loop(train_run *r) {
    const train_config *t = &r->cfg.train;
    int rank = r->rank;
    double peak = peak_tflops(r), start = now_seconds(), before = r->elapsed_s;
    log_window w = {.start = start};
    long first_applied = r->first_applied = r->applied;
    for (uint32_t iteration = (uint32_t)r->first_iteration; r->applied < t->steps && !r->stopped; iteration++) {
        train_data_fill(r->data, &r->cfg, r->micro, schedule_accumulation(t, iteration),
                        schedule_first_micro_batch(t, iteration, rank));
        double lr;
        step_stats s = train_iteration(&r->model, &r->opt, &r->scaler, t, r->micro, r->applied, 1, iteration, &lr);
        if (s.skipped) r->skipped++;
        else r->applied++;
        window_add(&w, &r->cfg, &s);
        r->sequences += s.sequences;
        r->elapsed_s = before + now_seconds() - start;
        if ((!s.skipped && r->applied % t->log_every == 0) || r->applied == t->steps)
            log_window_line(r, &w, lr, s.loss_scale, peak);
        r->stopped = stop_requested(r->world_size, r->metrics_errno != 0);
        r->paused = t->steps_this_run && r->applied - first_applied == t->steps_this_run && r->applied < t->steps;
        // A stop between log lines: the steps since the last line get theirs before the checkpoint.
        if ((r->stopped || r->paused) && w.steps > 0) log_window_line(r, &w, lr, s.loss_scale, peak);
        int due = !s.skipped && t->checkpoint_every && r->applied % t->checkpoint_every == 0;
        int saved = t->checkpoint_dir[0] && (due || r->stopped || r->paused || r->applied == t->steps);
        if (saved) {
            save_run_checkpoint(r, iteration);
            if (w.steps == 0) w.start = now_seconds();  // the next log window leaves the write out
        }
        r->stopped |= r->paused;
        // train.eval_every: an evaluation off the clock (the final one comes after the loop);
        // every rank takes part (the rows are shared out and the sums reduced), rank 0 prints.
        if (t->eval_every && !s.skipped && r->applied % t->eval_every == 0 && r->applied < t->steps &&
            !r->stopped) {
            double t0 = now_seconds();
            // A failed metrics line stops the run at the next step's stop check. A stop signal
            // ends the evaluation between micro-batches, and the run at this step.
            eval_result ev = train_data_evaluate(r->data, &r->cfg, &r->model, &r->micro[0], r->applied,
                                                 before + t0 - start, &r->sink, &stop_signal);
            double spent = now_seconds() - t0;
            start += spent;
            w.start += spent;
            if (ev.interrupted) {
                r->stopped = 1;
                if (t->checkpoint_dir[0] && !saved)
                    save_run_checkpoint(r, iteration);
            }
        }
    }
    r->loop_s = now_seconds() - start;
    r->elapsed_s = before + r->loop_s;
}

// `prefix` and `text` on stdout, the text in single quotes when the shell would read it otherwise.
static void print_quoted(const char *prefix, const char *text) {
    fputs(prefix, stdout);
    if (text[0] && strspn(text, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,/:=+@%") ==
                       strlen(text)) {
        fputs(text, stdout);
        return;
    }
    putchar('\'');
    for (const char *c = text; *c; c++) fputs(*c == '\'' ? "'\\''" : (char[]){*c, 0}, stdout);
    putchar('\'');
}

// tools/plot_metrics.py of the source tree this binary was built in (BUILD/bertpre beside
// SOURCE/tools), absolute; 0 when it is not there (an installed binary).
static int plot_metrics_tool(char *path, size_t size) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = 0;
    snprintf(path, size, "%s/../tools/plot_metrics.py", dirname(exe));
    char real[PATH_MAX];
    if (!realpath(path, real) || access(real, X_OK) != 0) return 0;
    snprintf(path, size, "%s", real);
    return 1;
}

// The end of a run on rank 0, as the demo ends: what was done, how fast, where it is, the
// held-out numbers, and the commands that come next.
static void print_summary(const train_run *r, const eval_result *ev) {
    const train_config *t = &r->cfg.train;
    double seq_per_s = r->loop_s > 0 ? r->sequences / r->loop_s : 0.0;
    if (r->applied == r->first_applied)
        printf("\nsummary: no step run (step %ld of %d)\n", r->applied, t->steps);
    else
        printf("\nsummary: steps %ld-%ld of %d in %.1f s (%.1f s over the run's jobs), %.1f seq/s, %.0f tok/s\n",
               r->first_applied + 1, r->applied, t->steps, r->loop_s, r->elapsed_s, seq_per_s,
               seq_per_s * t->seq_length);
    // The newest checkpoint of the run: this job's last, or the one it resumed from.
    const char *ckpt = r->last_checkpoint[0] ? r->last_checkpoint : r->resume_dir;
    if (ckpt[0]) printf("  checkpoint  %s\n", ckpt);
    else printf("  checkpoint  none (%s)\n", t->checkpoint_dir[0] ? "none written" : "train.checkpoint_dir is not set");
    if (t->metrics_file[0]) printf("  metrics     %s\n", t->metrics_file);
    char nsp_text[48] = "";
    if (!ev->mlm_only) snprintf(nsp_text, sizeof nsp_text, ", NSP accuracy %.3f (chance: 0.5)", ev->nsp_accuracy);
    if (ev->sequences && !ev->n_pred)
        printf("  held out    %ld sequences of %s: no masked positions (MLM numbers undefined)%s\n", ev->sequences,
               t->eval_data, nsp_text);
    else if (ev->sequences)
        printf("  held out    %ld sequences of %s: MLM loss %.3f, MLM accuracy %.3f (most frequent token alone: "
               "%.3f)%s\n",
               ev->sequences, t->eval_data, ev->mlm_loss, ev->mlm_accuracy, ev->mlm_baseline_accuracy, nsp_text);
    if (r->args->no_next) return;
    // Each line runs as printed from this directory: the program as started, the config as
    // given, every --set of this run.
    const char *prog = strchr(cli_program, '/') ? cli_program : "bertpre";
    printf("next:\n");
    if (r->applied < t->steps && ckpt[0]) {
        printf("  %s train %s", prog, r->path);
        for (int i = 0; i < r->args->n_overrides; i++) print_quoted(" --set ", r->args->overrides[i]);
        printf(" --resume auto   # continue to step %d\n", t->steps);
    }
    if (ckpt[0]) {
        if (t->eval_data[0]) {
            printf("  %s eval %s --data", prog, ckpt);
            print_quoted(" ", t->eval_data);
            printf("   # evaluate it again\n");
        }
        printf("  %s export %s --out export-step-%ld   # a Hugging Face model directory\n", prog, ckpt,
               r->applied);
    }
    char plot[PATH_MAX];
    if (t->metrics_file[0] && plot_metrics_tool(plot, sizeof plot))
        printf("  %s %s --out %s.png   # plot the losses\n", plot, t->metrics_file, t->metrics_file);
    if (!t->checkpoint_dir[0]) printf("  set train.checkpoint_dir to keep the weights of a run\n");
    fflush(stdout);
}

// How the run ended, the evaluation of a finished run, and the metrics file closed. A failed
// metrics write ends the run with an error, after the checkpoint the loop wrote on stopping
// (or, in the evaluation's line, after the last one).
static void report_run(train_run *r) {
    const train_config *t = &r->cfg.train;
    const char *hint = r->args->no_next ? "" : "; continue with --resume auto";
    if (r->paused && r->rank == 0) {
        printf("train.steps_this_run = %d steps done (step %ld of %d)%s\n", t->steps_this_run, r->applied, t->steps,
               hint);
    } else if (r->stopped && r->rank == 0 && !r->metrics_errno) {
        char cause[64] = "a signal to another rank";
        if (stop_signal) snprintf(cause, sizeof cause, "signal %d", (int)stop_signal);
        if (t->checkpoint_dir[0])
            printf("stopped by %s after step %ld%s\n", cause, r->applied, r->args->no_next ? "" : "; resume with --resume auto");
        else
            printf("stopped by %s after step %ld; no train.checkpoint_dir, so nothing was saved\n", cause,
                   r->applied);
    }
    // The checkpoint of a finished run is written: Ctrl-C during the evaluation ends it at once.
    struct sigaction now, plain = {.sa_handler = SIG_DFL};
    if (sigaction(SIGINT, NULL, &now) == 0 && now.sa_handler == on_stop_signal) sigaction(SIGINT, &plain, NULL);
    // After a run that finished, each rank evaluates its share of the eval rows; rank 0 writes.
    eval_result ev = {0};
    if (!r->stopped)
        ev = train_data_evaluate(r->data, &r->cfg, &r->model, &r->micro[0], r->applied, r->elapsed_s, &r->sink, NULL);
    if (r->rank == 0) print_summary(r, &ev);
    if (r->rank == 0 && r->args->eval_json && !r->stopped && t->eval_data[0]) {
        const char *ckpt = r->last_checkpoint[0] ? r->last_checkpoint : r->resume_dir;
        eval_inputs inputs = eval_json_inputs(r);
        eval_json_write(r->args->eval_json, "--eval-json", &inputs, &ev, ckpt, t->eval_data, &r->cfg);
    }
    if (r->metrics) {
        int err = close_written(r->metrics);
        if (err && !r->metrics_errno) r->metrics_errno = err;
        r->metrics = r->sink.file = NULL;
    }
    if (r->tb && tb_close(r->tb) != 0)
        fprintf(stderr, "bertpre: warning: closing the TensorBoard event file failed: %s\n", strerror(errno));
    r->tb = NULL;
    r->sink.also = NULL;
    if (r->metrics_errno) {
        char saved[1300] = "nothing was saved (no train.checkpoint_dir)";
        if (t->checkpoint_dir[0])
            snprintf(saved, sizeof saved, "its checkpoint is in %s: continue with --resume auto once the file can "
                     "be written", t->checkpoint_dir);
        fatal("writing the metrics file '%s' (train.metrics_file) failed: %s (errno %d); the run stopped after step "
              "%ld and %s", t->metrics_file, strerror(r->metrics_errno), r->metrics_errno, r->applied, saved);
    }
}

// SIGTERM, SIGUSR1 (schedulers' preemption), SIGHUP and a first SIGINT only set the flag that the
// loop reads between steps; SIGINT then goes back to its default, so a second one ends the
// process at once. An ignored SIGINT (a job started in the background) stays ignored.
static void install_stop_handlers(const train_config *t) {
    struct sigaction action = {.sa_handler = on_stop_signal}, before;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGUSR1, &action, NULL);
    // SIGHUP (the terminal or ssh session closed) as SIGTERM, unless ignored (nohup).
    if (sigaction(SIGHUP, NULL, &before) == 0 && before.sa_handler != SIG_IGN) sigaction(SIGHUP, &action, NULL);
    snprintf(interrupt_text, sizeof interrupt_text,
             "bertpre: SIGINT: stopping after this step%s, as SIGTERM does; a second Ctrl-C stops at once\n",
             t->checkpoint_dir[0] ? " with a checkpoint" : " (no train.checkpoint_dir: nothing is saved)");
    action.sa_flags = SA_RESETHAND;
    if (sigaction(SIGINT, NULL, &before) == 0 && before.sa_handler != SIG_IGN) sigaction(SIGINT, &action, NULL);
}

static void free_run(train_run *r) {
    train_data_close(r->data);
    for (int k = 0; k < r->cfg.train.accumulation_steps; k++) batch_free(&r->micro[k]);
    free(r->micro);
    optim_free(&r->opt);
    zero_detach(&r->model);
    bert_free(&r->model);
}

// --eval-json: a config with train.eval_data, and a file that can be written (made and removed).
static void check_eval_json(const train_run *r, const train_args *a) {
    if (!a->eval_json || r->rank != 0) return;
    if (!r->cfg.train.eval_data[0])
        fatal("train --eval-json %s: %s sets no train.eval_data, so there is no evaluation to write", a->eval_json,
              r->path);
    eval_inputs inputs = eval_json_inputs(r);
    eval_json_probe(a->eval_json, "--eval-json", &inputs);
}

// The run's checks without its work or writes: the checkpoint directory's lock (tried and let
// go), the checkpoint it starts from against the config and its weights (and a resume's
// optimizer state) finite, the
// checkpoint directory, the metrics file's directory, the data and tokenizer (shard headers,
// the vocabulary), and a resumed run's data cursors against the data.
static void dry_run_checks(train_run *r, const train_args *a) {
    check_eval_json(r, a);
    if (r->rank == 0) preflight_metrics_target(&r->cfg, r->path);
    if (r->rank == 0) preflight_lock_checkpoint_dir(&r->cfg.train, r->path, 1);
    restore_open(r, a);
    if ((r->init_dir[0] || r->resume_dir[0]) && r->rank == 0)
        checkpoint_check_weights(&r->from, r->resume_dir[0] != 0);
    if (r->rank == 0)
        preflight_checkpoint_dir(&r->cfg.train, r->path, a->resume != NULL, a->overwrite,
                                 r->resume_dir[0] ? r->resume_dir : a->init_from ? r->init_dir : NULL, 1);
    // The metrics file the run opens, without creating it: an existing file, or its directory, writable.
    if (r->rank == 0 && r->cfg.train.tensorboard_dir[0]) tb_check(r->cfg.train.tensorboard_dir);
    const char *metrics = r->cfg.train.metrics_file;
    if (r->rank == 0 && metrics[0]) {
        char copy[1200];
        snprintf(copy, sizeof copy, "%s", metrics);
        int ok = access(metrics, F_OK) == 0 ? access(metrics, W_OK) == 0 : access(dirname(copy), W_OK) == 0;
        check_file(ok, metrics, "opening the metrics file (train.metrics_file)");
    }
    train_data *data = train_data_open(&r->cfg, r->rank, r->world_size);
    // Planned for another number of ranks (--ranks), the cursors are not this launch's.
    if (r->resume_dir[0] && r->cfg.train.world_size == r->world_size) {
        train_state s;
        checkpoint_read_state(&r->from, &r->cfg, &s);
        train_data_resume(data,
                          schedule_first_micro_batch(&r->cfg.train, s.iteration, r->rank),
                          s.cursors + (size_t)r->rank * s.cursor_len, s.cursor_len, r->resume_dir);
        free(s.cursors);
    }
    train_data_close(data);
    if (r->resume_dir[0] || a->init_from) checkpoint_close(&r->from);
}

int cmd_train(int argc, char **argv) {
    static train_args a;
    static train_run r;
    parse_args(argc, argv, &a);
    if (a.help) return 0;
    r.args = &a;
    plan_run(&r, &a);
    if (a.dry_run) {
        dry_run_checks(&r, &a);
        comm_finish();
        dist_finalize();
        return 0;
    }
    if (r.rank == 0) preflight_metrics_target(&r.cfg, r.path);  // before anything is written
    check_eval_json(&r, &a);
    if (r.rank == 0) preflight_lock_checkpoint_dir(&r.cfg.train, r.path, 0);
    restore_open(&r, &a);
    if (r.rank == 0) {
        preflight_checkpoint_dir(&r.cfg.train, r.path, a.resume != NULL, a.overwrite,
                                 r.resume_dir[0] ? r.resume_dir : a.init_from ? r.init_dir : NULL, 0);
        preflight_metrics_file(&r.cfg.train, r.resume_dir[0] != 0);
    }
    setup_run(&r);
    if (r.rank == 0) preflight_disk_space(&r.cfg.train, r.model.n_params);
    restore_state(&r, &a);
    const train_config *t = &r.cfg.train;
    install_stop_handlers(t);
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
