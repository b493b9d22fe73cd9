// Checkpoints: everything a training run needs to continue bit for bit, in one directory
// per step under train.checkpoint_dir, written so that a crash at any moment leaves the
// previous checkpoint whole. The format is documented in docs/CHECKPOINTS.md:
//   CHECKPOINT_DIR/step-000001000/
//     model.safetensors      FP32 master weights under their Hugging Face names
//     optimizer.safetensors  the optimizer state: "exp_avg.NAME" and "exp_avg_sq.NAME" (LAMB,
//                            AdamW) or "momentum_buffer.NAME" (LARS)
//     state.json             step, iteration, schedule position, optimizer step, loss scaler,
//                            generator seed and position, every rank's data cursor, the
//                            config and its hash
//     COMPLETE               written last: the SHA-256 of every other file (checked on open);
//                            a directory without it is not a checkpoint
// A "weights" checkpoint (from `bertpre import`) holds model.safetensors and a state.json
// with the model config only: it starts runs (--init-from), it does not resume them.
#pragma once
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "engine/config.h"
#include "engine/optim.h"
#include "engine/loss_scaler.h"
#include "engine/model.h"

enum { CHECKPOINT_CURSOR_MAX = 16 };

// The loop's own state beside weights and moments.
typedef struct {
    long applied;    // LAMB updates applied: the schedule's position (next update is applied + 1)
    long iteration;  // global batches run, skipped ones included: numbers the next batch and its dropout
    long skipped;    // steps skipped for gradient overflow
    double elapsed_s;  // seconds of training loop over the run's jobs so far (0 in checkpoints without it)
    loss_scaler scaler;
    int world_size;
    int cursor_len;    // integers per rank (at most CHECKPOINT_CURSOR_MAX), the same on every rank
    int64_t *cursors;  // [world_size][cursor_len], rank-major, heap; opaque to the checkpoint
} train_state;

typedef struct {
    char dir[1100];
    json_t *state;     // state.json
    bert_config model; // the config the weights belong to
    int training;      // 1: a training checkpoint (optimizer and loop state), 0: weights only
} checkpoint;

// Writes CHECKPOINT_DIR/step-N (N = s->applied) atomically: a temporary directory, every
// file fsynced, COMPLETE last, the directory renamed into place and its parent fsynced.
// Then keeps the newest `keep` complete checkpoints (0 = all) and removes temporary
// directories left by interrupted writes. The path written goes to out[size].
void checkpoint_save(const char *root, const run_config *cfg, const bert_model *m, const optim_state *opt,
                     const train_state *s, int keep, char *out, size_t size);
// A weights-only checkpoint at `dir` (which must not exist yet), written the same way.
// `source` is recorded in state.json.
void checkpoint_save_weights(const char *dir, const bert_model *m, const char *source);

// The step-N directories under root, complete or not, named in out ("step-000000006,
// step-000000012", cut at size); returns how many (0 when root does not exist).
int checkpoint_list(const char *root, char *out, size_t size);
// Removes what interrupted writes left under root (".tmp-*" entries); returns how many.
int checkpoint_remove_stale(const char *root);
// Removes every step-N directory under root (a new run told to overwrite an old one's).
void checkpoint_remove_all(const char *root);
// Bytes of one training checkpoint of a model of n_params parameters (weights, two moments).
double checkpoint_bytes(size_t n_params);

// The newest complete checkpoint under root into out; 0 when there is none.
int checkpoint_latest(const char *root, char *out, size_t size);

// Opens a checkpoint directory; exits naming the directory and the file when it is
// incomplete or unreadable.
void checkpoint_open(checkpoint *c, const char *dir);
void checkpoint_close(checkpoint *c);
// The checks of checkpoint_load_weights and checkpoint_resume alone, so that a checkpoint
// that does not fit is reported before anything is allocated or started.
void checkpoint_check_model(const checkpoint *c, const bert_config *model, const char *config_path);
void checkpoint_check_resume(const checkpoint *c, const run_config *cfg, const char *config_path);
// Loads the weights into m (whose model config must equal the checkpoint's: an error names
// the first field that differs) and refreshes the compute copy. The heads may differ: an
// MLM-only model takes a BertForPreTraining checkpoint's weights but its pooler and NSP head,
// and a model with the NSP head keeps its own pooler and NSP weights where the checkpoint
// (BertForMaskedLM) has none.
void checkpoint_load_weights(const checkpoint *c, bert_model *m);
// --init-tile: the checks of checkpoint_load_tiled alone (a misfit exits naming the
// checkpoint, the config, the field and both values).
void checkpoint_check_tile(const checkpoint *c, const bert_config *model, const char *config_path);
// The weights of a smaller model of the same architecture tiled into m (engine/tile.h); m's
// tensors without a counterpart keep the values m holds. Refreshes the compute copy.
void checkpoint_load_tiled(const checkpoint *c, bert_model *m);
// What checkpoint_load_weights does with the heads of c for a model of `model`, as a note for
// the user; NULL when the heads are the same.
const char *checkpoint_heads_note(const checkpoint *c, const bert_config *model);
// The checks of checkpoint_load_weights on model.safetensors (every tensor present, of its
// shape, finite), reading it whole on the host and loading nothing: for `train --dry-run`.
// with_optimizer: also the optimizer's buffers in optimizer.safetensors, as a resume reads them.
void checkpoint_check_weights(const checkpoint *c, int with_optimizer);
// The loop's state of a checkpoint that checkpoint_check_resume accepted: counters, loss
// scaler and every rank's data cursor (as this run's ranks take them); exits when state.json
// does not fit the run. Nothing is loaded.
void checkpoint_read_state(const checkpoint *c, const run_config *cfg, train_state *s);
// Resume: the config must fit the checkpoint (same model, same run: seed, batch shape,
// schedule, precision, phase, data), and the world size must be the same. Loads weights,
// moments, LAMB step, and fills s (cursors included).
void checkpoint_resume(const checkpoint *c, const run_config *cfg, const char *config_path, bert_model *m,
                       optim_state *opt, train_state *s);
