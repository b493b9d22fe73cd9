// Where the training loop's micro-batches come from: HDF5 shards through the loader when
// train.data is set, synthetic batches otherwise; and the evaluation pass over
// train.eval_data after training.
#pragma once
#include <stdint.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include "data/batch.h"
#include "engine/config.h"
#include "engine/model.h"

typedef struct train_data train_data;

// Checks the tokenizer (if train.tokenizer is set) against the model's vocab_size and opens
// the loader; exits with a clear error when data is configured but HDF5 or SentencePiece
// support was not built. rank/world_size select this process's share of the samples.
train_data *train_data_open(const run_config *cfg, int rank, int world_size);
// Fills micro[0..accum): the next batches of this rank's share of the shards, or synthetic
// micro-batches numbered first, first + 1, ... in the run (the same numbers on any split of
// the global batch over ranks and micro-batches).
void train_data_fill(train_data *d, const run_config *cfg, batch_t *micro, int accum, uint32_t first);
// This rank's data cursor for a checkpoint, as integers: the loader's cursor (epoch,
// position, seed, rank, world size, samples), or for synthetic batches `next_first`, the
// number of the rank's next micro-batch. Returns the count (at most max).
int train_data_cursor(const train_data *d, uint32_t next_first, int64_t *out, int max);
// Continues from a cursor of train_data_cursor; exits naming `where` when it belongs to
// another data source, seed, rank or world size.
void train_data_resume(train_data *d, uint32_t next_first, const int64_t *cursor, int n, const char *where);
// One line describing the source, for the run's header.
const char *train_data_describe(const train_data *d);

// An evaluation: losses are means per masked position (MLM) and per sequence (NSP); the MLM
// accuracy is MLPerf's masked-LM accuracy: correct predictions over the masked positions
// actually present (padding slots of masked_lm_positions not counted).
// With no masked position in the rows (n_pred = 0) the MLM numbers are undefined: printed as
// such, null in JSON (eval_mlm_json), 0 here. An MLM-only model has no NSP numbers: they are 0
// here, left out of what is printed and of the JSON (eval_nsp_json).
typedef struct eval_result {
    long batches, sequences, n_pred, mlm_correct, nsp_correct;
    double mlm_loss, nsp_loss, mlm_accuracy, nsp_accuracy;
    double mlm_baseline_accuracy;  // of always predicting the most frequent masked token
    long rows;        // the rows asked for (all ranks)
    int interrupted;  // stopped by `cancel` before the end: the numbers are not reported
    int mlm_only;     // the model has no NSP head (bert_config.mlm_only)
} eval_result;
// An MLM number of r for JSON: null when r has no masked position.
json_t *eval_mlm_json(const eval_result *r, double value);
// Adds r's NSP numbers (nsp_loss, nsp_accuracy; and nsp_correct when `counts`) to the JSON
// object o, unless the model has no NSP head.
void eval_nsp_json(json_t *o, const eval_result *r, int counts);
// Where a metrics line goes: the open train.metrics_file (or NULL), and beside it another
// writer (the command line's TensorBoard events, `also`; NULL: none). A failed write of the
// file sets *write_errno when still 0, for the caller, which stops the run; `also` reports
// its own failures.
typedef struct {
    FILE *file;
    int *write_errno;
    void (*also)(void *ctx, const json_t *line);
    void *ctx;
} metrics_sink;
// The line to each of them (nothing when the sink holds neither; sink NULL: none).
void metrics_sink_write(const metrics_sink *sink, const json_t *line);
static inline int metrics_sink_active(const metrics_sink *sink) {
    return sink && (sink->file || sink->also);
}
// Forward-only pass (no dropout) over train.eval_data (evaluate_shards with train.eval_batches
// and train.seed), printing MLM/NSP loss and accuracy beside the MLM accuracy of always
// predicting the eval data's most frequent masked token; with `metrics` (the metrics file
// and TensorBoard events, or NULL), the same numbers are written to them as a line with "eval":
// true at `step`, with the masked positions counted (n_pred) and `elapsed` (the training
// clock, seconds). Does nothing when eval_data is unset (the result then has 0 sequences).
// `scratch` has the micro-batch shape. Every rank calls it (each evaluates its share of the
// rows); rank 0 prints and writes (a failed write of the metrics file: metrics_sink).
// With `cancel` (or NULL), the pass stops between micro-batches once *cancel is non-zero on
// any rank (a stop signal): it says so on stdout, writes no line and returns interrupted = 1.
eval_result train_data_evaluate(train_data *d, const run_config *cfg, bert_model *m, batch_t *scratch, long step,
                                double elapsed, const metrics_sink *metrics, const volatile sig_atomic_t *cancel);
// The forward pass of the model without dropout over the shards at `path` (loader spec: file,
// directory, glob; a directory holding prep's held-out eval-* shards means those), in file
// order with their stored masks: every row exactly once (batches = 0), or the first
// `batches` micro-batches' rows. Micro-batches have scratch's shape (B, T, P), which m must be
// sized for, and the last one holds the rows left. Under several ranks each evaluates a
// contiguous share of the rows and the sums are added over the ranks (every rank gets the
// result; every rank must call). Rank 0 prints the shards it reads on stdout. The same code
// for the evaluation after training and for `bertpre eval`.
// With `cancel` (or NULL): checked before each micro-batch on every rank (summed, so that all
// stop together), a non-zero value stops the pass (interrupted = 1).
eval_result evaluate_shards(bert_model *m, const char *path, int batches, uint64_t seed, batch_t *scratch,
                            const volatile sig_atomic_t *cancel);
// The sequence length and max predictions of the shards at `path` (checked against vocab_size);
// returns their rows.
long eval_shards_shape(const char *path, int vocab_size, int *seq_length, int *max_predictions);
// "eval | N sequences of PATH | mlm loss ... | nsp acc ..." on one line, with the baseline.
void eval_result_print(const eval_result *r, const char *path, FILE *out);
void train_data_close(train_data *d);
