// Small helpers shared by the C and C++ tests: deterministic random fills, the relative error
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

// Relative error ||a - b|| / ||b|| (b the reference), accumulated pair by pair so that any
// element type can feed it. A NaN or inf on either side never passes (INFINITY); an all-zero
// reference passes only an all-zero result.
typedef struct {
    double diff, ref;
    int nonfinite;
} rel_error_sum;

static inline void rel_error_add(rel_error_sum *s, double a, double b) {
    if (!isfinite(a) || !isfinite(b)) s->nonfinite = 1;
    s->diff += (a - b) * (a - b);
    s->ref += b * b;
}

static inline double rel_error_value(const rel_error_sum *s) {
    if (s->nonfinite) return INFINITY;
    if (s->ref == 0.0) return s->diff == 0.0 ? 0.0 : INFINITY;
    return sqrt(s->diff / s->ref);
}

static inline double rel_error(const double *a, const double *b, size_t n) {
    rel_error_sum s = {0.0, 0.0, 0};
    for (size_t i = 0; i < n; i++) rel_error_add(&s, a[i], b[i]);
    return rel_error_value(&s);
}

static inline double rel_error_f(const float *a, const float *b, size_t n) {
    rel_error_sum s = {0.0, 0.0, 0};
    for (size_t i = 0; i < n; i++) rel_error_add(&s, a[i], b[i]);
    return rel_error_value(&s);
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
