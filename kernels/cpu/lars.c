// LARS, CPU reference (timm's Lars, apex LARC without clipping of the ratio; engine/optim.h
// states the rules), per tensor, g clipped as optim.c says:
//   decayed tensors: d = trust * (g + wd w), trust = tc ||w|| / (||g|| + wd ||w|| + eps),
//                    1 when ||w|| or ||g|| is 0
//   other tensors:   d = g
//   buf = momentum * buf + d;  w -= lr * buf          (buf starts at 0)
// Sums in double, in tensor order; a non-finite global norm (overflow) changes nothing.
#include "kernels/cpu/optim.h"

double CPU_OP(lars_step)(float *params, float *momentum, const void *grads_, const optim_tensor *tensors,
                         int n_tensors, lars_hyper h) {
    const real *grads = grads_;
    double norm = CPU_OP(optim_grad_norm)(grads, tensors, n_tensors, h.grad_scale);
    if (!isfinite(norm)) return norm;
    double scale = optim_clip_factor(norm, h.max_grad_norm) / h.grad_scale;
    for (int i = 0; i < n_tensors; i++) {
        const optim_tensor *p = &tensors[i];
        float *w = params + p->offset, *buf = momentum + p->offset;
        const real *g = grads + p->offset;
        double wd = p->weight_decay ? h.weight_decay : 0.0, trust = 1.0;
        if (p->weight_decay) {
            double w_sq = 0.0, g_sq = 0.0;
            for (size_t k = 0; k < p->numel; k++) {
                double gk = g[k] * scale;
                w_sq += (double)w[k] * w[k];
                g_sq += gk * gk;
            }
            double w_norm = sqrt(w_sq), g_norm = sqrt(g_sq);
            if (w_norm > 0.0 && g_norm > 0.0) trust = h.trust_coefficient * w_norm / (g_norm + wd * w_norm + h.eps);
        }
        for (size_t k = 0; k < p->numel; k++) {
            double d = (g[k] * scale + wd * w[k]) * trust;
            buf[k] = (float)(h.momentum * buf[k] + d);
            w[k] = (float)(w[k] - h.lr * buf[k]);
        }
    }
    return norm;
}
