// The CPU reference's one GEMM (see gemm.c); row-major, in the build's `real` type.
#pragma once
#include "kernels/cpu/real.h"

#ifdef __cplusplus
extern "C" {
#endif
void CPU_OP(gemm)(int trans_a, int trans_b, int M, int N, int K, double alpha, const real *A, int lda,
                  const real *B, int ldb, double beta, real *C, int ldc);
#ifdef __cplusplus
}
#endif
