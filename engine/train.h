// One optimizer step over a global batch made of micro-batches (gradient accumulation).
#pragma once
#include "batch.h"
#include "lamb.h"
#include "loss_scaler.h"
#include "model.h"

typedef struct {
    double mlm_loss, nsp_loss;  // means over the global batch
    long n_pred, mlm_correct, nsp_correct, sequences;
    double grad_norm;           // of the unscaled gradients; inf/NaN when the step overflowed
    double loss_scale;          // the scale this step ran with
    int overflow;               // 1 when the step was skipped
    long skipped;               // skipped steps so far in the run
} step_stats;

// Forward and backward over micro[0..accum), gradients normalized by the global batch's
// masked positions and sequences (so that the result does not depend on how the batch is
// split) and multiplied by the loss scale, then one LAMB update (skipped on overflow), a
// loss-scale update, and a refresh of the compute weights.
step_stats train_step(bert_model *m, lamb_state *opt, loss_scaler *scaler, const batch_t *micro, int accum,
                      double lr, int dropout, uint64_t seed, uint32_t step);
