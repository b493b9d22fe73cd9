// StableAdamW, CPU reference (kernels/backend.h states the rule; torch-optimi's StableAdamW):
//   g = clip * grads / grad_scale (the global clipping of every optimizer, optim.c)
//   b1^ = b1 (1 - b1^(t-1)) / (1 - b1^t), b2^ likewise: the moments kept bias-corrected,
//   m = m + (1 - b1^) (g - m);  v = b2^ v + (1 - b2^) g^2
//   per tensor: RMS = sqrt(mean(g^2 / max(v, eps^2))), lr_T = lr / max(1, RMS)
//   w = w (1 - lr_T wd) - lr_T m / (sqrt(v) + eps)   (wd = 0 without decay; with decay_lr_ref
//   the decay is (lr_T / decay_lr_ref) wd)
// Two passes over each tensor: the moments and the RMS, then the update. A non-finite global
// norm (overflow) changes nothing. Sums in double, in tensor order.
#include "kernels/cpu/optim.h"

// b^ for step t: beta (1 - beta^(t-1)) / (1 - beta^t) (0 at the first step).
static double debiased(double beta, long t) {
    return beta * (1.0 - pow(beta, (double)(t - 1))) / (1.0 - pow(beta, (double)t));
}

double CPU_OP(stableadamw_step)(float *params, float *mom, float *vel, const void *grads_, const optim_tensor *tensors,
                                int n_tensors, adam_hyper h) {
    const real *grads = grads_;
    double norm = CPU_OP(optim_grad_norm)(grads, tensors, n_tensors, h.grad_scale);
    if (!isfinite(norm)) return norm;
    double scale = optim_clip_factor(norm, h.max_grad_norm) / h.grad_scale;
    double b1 = debiased(h.beta1, h.step), b2 = debiased(h.beta2, h.step), eps_sq = h.eps * h.eps;
    for (int i = 0; i < n_tensors; i++) {
        const optim_tensor *p = &tensors[i];
        float *w = params + p->offset, *m = mom + p->offset, *v = vel + p->offset;
        const real *g = grads + p->offset;
        double sum = 0.0;
        for (size_t k = 0; k < p->numel; k++) {
            double gk = g[k] * scale;
            m[k] = (float)(m[k] + (1.0 - b1) * (gk - m[k]));
            v[k] = (float)(b2 * v[k] + (1.0 - b2) * gk * gk);
            sum += gk * gk / (v[k] > eps_sq ? v[k] : eps_sq);
        }
        double rms = p->numel ? sqrt(sum / (double)p->numel) : 0.0, lr = h.lr / (rms > 1.0 ? rms : 1.0);
        double wd = p->weight_decay ? h.weight_decay : 0.0;
        double decay = 1.0 - (h.decay_lr_ref > 0.0 ? lr / h.decay_lr_ref : lr) * wd;
        for (size_t k = 0; k < p->numel; k++) w[k] = (float)(w[k] * decay - lr * m[k] / (sqrt(v[k]) + h.eps));
    }
    return norm;
}
