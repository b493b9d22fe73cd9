// bertpre eval: a checkpoint's MLM and NSP loss and accuracy (MLM alone for an MLM-only model)
// on HDF5 shards, through the evaluation that `bertpre train` runs on train.eval_data after
// training (evaluate_shards in engine/train_data.c): the same shards, batches and backend give
// the same numbers. One line on stdout, and with --json a JSON object with every number.
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/commands.h"
#include "data/synthetic.h"
#include "engine/checkpoint.h"
#include "engine/dist.h"
#include "engine/model.h"
#include "kernels/common/files.h"
#include "engine/backend.h"
#include "engine/train_data.h"
#include "kernels/common/check.h"

static const char *about_eval =
    "Runs the model of CHECKPOINT (a checkpoint directory, or a train.checkpoint_dir: its newest\n"
    "complete checkpoint) forward without dropout over every row of the shards once (the last\n"
    "micro-batch holds the rows left), in file order with their stored masks, and prints the\n"
    "MLM loss (per masked position), the NSP loss (per sequence), the masked-LM accuracy\n"
    "(MLPerf's metric: correct predictions over the masked positions present) and the NSP\n"
    "accuracy: the numbers `bertpre train` prints for train.eval_data. A checkpoint trained with\n"
    "train.objective mlm has no NSP head: MLM numbers alone.\n"
    "Micro-batch, sequence length, max predictions and seed come from the checkpoint's\n"
    "training config (a weights-only checkpoint: micro-batch 8, seed 42, the shards' shape).\n"
    "A directory in SHARDS that holds prep's held-out eval-* shards means those alone (as in\n"
    "train.eval_data); eval prints the shards it reads. Under mpirun the rows are shared out\n"
    "over the ranks and the sums added: the same numbers up to summation order.\n";

static const char *backends = "auto|cpu|cuda|cuda-emu", *precisions = "auto|fp32|fp16|bf16";

// An integer field of the checkpoint's training config, or `fallback` (weights-only checkpoints).
static int train_field(const checkpoint *c, const char *name, int fallback) {
    json_t *v = json_object_get(json_object_get(json_object_get(c->state, "config"), "train"), name);
    return json_is_integer(v) ? (int)json_integer_value(v) : fallback;
}

// Whether a file holds an earlier result (a JSON object with the keys every result has).
static int holds_result(const char *path) {
    json_t *o = json_load_file(path, 0, NULL);
    int ok = json_is_object(o) && json_object_get(o, "checkpoint") && json_object_get(o, "data") &&
             json_object_get(o, "sequences") && json_object_get(o, "masked_positions");
    json_decref(o);
    return ok;
}

// The path a symbolic link names when that file does not exist yet and its directory does (a
// chain of links, or a missing directory: NULL, errno set).
static char *link_to_new_file(const char *link) {
    char target[1200], joined[2400];
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0) return NULL;
    target[n] = 0;
    const char *slash = strrchr(link, '/');
    if (target[0] == '/' || !slash) snprintf(joined, sizeof joined, "%s", target);
    else snprintf(joined, sizeof joined, "%.*s/%s", (int)(slash - link), link, target);
    struct stat st;
    if (lstat(joined, &st) == 0) return NULL;  // it exists (as a link): realpath said why not
    char *base = strrchr(joined, '/'), *dir;
    if (base) {
        *base = 0;
        dir = realpath(joined[0] ? joined : "/", NULL);
        base++;
    } else {
        dir = realpath(".", NULL);
        base = joined;
    }
    if (!dir) return NULL;
    char *out = malloc(strlen(dir) + strlen(base) + 2);
    check_alloc(out, strlen(dir) + strlen(base) + 2);
    sprintf(out, "%s/%s", dir, base);
    free(dir);
    errno = ENOENT;
    return out;
}

// Where the result goes (see commands.h): its kind, and in resolved[] the path written (a
// symbolic link's target). Each refusal names the option, the path and why.
static result_kind result_target(const char *path, const char *option, const eval_inputs *in, char *resolved,
                                 size_t size) {
    if (!strcmp(path, "-")) return RESULT_STDOUT;
    snprintf(resolved, size, "%s", path);
    struct stat st;
    if (lstat(path, &st) != 0) return RESULT_FILE;  // a new file (its directory is probed)
    if (S_ISLNK(st.st_mode)) {
        char *target = realpath(path, NULL);
        if (!target) target = link_to_new_file(path);  // a link to a file not written yet
        if (!target)
            fatal("%s %s: a symbolic link whose target cannot be reached (%s): give the file itself", option, path,
                  strerror(errno));
        snprintf(resolved, size, "%s", target);
        free(target);
        if (stat(resolved, &st) != 0) return RESULT_FILE;
    }
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return RESULT_STREAM;  // /dev/stdout, /dev/null, a pipe
    if (!S_ISREG(st.st_mode))
        fatal("%s %s: %s, not a file: the result is written to a file (new, or an earlier result), '-' (standard "
              "output), a character device or a FIFO", option, path,
              S_ISDIR(st.st_mode) ? "a directory" : S_ISSOCK(st.st_mode) ? "a socket" : "a block device");
    for (int i = 0; i < EVAL_INPUTS && in && in->path[i] && in->path[i][0]; i++) {
        char *dir = realpath(in->path[i], NULL), *file = realpath(resolved, NULL);
        struct stat is;
        int inside = 0;
        if (dir && file && stat(dir, &is) == 0 && S_ISDIR(is.st_mode)) {
            size_t n = strlen(dir);
            inside = !strncmp(file, dir, n) && file[n] == '/';
        }
        free(dir);
        free(file);
        if (inside || same_file(resolved, in->path[i]))
            fatal("%s %s: %s %s of this command (%s): the result would be written over it; choose another file",
                  option, path, inside ? "a file inside" : "is", in->what[i], in->path[i]);
    }
    if (st.st_size > 0 && !holds_result(resolved))
        fatal("%s %s: the file holds %lld bytes that are not an earlier evaluation result (a JSON object with "
              "\"checkpoint\", \"data\", \"sequences\"): an input named by mistake? The result would be written "
              "over it; choose another file, or move this one away", option, path, (long long)st.st_size);
    return RESULT_FILE;
}

void eval_json_probe(const char *path, const char *option, const eval_inputs *inputs) {
    char file[1200], tmp[1400], what[96];
    if (result_target(path, option, inputs, file, sizeof file) != RESULT_FILE) return;  // opened when written
    staged_file_name(file, tmp, sizeof tmp);
    snprintf(what, sizeof what, "opening the result file (%s)", option);
    FILE *probe = fopen(tmp, "w");
    check_file(probe != NULL, path, what);
    fclose(probe);
    remove(tmp);
}

void eval_json_write(const char *path, const char *option, const eval_inputs *inputs, const eval_result *r,
                     const char *checkpoint, const char *data, const run_config *cfg) {
    const train_config *t = &cfg->train;
    char file[1200], tmp[1400], what[96];
    result_kind kind = result_target(path, option, inputs, file, sizeof file);
    snprintf(what, sizeof what, "writing the result (%s)", option);
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:I, s:I}", "checkpoint", checkpoint, "data",
                          data, "objective", cfg->model.mlm_only ? "mlm" : "mlm+nsp", "backend", t->backend,
                          "precision", t->precision, "micro_batch_size", t->micro_batch_size, "seq_length",
                          t->seq_length, "batches", (int)r->batches, "sequences", (json_int_t)r->sequences,
                          "masked_positions", (json_int_t)r->n_pred, "mlm_correct", (json_int_t)r->mlm_correct);
    eval_nsp_json(o, r, 1);
    json_object_set_new(o, "mlm_baseline_accuracy", eval_mlm_json(r, r->mlm_baseline_accuracy));
    json_object_set_new(o, "mlm_loss", eval_mlm_json(r, r->mlm_loss));  // null without masked positions
    json_object_set_new(o, "mlm_accuracy", eval_mlm_json(r, r->mlm_accuracy));
    if (kind == RESULT_FILE) {
        staged_file_name(file, tmp, sizeof tmp);
        check_file(write_json_file(tmp, o, JSON_INDENT(2)) == 0, tmp, what);  // reals in their shortest exact form
        check_file(staged_file_commit(tmp, file, 1) == 0, path, what);
    } else {  // straight into standard output, the device or the FIFO
        char *text = json_dumps_exact(o, JSON_INDENT(2));
        check_alloc(text, 1);
        int fd = kind == RESULT_STDOUT ? STDOUT_FILENO : open(file, O_WRONLY | O_CLOEXEC);
        if (kind == RESULT_STDOUT) fflush(stdout);
        int ok = fd >= 0 && write_all(fd, text, strlen(text)) == 0 && write_all(fd, "\n", 1) == 0;
        int err = errno;
        if (kind == RESULT_STREAM && fd >= 0) ok = close(fd) == 0 && ok;
        free(text);
        errno = err;
        check_file(ok, kind == RESULT_STDOUT ? "standard output" : path, what);
    }
    json_decref(o);
}

int cmd_eval(int argc, char **argv) {
    const char *data = NULL, *json_path = NULL;
    int batches = 0, backend = 0, precision = 0, micro = 0;
    const cli_option options[] = {
        {"--data", CLI_STRING, &data, "SHARDS", .help = "HDF5 shards: a file, a directory or a glob, comma-separated",
         .required = 1},
        {"--batches", CLI_INT, &batches, "N",
         .help = "evaluates the first N micro-batches' rows (0: every row once)", 0, 1 << 30},
        {"--json", CLI_STRING, &json_path, "FILE", .help = "also writes every number to FILE as a JSON object",
         .shown_default = "none"},
        {"--backend", CLI_CHOICE, &backend, NULL, .help = "as train.backend", .choices = backends},
        {"--precision", CLI_CHOICE, &precision, NULL, .help = "as train.precision", .choices = precisions},
        {"--micro-batch", CLI_INT, &micro, "N", .help = "sequences per forward pass", 1, 1 << 20,
         .shown_default = "the checkpoint's train.micro_batch_size"},
        {NULL},
    };
    const cli_command command = {"eval", "eval CHECKPOINT --data SHARDS [--batches N] [--json FILE] [--backend B]",
                                 about_eval, NULL, options, "CHECKPOINT", 1, 1};
    char *operands[1];
    int n = 0;
    if (cli_parse(&command, argc, argv, operands, &n)) return 0;
    dist_init();
    int rank = dist_rank();
    char dir[1200];
    cli_checkpoint_dir("eval", operands[0], dir, sizeof dir);
    const eval_inputs inputs = {{dir, data}, {"the checkpoint", "--data"}};
    if (json_path && rank == 0) eval_json_probe(json_path, "--json", &inputs);  // before any work

    checkpoint c;
    checkpoint_open(&c, dir);
    run_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.model = c.model;
    train_config *t = &cfg.train;
    cli_choice_name(backends, backend, t->backend, sizeof t->backend);
    cli_choice_name(precisions, precision, t->precision, sizeof t->precision);
    t->seed = train_field(&c, "seed", 42);
    t->micro_batch_size = micro ? micro : train_field(&c, "micro_batch_size", 8);
    t->seq_length = train_field(&c, "seq_length", 0);
    t->max_predictions_per_seq = train_field(&c, "max_predictions_per_seq", 0);
    int shard_T, shard_P;
    long rows = eval_shards_shape(data, cfg.model.vocab_size, &shard_T, &shard_P);
    if (!t->seq_length) t->seq_length = shard_T, t->max_predictions_per_seq = shard_P;
    if (t->seq_length > cfg.model.max_position_embeddings)
        fatal("eval: the rows of %s hold %d tokens, but %s's model has max_position_embeddings = %d: evaluate it "
              "on shards of at most %d tokens (bertpre prep --seq-length)",
              data, t->seq_length, dir, cfg.model.max_position_embeddings, cfg.model.max_position_embeddings);
    // No micro-batch larger than the rows a rank evaluates (all of them with --batches, which
    // counts micro-batches): memory for the rows there are, not for the micro-batch asked.
    int world = dist_world_size();
    long most = batches ? (rows < (long)batches * t->micro_batch_size ? rows : (long)batches * t->micro_batch_size)
                        : (rows + world - 1) / world;
    int asked = t->micro_batch_size;
    if (most >= 1 && most < t->micro_batch_size) t->micro_batch_size = (int)most;
    const backend_t *be = backend_select(t, "eval --backend/--precision");
    int local_rank = 0, local_size = 1;
    dist_local_rank(&local_rank, &local_size);
    if (be->select_device) be->select_device(rank, local_rank, local_size);  // each rank its own GPU

    bert_model m;
    bert_init(&m, &cfg.model, be, t->micro_batch_size, t->seq_length, t->max_predictions_per_seq);
    checkpoint_load_weights(&c, &m);
    // m.unpad stays bert_init's UNPAD_AUTO: micro-batches with padding compute their real
    // tokens only (the same function as padded).
    batch_t scratch;
    batch_alloc(&scratch, t->micro_batch_size, t->seq_length, t->max_predictions_per_seq);
    // The header first (flushed: a piped log shows it before the progress lines), with the
    // micro-batches the ranks will run: rank r evaluates rows [r*R/W, (r+1)*R/W) of the R taken.
    if (rank == 0) {
        char capped[96] = "";
        if (t->micro_batch_size < asked)
            snprintf(capped, sizeof capped, " (the rows a rank evaluates; %d asked)", asked);
        long B = t->micro_batch_size, taken = batches > 0 && (long)batches * B < rows ? (long)batches * B : rows;
        long planned = 0;
        for (int k = 0; k < world; k++) planned += (taken * (k + 1) / world - taken * k / world + B - 1) / B;
        printf("eval: %s on %s (%s activations), micro-batch %d%s x %d, %ld batches\n", dir, be->name, t->precision,
               t->micro_batch_size, capped, t->seq_length, planned);
        fflush(stdout);
    }
    eval_result r = evaluate_shards(&m, data, batches, (uint64_t)t->seed, &scratch, NULL);
    if (rank == 0) eval_result_print(&r, data, stdout);
    if (json_path && rank == 0) eval_json_write(json_path, "--json", &inputs, &r, dir, data, &cfg);
    batch_free(&scratch);
    bert_free(&m);
    backend_release(be);
    checkpoint_close(&c);
    dist_finalize();
    return 0;
}
