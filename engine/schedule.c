// NVIDIA's warmup + polynomial-decay learning rate (see schedule.h for the formula and the
// step counting it reproduces).
#include "engine/schedule.h"
#include <math.h>
#include "kernels/common/check.h"

double schedule_lr(double base_lr, double warmup_proportion, long total_steps, long update) {
    if (total_steps < 1 || update < 1 || update > total_steps)
        fatal("schedule_lr: update %ld is outside 1..%ld", update, total_steps);
    double progress = (double)update / (double)total_steps;
    // warmup_proportion 0 never takes the first branch, so there is no division by zero.
    if (progress < warmup_proportion) return base_lr * progress / warmup_proportion;
    return base_lr * pow(1.0 - progress, 0.5);
}
