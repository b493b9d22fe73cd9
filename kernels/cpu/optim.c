// LARS and AdamW, CPU reference (engine/optim.h states the rules), and the gradient norm
// every optimizer clips with. All sums in double, in tensor order; a non-finite global norm
// (overflow) changes nothing.
//   g = clip * grads / grad_scale, clip = min(1, max_grad_norm / ||grads / grad_scale||)
// LARS (timm's Lars, apex LARC without clipping of the ratio), per tensor:
//   decayed tensors: d = trust * (g + wd w), trust = tc ||w|| / (||g|| + wd ||w|| + eps),
//                    1 when ||w|| or ||g|| is 0
//   other tensors:   d = g
//   buf = momentum * buf + d;  w -= lr * buf          (buf starts at 0)
// AdamW (torch.optim.AdamW):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   w = w (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)   (wd = 0 without decay)
#include "kernels/cpu/optim.h"

double CPU_OP(optim_grad_norm)(const real *grads, const lamb_tensor *tensors, int n_tensors, double grad_scale) {
    double sq = 0.0;
    for (int i = 0; i < n_tensors; i++)
        for (size_t k = 0; k < tensors[i].numel; k++) {
            double g = grads[tensors[i].offset + k] / grad_scale;
            sq += g * g;
        }
    return sqrt(sq);
}

double CPU_OP(lars_step)(float *params, float *momentum, const void *grads_, const lamb_tensor *tensors,
                         int n_tensors, lars_hyper h) {
    const real *grads = grads_;
    double norm = CPU_OP(optim_grad_norm)(grads, tensors, n_tensors, h.grad_scale);
    if (!isfinite(norm)) return norm;
    double scale = optim_clip_factor(norm, h.max_grad_norm) / h.grad_scale;
    for (int i = 0; i < n_tensors; i++) {
        const lamb_tensor *p = &tensors[i];
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

double CPU_OP(adamw_step)(float *params, float *mom, float *vel, const void *grads_, const lamb_tensor *tensors,
                          int n_tensors, lamb_hyper h) {
    const real *grads = grads_;
    double norm = CPU_OP(optim_grad_norm)(grads, tensors, n_tensors, h.grad_scale);
    if (!isfinite(norm)) return norm;
    double scale = optim_clip_factor(norm, h.max_grad_norm) / h.grad_scale;
    double bc1 = 1.0 - pow(h.beta1, (double)h.step), bc2 = 1.0 - pow(h.beta2, (double)h.step);
    for (int i = 0; i < n_tensors; i++) {
        const lamb_tensor *p = &tensors[i];
        float *w = params + p->offset, *m = mom + p->offset, *v = vel + p->offset;
        const real *g = grads + p->offset;
        double decay = 1.0 - h.lr * (p->weight_decay ? h.weight_decay : 0.0);
        for (size_t k = 0; k < p->numel; k++) {
            double gk = g[k] * scale;
            m[k] = (float)(h.beta1 * m[k] + (1.0 - h.beta1) * gk);
            v[k] = (float)(h.beta2 * v[k] + (1.0 - h.beta2) * gk * gk);
            w[k] = (float)(w[k] * decay - h.lr * (m[k] / bc1) / (sqrt(v[k] / bc2) + h.eps));
        }
    }
    return norm;
}
