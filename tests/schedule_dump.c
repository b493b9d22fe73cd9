// Test driver for the learning-rate schedules: prints the rate of updates 1..STEPS under
// SCHEDULE (poly, cosine, linear, constant; default poly), one rate per line with 17
// significant digits.
// usage: schedule_dump BASE_LR WARMUP_PROPORTION STEPS [SCHEDULE]
#include <stdio.h>
#include <stdlib.h>
#include "kernels/common/check.h"
#include "engine/schedule.h"

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) fatal("usage: schedule_dump BASE_LR WARMUP_PROPORTION STEPS [SCHEDULE]");
    double base = atof(argv[1]), warmup = atof(argv[2]);
    long steps = atol(argv[3]);
    int kind = schedule_kind_of(argc == 5 ? argv[4] : "poly");
    if (kind < 0) fatal("schedule_dump: unknown schedule '%s'", argv[4]);
    for (long n = 1; n <= steps; n++) printf("%.17g\n", schedule_rate((schedule_kind)kind, base, warmup, steps, n));
    return 0;
}
