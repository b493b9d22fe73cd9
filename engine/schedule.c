// Learning-rate schedules with linear warmup and the learning-rate scaling rules (see
// schedule.h for the formulas and the step counting they reproduce).
#include "engine/schedule.h"
#include <math.h>
#include <string.h>
#include "kernels/common/check.h"

int schedule_kind_of(const char *name) {
    static const char *const names[] = {"poly", "cosine", "linear", "constant", "wsd"};
    for (int k = 0; k < 5; k++)
        if (!strcmp(name, names[k])) return k;
    return -1;
}

double schedule_rate(schedule_kind kind, double base_lr, double warmup_proportion, long total_steps, long update,
                     double decay_proportion) {
    if (total_steps < 1 || update < 1 || update > total_steps)
        fatal("schedule_lr: update %ld is outside 1..%ld", update, total_steps);
    double progress = (double)update / (double)total_steps;
    // warmup_proportion 0 never takes the first branch, so there is no division by zero.
    if (progress < warmup_proportion) return base_lr * progress / warmup_proportion;
    double after = warmup_proportion < 1.0 ? (progress - warmup_proportion) / (1.0 - warmup_proportion) : 1.0;
    switch (kind) {
    case SCHEDULE_POLY: return base_lr * pow(1.0 - progress, 0.5);
    case SCHEDULE_LINEAR: return base_lr * (1.0 - after);
    case SCHEDULE_COSINE: return base_lr * 0.5 * (1.0 + cos(M_PI * after));
    case SCHEDULE_CONSTANT: return base_lr;
    case SCHEDULE_WSD:
        if (decay_proportion <= 0.0 || progress <= 1.0 - decay_proportion) return base_lr;
        return base_lr * (1.0 - sqrt((progress - (1.0 - decay_proportion)) / decay_proportion));
    }
    fatal("schedule_rate: unknown schedule %d", (int)kind);
}

double schedule_lr(double base_lr, double warmup_proportion, long total_steps, long update) {
    return schedule_rate(SCHEDULE_POLY, base_lr, warmup_proportion, total_steps, update, 0.0);
}

double schedule_config_lr(const train_config *t, long update) {
    return schedule_rate((schedule_kind)schedule_kind_of(t->lr_schedule), t->learning_rate, t->warmup_proportion,
                         t->steps, update, t->decay_proportion);
}

void schedule_config_resolve(train_config *t, const char *where) {
    if (schedule_kind_of(t->lr_schedule) < 0)
        fatal("%s: field 'lr_schedule' = \"%s\" is not poly, cosine, linear, constant or wsd", where, t->lr_schedule);
    int wsd = schedule_kind_of(t->lr_schedule) == SCHEDULE_WSD;
    if (!wsd && t->decay_proportion >= 0.0)
        fatal("%s: field 'decay_proportion' = %g is wsd's (lr_schedule \"wsd\"), not \"%s\"'s", where,
              t->decay_proportion, t->lr_schedule);
    if (wsd && t->decay_proportion < 0.0) t->decay_proportion = 0.1;  // other schedules leave it unset
    if (wsd && t->warmup_proportion + t->decay_proportion > 1.0)
        fatal("%s: fields 'warmup_proportion' = %g and 'decay_proportion' = %g take more than the whole run", where,
              t->warmup_proportion, t->decay_proportion);
    int scaled = strcmp(t->lr_scaling, "none") != 0;
    if (t->base_learning_rate < 0.0) {
        if (scaled)
            fatal("%s: field 'lr_scaling' = \"%s\" needs 'base_learning_rate' (the rate at 'base_batch_size')", where,
                  t->lr_scaling);
        if (t->base_batch_size)
            fatal("%s: field 'base_batch_size' = %d needs 'base_learning_rate' and 'lr_scaling' (linear or sqrt)",
                  where, t->base_batch_size);
        if (t->learning_rate < 0.0) t->learning_rate = 1e-3;
        t->base_learning_rate = 0.0;
        return;
    }
    if (t->learning_rate >= 0.0)
        fatal("%s: fields 'learning_rate' = %g and 'base_learning_rate' = %g are both set: give one (the rate, or "
              "the rate at 'base_batch_size' scaled by 'lr_scaling')", where, t->learning_rate,
              t->base_learning_rate);
    if (!scaled) {
        if (t->base_batch_size)
            fatal("%s: field 'base_batch_size' = %d has no effect with 'lr_scaling' = \"none\" (use linear or sqrt)",
                  where, t->base_batch_size);
        t->learning_rate = t->base_learning_rate;
        return;
    }
    if (!t->base_batch_size)
        fatal("%s: field 'lr_scaling' = \"%s\" needs 'base_batch_size' (the global batch base_learning_rate is "
              "for)", where, t->lr_scaling);
    double ratio = (double)t->global_batch_size / t->base_batch_size;
    t->learning_rate = t->base_learning_rate * (strcmp(t->lr_scaling, "sqrt") ? ratio : sqrt(ratio));
    if (!(t->learning_rate <= 1e3))
        fatal("%s: 'base_learning_rate' = %g scaled %s from 'base_batch_size' = %d to 'global_batch_size' = %d "
              "gives learning_rate %g, above 1000", where, t->base_learning_rate, t->lr_scaling, t->base_batch_size,
              t->global_batch_size, t->learning_rate);
}
