// LayerNorm over the last dimension: out[n,:] = (inp[n,:] - mean) * rstd * weight + bias,
// rstd = 1 / sqrt(var + eps) with the biased variance (as torch).
// Forward saves mean[N] and rstd[N]. Without a bias (NULL) the forward adds none and the
// backward's dbias is NULL.
// Backward, with xhat = (x - mean) * rstd and g = dout * weight:
//   dinp = rstd * (g - mean(g) - xhat * mean(g * xhat))      (=, may alias dout)
//          + dinp_add (rounded first, then added in the element type: the sum that a separate
//          add of the two would give; dinp_add may be NULL or equal dinp)
//   dweight += sum_n dout * xhat,  dbias += sum_n dout        (+=)
#include "kernels/cpu/real.h"

void CPU_OP(layernorm_forward)(void *out_, void *mean_, void *rstd_, const void *inp_, const void *weight_,
                               const void *bias_, int N, int C, float eps) {
    real *out = out_, *mean = mean_, *rstd = rstd_;
    const real *inp = inp_, *weight = weight_, *bias = bias_;
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * C;
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += x[c];
        double m = sum / C;
        double var = 0.0;
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        double s = 1.0 / sqrt(var / C + eps);
        real *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (real)((x[c] - m) * s * weight[c] + (bias ? bias[c] : 0));
        mean[n] = (real)m;
        rstd[n] = (real)s;
    }
}

void CPU_OP(layernorm_backward)(void *dinp_, void *dweight_, void *dbias_, const void *dout_, const void *inp_,
                                const void *weight_, const void *mean_, const void *rstd_, const void *dinp_add_,
                                int N, int C) {
    real *dinp = dinp_, *dweight = dweight_, *dbias = dbias_;
    const real *dout = dout_, *inp = inp_, *weight = weight_, *mean = mean_, *rstd = rstd_, *add = dinp_add_;
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        double m = mean[n], s = rstd[n];
        double g_mean = 0.0, gx_mean = 0.0;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - m) * s;
            double g = (double)d[c] * weight[c];
            g_mean += g;
            gx_mean += g * xhat;
        }
        g_mean /= C;
        gx_mean /= C;
        real *dx = dinp + (size_t)n * C;
        const real *more = add ? add + (size_t)n * C : NULL;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - m) * s;
            double dc = d[c];  // read before dx[c] is written: dinp may alias dout
            double g = dc * weight[c];
            real v = (real)(s * (g - g_mean - xhat * gx_mean));
            dx[c] = more ? v + more[c] : v;
            dweight[c] += (real)(dc * xhat);
            if (dbias) dbias[c] += (real)dc;
        }
    }
}
