// Small helpers shared by the C tests: deterministic random fills, relative error
// ||a - b|| / ||b|| over a whole tensor, and a failure counter that sets the exit status.
#pragma once
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels/common/philox.h"

static int test_failures = 0;

static inline double rand_uniform(uint32_t site, uint64_t i) {
    return philox_draw(12345, 0, site, i) / 4294967296.0;
}

static inline void fill_random(double *x, size_t n, uint32_t site, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * rand_uniform(site, i);
}

static inline double rel_error(const double *a, const double *b, size_t n) {
    double diff = 0.0, ref = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) return INFINITY;  // NaN never passes
        diff += (a[i] - b[i]) * (a[i] - b[i]);
        ref += b[i] * b[i];
    }
    if (ref == 0.0) return diff == 0.0 ? 0.0 : INFINITY;
    return sqrt(diff / ref);
}

static inline void expect_close(const char *what, double err, double tol) {
    int ok = err <= tol;
    printf("%s %-58s rel error %.3e (tolerance %.0e)\n", ok ? "ok  " : "FAIL", what, err, tol);
    if (!ok) test_failures++;
}

static inline void expect_true(const char *what, int ok) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) test_failures++;
}
