// Row-major GEMM for the CPU reference: C[M,N] = alpha * op(A) op(B) + beta * C, with
// op(A) [M,K] and op(B) [K,N]. Through CBLAS when the build found one; otherwise plain loops
// (i-k-j order, accumulating in double), so that the reference also builds where no BLAS
// is installed (the GPU machines of the GPU suite, see tools/gpu_suite.sh).
#include "bertpre_config.h"
#include "kernels/cpu/gemm.h"
#include <stdlib.h>
#if BERTPRE_HAVE_BLAS
#include <cblas.h>
#endif

void CPU_OP(gemm)(int trans_a, int trans_b, int M, int N, int K, double alpha, const real *A, int lda,
                  const real *B, int ldb, double beta, real *C, int ldc) {
#if BERTPRE_HAVE_BLAS
#ifdef CPU_REAL_DOUBLE
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
#else
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                (float)alpha, A, lda, B, ldb, (float)beta, C, ldc);
#endif
#else
    double *row = malloc(sizeof(double) * (N > 0 ? N : 1));
    if (!row) abort();
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) row[j] = 0.0;
        for (int k = 0; k < K; k++) {
            double a = trans_a ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
            if (a == 0.0) continue;
            if (trans_b)
                for (int j = 0; j < N; j++) row[j] += a * B[(size_t)j * ldb + k];
            else
                for (int j = 0; j < N; j++) row[j] += a * B[(size_t)k * ldb + j];
        }
        for (int j = 0; j < N; j++) {
            double c = beta == 0.0 ? 0.0 : beta * C[(size_t)i * ldc + j];
            C[(size_t)i * ldc + j] = (real)(alpha * row[j] + c);
        }
    }
    free(row);
#endif
}
