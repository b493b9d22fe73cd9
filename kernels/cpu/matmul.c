// Linear layer in torch's layout: out[N,OC] = inp[N,IC] @ weight[OC,IC]^T + bias[OC].
// Forward saves nothing beyond its input.
// Backward: dinp = dout @ weight (+ dinp_add)   (=)
//           dweight += dout^T @ inp,  dbias += column sums of dout   (+=)
// The products go to the reference GEMM (gemm.c: BLAS when present); bias sums accumulate
// in double.
#include <string.h>
#include "kernels/cpu/gemm.h"

void CPU_OP(matmul_forward)(void *out_, const void *inp_, const void *weight_, const void *bias_, int N, int IC,
                            int OC) {
    real *out = out_;
    const real *inp = inp_, *weight = weight_, *bias = bias_;
    CPU_OP(gemm)(0, 1, N, OC, IC, 1.0, inp, IC, weight, IC, 0.0, out, OC);
    if (bias)
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += bias[o];
}

void CPU_OP(matmul_backward)(void *dinp_, void *dweight_, void *dbias_, const void *dout_, const void *inp_,
                             const void *weight_, const void *dinp_add_, int N, int IC, int OC) {
    real *dinp = dinp_, *dweight = dweight_, *dbias = dbias_;
    const real *dout = dout_, *inp = inp_, *weight = weight_, *dinp_add = dinp_add_;
    if (dinp_add && dinp_add != dinp) memcpy(dinp, dinp_add, sizeof(real) * (size_t)N * IC);
    CPU_OP(gemm)(0, 0, N, IC, OC, 1.0, dout, OC, weight, IC, dinp_add ? 1.0 : 0.0,
         dinp, IC);
    CPU_OP(gemm)(1, 0, OC, IC, N, 1.0, dout, OC, inp, IC, 1.0, dweight, IC);
    if (dbias)
        for (int o = 0; o < OC; o++) {
            double sum = 0.0;
            for (int n = 0; n < N; n++) sum += dout[(size_t)n * OC + o];
            dbias[o] += (real)sum;
        }
}
