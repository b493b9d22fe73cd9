// Test driver for the learning-rate schedule: prints schedule_lr for updates 1..STEPS, one
// rate per line with 17 significant digits.
// usage: schedule_dump BASE_LR WARMUP_PROPORTION STEPS
#include <stdio.h>
#include <stdlib.h>
#include "kernels/common/check.h"
#include "engine/schedule.h"

int main(int argc, char **argv) {
    if (argc != 4) fatal("usage: schedule_dump BASE_LR WARMUP_PROPORTION STEPS");
    double base = atof(argv[1]), warmup = atof(argv[2]);
    long steps = atol(argv[3]);
    for (long n = 1; n <= steps; n++) printf("%.17g\n", schedule_lr(base, warmup, steps, n));
    return 0;
}
