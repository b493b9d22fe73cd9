// The CPU reference's GEMM in its plain-loop form (compiled with CPU_GEMM_LOOPS, the code a
// build without BLAS uses) against a textbook triple loop in long double: every combination
// of transposes, ragged sizes (not multiples of the 4-row blocking), leading dimensions
// wider than the matrices, alpha and beta, and C entries outside the product untouched.
// Tolerance 1e-6 relative: both sides sum in at least double precision and round once to
// float at the end, so they agree to float rounding (~6e-8).
#include <math.h>
#include <stdlib.h>
#include "kernels/cpu/gemm.h"
#include "tests/test_util.h"

static void reference(int ta, int tb, int M, int N, int K, double alpha, const float *A, int lda, const float *B,
                      int ldb, double beta, double *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            long double s = 0;
            for (int k = 0; k < K; k++)
                s += (long double)(ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            C[i * ldc + j] = (double)(alpha * s + beta * C[i * ldc + j]);
        }
}

static void check(int ta, int tb, int M, int N, int K, double alpha, double beta) {
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
    int arows = ta ? K : M, brows = tb ? N : K;
    float *A = malloc(sizeof(float) * arows * lda), *B = malloc(sizeof(float) * brows * ldb);
    float *C = malloc(sizeof(float) * M * ldc);
    double *want = malloc(sizeof(double) * M * ldc), *got = malloc(sizeof(double) * M * ldc);
    for (int i = 0; i < arows * lda; i++) A[i] = (float)(rand_uniform(1, i) - 0.5);
    for (int i = 0; i < brows * ldb; i++) B[i] = (float)(rand_uniform(2, i) - 0.5);
    for (int i = 0; i < M * ldc; i++) C[i] = (float)(rand_uniform(3, i) - 0.5), want[i] = C[i];
    cpu_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    reference(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, want, ldc);
    for (int i = 0; i < M * ldc; i++) got[i] = C[i];
    char what[128];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d M=%d N=%d K=%d alpha=%g beta=%g", ta, tb, M, N, K, alpha, beta);
    expect_close(what, rel_error(got, want, (size_t)M * ldc), 1e-6);
    free(A), free(B), free(C), free(want), free(got);
}

int main(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check(ta, tb, 7, 5, 3, 1.0, 0.0);
            check(ta, tb, 33, 70, 129, 1.0, 1.0);
            check(ta, tb, 64, 48, 96, 0.5, -0.25);
            check(ta, tb, 1, 1, 1, 2.0, 0.0);
        }
    return test_failures ? 1 : 0;
}
