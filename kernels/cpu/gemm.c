// Row-major GEMM for the CPU reference: C[M,N] = alpha * op(A) op(B) + beta * C, with
// op(A) [M,K] and op(B) [K,N]. Through CBLAS when the build found one; otherwise plain loops
// (unit-stride, accumulating in double, over OpenMP threads where the build has OpenMP), so
// that the reference also builds where no BLAS is installed (GPU machines without -dev
// packages, see tools/gpu_suite.sh). BERTPRE_CPU_GEMM=loops takes the loops in a build with a
// BLAS too: a row's result then does not depend on where the row sits in the call (OpenBLAS
// rounds a row by its place in its row blocking and thread split), which is what makes an
// unpadded run equal a padded one to the last bit (tests/test_unpad.c).
#include "bertpre_config.h"
#include "kernels/cpu/gemm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/common/check.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#if BERTPRE_HAVE_BLAS && !defined(CPU_GEMM_LOOPS)
#define USE_CBLAS 1
#include <cblas.h>

// BERTPRE_CPU_GEMM: unset or "blas" (the default), or "loops"; read once.
static int use_loops(void) {
    static int loops = -1;
    if (loops < 0) {
        const char *v = getenv("BERTPRE_CPU_GEMM");
        if (v && *v && strcmp(v, "blas") && strcmp(v, "loops"))
            fatal("environment variable BERTPRE_CPU_GEMM = '%s' is not blas or loops", v);
        loops = v && !strcmp(v, "loops");
    }
    return loops;
}
#endif

#ifndef CPU_REAL_DOUBLE  // one definition, in the fp32 library
// The CPU backend threads its own loops (attention, cross-entropy) with OpenMP. OpenBLAS's
// pthread pool would run beside those threads, its workers spinning on sched_yield between
// calls: 2 layers of hidden 256 at seq 256 took three times the CPU time with the pool on 2
// cores (tools/bench_blas_threads.py, docs/PERFORMANCE.md), as the scripts'
// OPENBLAS_NUM_THREADS=1 had shown. An OpenMP build of OpenBLAS shares the backend's OpenMP
// threads and is left as it is.

#if BERTPRE_HAVE_OPENBLAS && !defined(CPU_GEMM_LOOPS)
// The variable that sets OpenBLAS's thread count, where one does: OpenBLAS reads a positive
// number from the first of these that is set, and takes its default for 0 or text.
static const char *blas_thread_variable(void) {
    const char *names[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(names[i]);
        if (v) return atoi(v) > 0 ? names[i] : NULL;
    }
    return NULL;
}
#endif

void cpu_blas_threads_init(void) {
#if BERTPRE_HAVE_OPENBLAS && !defined(CPU_GEMM_LOOPS)
    if (blas_thread_variable()) return;  // the user's choice
    if (openblas_get_parallel() == 1) openblas_set_num_threads(1);  // 1: OpenBLAS's own pthreads
#endif
}

static int blas_threads(char *why, size_t size) {
#if USE_CBLAS
    if (use_loops()) {
        snprintf(why, size, "BERTPRE_CPU_GEMM=loops: the GEMM is the plain loops over the OpenMP threads");
        return 0;
    }
#if BERTPRE_HAVE_OPENBLAS
    const char *var = blas_thread_variable();
    int parallel = openblas_get_parallel();
    if (parallel == 0)
        snprintf(why, size, "OpenBLAS built single-threaded");
    else if (parallel == 2)
        snprintf(why, size, "OpenBLAS built with OpenMP: it shares the backend's OpenMP threads");
    else if (var)
        snprintf(why, size, "OpenBLAS's own threads, as %s=%s says", var, getenv(var));
    else  // cpu_blas_threads_init set the count
        snprintf(why, size, "OpenBLAS's own threads, set to 1 by bertpre beside the backend's OpenMP threads; "
                            "OPENBLAS_NUM_THREADS sets another count");
    return openblas_get_num_threads();
#else
    snprintf(why, size, "a CBLAS other than OpenBLAS: its threads are its own, not reported");
    return -1;
#endif
#else
    snprintf(why, size, "no BLAS in this build: the GEMM is the plain loops over the OpenMP threads");
    return 0;
#endif
}

void cpu_threads_describe(char *out, size_t size) {
    char why[200];
    int blas = blas_threads(why, sizeof why);
#ifdef _OPENMP
    int team = omp_get_max_threads();
#else
    int team = 1;
#endif
    if (blas > 0) snprintf(out, size, "OpenMP %d, BLAS %d (%s)", team, blas, why);
    else snprintf(out, size, "OpenMP %d, BLAS %s (%s)", team, blas ? "unknown" : "none", why);
}
#endif

void CPU_OP(gemm)(int trans_a, int trans_b, int M, int N, int K, double alpha, const real *A, int lda,
                  const real *B, int ldb, double beta, real *C, int ldc) {
#if USE_CBLAS
    if (!use_loops()) {
#ifdef CPU_REAL_DOUBLE
        cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
                    K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N,
                    K, (float)alpha, A, lda, B, ldb, (float)beta, C, ldc);
#endif
        return;
    }
#endif
    // Plain loops, accumulating in double. Every product walks memory with unit stride:
    // rows of op(A) are copied into a contiguous scratch row first, and for trans_b each
    // C[i,j] is a dot product of two contiguous rows (A's row i, B's row j), four rows of A
    // at a time so that each row of B is read once per four rows of C. Each C element has
    // one owner and one summation order, so the result does not depend on the thread count.
    enum { R = 4 };
#pragma omp parallel for schedule(dynamic, 1) if ((double)M * N * K > 1e6)
    for (int i0 = 0; i0 < M; i0 += R) {
        int rows = M - i0 < R ? M - i0 : R;
        real *a = malloc(sizeof(real) * (size_t)R * (K > 0 ? K : 1));
        double *acc = malloc(sizeof(double) * (size_t)R * (N > 0 ? N : 1));
        if (!a || !acc) abort();
        for (int r = 0; r < R; r++)
            for (int k = 0; k < K; k++)
                a[(size_t)r * K + k] = r >= rows ? 0 : trans_a ? A[(size_t)k * lda + i0 + r] : A[(size_t)(i0 + r) * lda + k];
        if (trans_b) {
            for (int j = 0; j < N; j++) {
                const real *b = B + (size_t)j * ldb;
                double s[R] = {0};
                for (int k = 0; k < K; k++)
                    for (int r = 0; r < R; r++) s[r] += (double)a[(size_t)r * K + k] * b[k];
                for (int r = 0; r < rows; r++) acc[(size_t)r * N + j] = s[r];
            }
        } else {
            for (size_t n = 0; n < (size_t)rows * N; n++) acc[n] = 0.0;
            for (int k = 0; k < K; k++) {
                const real *b = B + (size_t)k * ldb;
                for (int r = 0; r < rows; r++) {
                    double av = a[(size_t)r * K + k];
                    if (av == 0.0) continue;
                    double *row = acc + (size_t)r * N;
                    for (int j = 0; j < N; j++) row[j] += av * b[j];
                }
            }
        }
        for (int r = 0; r < rows; r++)
            for (int j = 0; j < N; j++) {
                real *c = &C[(size_t)(i0 + r) * ldc + j];
                *c = (real)(alpha * acc[(size_t)r * N + j] + (beta == 0.0 ? 0.0 : beta * *c));
            }
        free(a);
        free(acc);
    }
}
