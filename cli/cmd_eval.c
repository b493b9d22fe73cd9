// bertpre eval: a checkpoint's MLM and NSP loss and accuracy (MLM alone for an MLM-only model)
// on HDF5 shards, through the evaluation that `bertpre train` runs on train.eval_data after
// training (evaluate_shards in engine/train_data.c): the same shards, batches and backend give
// the same numbers. One line on stdout, and with --json a JSON object with every number.
#include <jansson.h>
#include <stdio.h>
#include <string.h>
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

void eval_json_probe(const char *path, const char *option) {
    char tmp[1400], what[96];
    staged_file_name(path, tmp, sizeof tmp);
    snprintf(what, sizeof what, "opening the result file (%s)", option);
    FILE *probe = fopen(tmp, "w");
    check_file(probe != NULL, path, what);
    fclose(probe);
    remove(tmp);
}

void eval_json_write(const char *path, const char *option, const eval_result *r, const char *checkpoint,
                     const char *data, const run_config *cfg) {
    const train_config *t = &cfg->train;
    char tmp[1400], what[96];
    staged_file_name(path, tmp, sizeof tmp);
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
    check_file(write_json_file(tmp, o, JSON_INDENT(2)) == 0, tmp, what);  // reals in their shortest exact form
    json_decref(o);
    check_file(staged_file_commit(tmp, path, 1) == 0, path, what);
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
    if (json_path && rank == 0) eval_json_probe(json_path, "--json");  // before any work

    char dir[1200];
    cli_checkpoint_dir("eval", operands[0], dir, sizeof dir);
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
    eval_result r = evaluate_shards(&m, data, batches, (uint64_t)t->seed, &scratch, NULL);
    if (rank == 0) {
        char capped[96] = "";
        if (t->micro_batch_size < asked)
            snprintf(capped, sizeof capped, " (the rows a rank evaluates; %d asked)", asked);
        printf("eval: %s on %s (%s activations), micro-batch %d%s x %d, %ld batches\n", dir, be->name, t->precision,
               t->micro_batch_size, capped, t->seq_length, r.batches);
        eval_result_print(&r, data, stdout);
    }
    if (json_path && rank == 0) eval_json_write(json_path, "--json", &r, dir, data, &cfg);
    batch_free(&scratch);
    bert_free(&m);
    backend_release(be);
    checkpoint_close(&c);
    dist_finalize();
    return 0;
}
