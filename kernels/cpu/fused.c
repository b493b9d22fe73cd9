// Fused ops of the backend table, composed from the reference ops they replace, so that
// the CPU reference of a fused op is by construction the unfused computation:
//   residual_dropout_layernorm_forward = dropout_residual_forward, then layernorm_forward
//   layernorm_dropout_backward         = layernorm_backward, then dropout_backward
//   bias_gelu_forward:  out[n,:] = gelu(inp[n,:] + bias) per row through gelu_forward (of kind act)
//   bias_gelu_backward: dinp[n,:] = gelu_backward at inp[n,:] + bias (=, may alias dout);
//                       dbias += column sums of dinp (double accumulation, rows in order)
#include <stdlib.h>
#include "kernels/backend.h"
#include "kernels/common/check.h"
#include "kernels/cpu/real.h"

#define DECLARE(name) extern __typeof__(*((backend_t *)0)->name) CPU_OP(name);
DECLARE(layernorm_forward)
DECLARE(layernorm_backward)
DECLARE(dropout_residual_forward)
DECLARE(dropout_backward)
DECLARE(gelu_forward)
DECLARE(gelu_backward)

void CPU_OP(residual_dropout_layernorm_forward)(void *out, void *res, void *mean, void *rstd, const void *inp,
                                                const void *residual, const void *weight, const void *bias, int N,
                                                int C, float eps, dropout_t dropout) {
    CPU_OP(dropout_residual_forward)(res, inp, residual, N * C, dropout);
    CPU_OP(layernorm_forward)(out, mean, rstd, res, weight, bias, N, C, eps);
}

void CPU_OP(layernorm_dropout_backward)(void *dres, void *dinp, void *dweight, void *dbias, const void *dout,
                                        const void *res, const void *weight, const void *mean, const void *rstd,
                                        int N, int C, dropout_t dropout) {
    CPU_OP(layernorm_backward)(dres, dweight, dbias, dout, res, weight, mean, rstd, NULL, N, C);
    CPU_OP(dropout_backward)(dinp, dres, N * C, dropout);
}

// row[c] = inp[c] + bias[c] (or inp alone without a bias)
static const real *biased_row(real *row, const real *inp, const real *bias, int C) {
    if (!bias) return inp;
    for (int c = 0; c < C; c++) row[c] = inp[c] + bias[c];
    return row;
}

void CPU_OP(bias_gelu_forward)(void *out_, const void *inp_, const void *bias_, int N, int C, gelu_kind act) {
    real *out = out_, *row = xcalloc(C > 0 ? C : 1, sizeof(real));
    const real *inp = inp_, *bias = bias_;
    for (int n = 0; n < N; n++)
        CPU_OP(gelu_forward)(out + (size_t)n * C, biased_row(row, inp + (size_t)n * C, bias, C), C, act);
    free(row);
}

void CPU_OP(bias_gelu_backward)(void *dinp_, void *dbias_, const void *dout_, const void *inp_, const void *bias_,
                                int N, int C, gelu_kind act) {
    real *dinp = dinp_, *dbias = dbias_, *row = xcalloc(C > 0 ? C : 1, sizeof(real));
    const real *dout = dout_, *inp = inp_, *bias = bias_;
    double *sums = xcalloc(C > 0 ? C : 1, sizeof(double));
    for (int n = 0; n < N; n++) {
        real *d = dinp + (size_t)n * C;
        CPU_OP(gelu_backward)(d, dout + (size_t)n * C, biased_row(row, inp + (size_t)n * C, bias, C), C, act);
        for (int c = 0; c < C; c++) sums[c] += d[c];
    }
    if (dbias)
        for (int c = 0; c < C; c++) dbias[c] = (real)(dbias[c] + sums[c]);
    free(row);
    free(sums);
}
