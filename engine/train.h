// One optimizer step over a global batch made of micro-batches (gradient accumulation).
#pragma once
#include "data/batch.h"
#include "engine/optim.h"
#include "engine/loss_scaler.h"
#include "engine/model.h"

typedef struct {
    double mlm_loss, nsp_loss;  // means over the global batch
    long n_pred, mlm_correct, nsp_correct, sequences;
    double real_tokens, real_tokens_sq;  // sums of L_i and L_i^2 over the sequences (lengths L_i)
    double grad_norm;   // of the unscaled gradients; inf/NaN when they overflowed
    double loss_scale;  // the scale the gradients carried (1 unless FP16 loss scaling is on)
    int skipped;        // 1 when the update was not applied (gradient overflow)
} step_stats;

// Forward and backward over this rank's micro[0..accum), gradients normalized by the global
// batch's masked positions and sequences (so that the result does not depend on how the
// batch is split over micro-batches and ranks) and multiplied by the loss scale, summed over
// the ranks (on the device: engine/comm.h, or engine/zero.h under ZeRO-1; else through host
// memory: engine/dist.h), then one LAMB update (skipped when the gradients overflowed),
// a loss-scale update, and a refresh of the compute weights. Losses, accuracy counts and
// sequences in the result are those of the global batch.
// A run's config (engine/config.h: run_config_read), then the fields of its optimizer and
// its learning-rate schedule resolved: their defaults, and what they refuse.
void run_config_load(run_config *cfg, const char *path, int n_overrides, char **overrides, int world_size);

// first: the run's number of micro[0] (its dropout key; micro[k] is first + k).
step_stats train_step(bert_model *m, optim_state *opt, loss_scaler *scaler, const batch_t *micro, int accum,
                      double lr, int dropout, uint64_t seed, uint32_t first);
// One iteration of `bertpre train` over its filled micro[0..schedule_accumulation(t,
// iteration)) (accumulation_steps unless the batch-size warmup is on): the schedule's rate
// for update applied + 1 (applied: the updates so far; *lr gets it), then train_step with the
// config's seed and the micro-batches' numbers (schedule_first_micro_batch). tests/dump.c's
// `train` runs the same calls.
step_stats train_iteration(bert_model *m, optim_state *opt, loss_scaler *scaler, const train_config *t,
                           const batch_t *micro, long applied, int dropout, uint32_t iteration, double *lr);
