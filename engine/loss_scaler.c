#include "engine/loss_scaler.h"
#include <string.h>
#include "kernels/common/check.h"

void loss_scaler_init(loss_scaler *s, int dynamic, double initial, int growth_interval, double min_scale,
                      int max_skips) {
    *s = (loss_scaler){.scale = initial,
                       .min_scale = min_scale,
                       .dynamic = dynamic,
                       .growth_interval = growth_interval,
                       .max_skips = max_skips};
}

void loss_scaler_update(loss_scaler *s, int overflow) {
    if (!overflow) {
        s->consecutive = 0;
        if (s->dynamic && ++s->clean_steps >= s->growth_interval) {
            s->scale *= 2.0;
            s->clean_steps = 0;
        }
        return;
    }
    s->skipped++;
    s->consecutive++;
    s->clean_steps = 0;
    if (s->dynamic) s->scale = s->scale / 2.0 < s->min_scale ? s->min_scale : s->scale / 2.0;
    // Only a dynamic scale (FP16) can overflow for want of range: with a fixed scale (FP32, BF16
    // or a static scale) inf/NaN gradients come from the weights, the data or divergence.
    if (s->consecutive >= s->max_skips && s->dynamic)
        fatal("%d optimizer steps in a row had inf/NaN gradients (loss scale now %g%s): the run has diverged; "
              "lower train.learning_rate, check the data, or try train.precision=bf16",
              s->consecutive, s->scale, s->scale == s->min_scale ? ", its floor" : "");
    if (s->consecutive >= s->max_skips)
        fatal("%d optimizer steps in a row had inf/NaN gradients at a fixed loss scale of %g: the weights have "
              "diverged (or held inf/NaN from the start); lower train.learning_rate or check the data",
              s->consecutive, s->scale);
}

void loss_scaler_init_for(loss_scaler *s, const train_config *t) {
    if (t->loss_scale > 0.0)
        loss_scaler_init(s, 0, t->loss_scale, t->loss_scale_growth_interval, t->loss_scale_min,
                         t->loss_scale_max_skips);
    else if (!strcmp(t->precision, "fp16"))
        loss_scaler_init(s, 1, t->loss_scale_initial, t->loss_scale_growth_interval, t->loss_scale_min,
                         t->loss_scale_max_skips);
    else
        loss_scaler_init(s, 0, 1.0, t->loss_scale_growth_interval, t->loss_scale_min, t->loss_scale_max_skips);
}
