// The CPU reference's one GEMM (see gemm.c); row-major, in the build's `real` type.
#pragma once
#include <stddef.h>
#include "kernels/cpu/real.h"

#ifdef __cplusplus
extern "C" {
#endif
void CPU_OP(gemm)(int trans_a, int trans_b, int M, int N, int K, double alpha, const real *A, int lda,
                  const real *B, int ldb, double beta, real *C, int ldc);
// Called once at start-up, before any GEMM: OpenBLAS built with its own threads (Debian's
// default) runs one thread unless OPENBLAS_NUM_THREADS or GOTO_NUM_THREADS says otherwise.
void cpu_blas_threads_init(void);
// The CPU backend's threads now, to out[size]: "OpenMP N, BLAS M (why)", M as the BLAS reports
// it ("none" where the GEMM does not go through a BLAS, "unknown" for a CBLAS that does not
// say). `bertpre --version` and the CPU run's header print it.
void cpu_threads_describe(char *out, size_t size);
#ifdef __cplusplus
}
#endif
