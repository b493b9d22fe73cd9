// Loss scaling for FP16 training (docs/ARCHITECTURE.md §4). The loss, and so every gradient, is
// multiplied by `scale` so that small gradients survive FP16; LAMB divides it out again.
// Dynamic: an overflowing step (a gradient inf or NaN) is skipped and the scale halved
// (never below min_scale); after growth_interval clean steps in a row the scale doubles;
// max_skips overflowing steps in a row abort the run with a message. Static: one constant
// scale, overflowing steps are still skipped and counted. The whole state is plain numbers,
// so a checkpoint stores it as it is.
#pragma once
#include "engine/config.h"

typedef struct {
    double scale;
    double min_scale;
    int dynamic;
    int growth_interval;
    int max_skips;
    long clean_steps;  // clean steps since the last overflow or growth
    long skipped;      // skipped steps in the whole run
    int consecutive;   // overflowing steps in a row
} loss_scaler;

// dynamic = 0 keeps `initial` forever.
void loss_scaler_init(loss_scaler *s, int dynamic, double initial, int growth_interval, double min_scale,
                      int max_skips);
// After a step: overflow = 1 when its gradients were not finite (the step was skipped).
// Exits with a clear message after max_skips overflowing steps in a row.
void loss_scaler_update(loss_scaler *s, int overflow);
// For a training config: dynamic scaling for fp16 unless train.loss_scale sets a static scale;
// fp32 and bf16 run with a static scale of 1 unless train.loss_scale says otherwise.
void loss_scaler_init_for(loss_scaler *s, const train_config *t);
