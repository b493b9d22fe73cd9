// The monotonic clock, in seconds: for durations (steps, stages, progress lines, timeouts),
// never for dates. One definition for the whole house, host code only.
#pragma once
#include <time.h>

static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
