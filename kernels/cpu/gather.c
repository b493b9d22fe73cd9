// Row gather: out[n,:] = inp[index[n],:]   (the MLM head's masked positions and the
// pooler's [CLS] rows, taken from the encoder output in one pass).
// Forward saves nothing. Backward: dinp[M,C] = 0, then dinp[index[n],:] += dout[n,:] in
// order of n (deterministic; repeated indices accumulate).
#include <string.h>
#include "kernels/cpu/real.h"

void CPU_OP(gather_rows_forward)(void *out_, const void *inp_, const int *index, int N, int C) {
    real *out = out_;
    const real *inp = inp_;
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * C, inp + (size_t)index[n] * C, sizeof(real) * C);
}

void CPU_OP(gather_rows_backward)(void *dinp_, const void *dout_, const int *index, int N, int M, int C) {
    real *dinp = dinp_;
    const real *dout = dout_;
    memset(dinp, 0, sizeof(real) * (size_t)M * C);
    for (int n = 0; n < N; n++) {
        real *d = dinp + (size_t)index[n] * C;
        for (int c = 0; c < C; c++) d[c] += dout[(size_t)n * C + c];
    }
}
