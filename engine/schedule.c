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

// The warmup's sizes m .. A - 1 in turn: walk(t, i, &before, &full) gives iteration i's size,
// in *before the micro-batches before it and in *full the first iteration at size A (when i
// is at or past it; i < 0 walks to that end alone). Each size lasts ceil((threshold - tokens) / (size x u)) iterations from
// the tokens reached, none when those are already past its threshold.
static int warmup_walk(const train_config *t, long iteration, long *before, long *full) {
    int A = t->accumulation_steps;
    *before = 0, *full = 0;
    if (!t->batch_warmup_min_size) {
        *before = iteration > 0 ? (long)A * iteration : 0;
        return A;
    }
    int m = t->batch_warmup_min_size / (t->micro_batch_size * t->world_size);
    double u = (double)t->micro_batch_size * t->seq_length, W = ceil(t->batch_warmup_tokens / t->world_size);
    double total = 0.0, cum = 0.0, tokens = 0.0;
    for (int b = m; b < A; b++) total += b;
    long start = 0;  // the first iteration at size b
    for (int b = m; b < A; b++) {
        cum += b;
        double threshold = ceil(W / total * cum);  // ModernBERT's order of operations
        long n = tokens < threshold ? (long)ceil((threshold - tokens) / (b * u)) : 0;
        if (iteration >= 0 && iteration < start + n) {
            *before += (long)b * (iteration - start);
            return b;
        }
        *before += (long)b * n;
        tokens += (double)n * b * u;
        start += n;
    }
    if (iteration >= 0) *before += (long)A * (iteration - start);
    *full = start;
    return A;
}

int schedule_accumulation(const train_config *t, long iteration) {
    long before, full;
    return warmup_walk(t, iteration, &before, &full);
}

long schedule_micro_batches_before(const train_config *t, long iteration) {
    long before, full;
    warmup_walk(t, iteration, &before, &full);
    return before;
}

long schedule_batch_warmup_iterations(const train_config *t) {
    long before, full;
    warmup_walk(t, -1, &before, &full);
    return full;
}

uint32_t schedule_first_micro_batch(const train_config *t, long iteration, int rank) {
    long before, full;
    int a = warmup_walk(t, iteration, &before, &full);
    return (uint32_t)before * (uint32_t)t->world_size + (uint32_t)rank * (uint32_t)a;
}

void schedule_config_resolve(train_config *t, const char *where) {
    int unit = t->micro_batch_size * t->world_size;
    if (t->batch_warmup_min_size && (t->batch_warmup_min_size % unit || t->batch_warmup_min_size >= t->global_batch_size))
        fatal("%s: field 'batch_warmup_min_size' = %d must be a multiple of micro_batch_size x ranks = %d and below "
              "global_batch_size = %d (the batch grows by one micro-batch per rank)", where, t->batch_warmup_min_size,
              unit, t->global_batch_size);
    if (!t->batch_warmup_min_size != !(t->batch_warmup_tokens > 0.0))
        fatal("%s: fields 'batch_warmup_min_size' = %d and 'batch_warmup_tokens' = %g: batch-size warmup needs both "
              "(or neither)", where, t->batch_warmup_min_size, t->batch_warmup_tokens);
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
