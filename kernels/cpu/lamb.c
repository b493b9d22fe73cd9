// LAMB update, CPU reference (engine/optim.h states the semantics: NVIDIA apex FusedLAMB).
//   g = grads / grad_scale; norm = ||g|| over all tensors; g *= min(1, max_norm / norm)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd w     (wd = 0 without decay)
//   w -= lr * trust * u,  trust = ||w|| / ||u|| for decayed tensors with both norms > 0, else 1
// A non-finite norm (overflow) changes nothing. Sums in double, in tensor order.
#include "kernels/cpu/optim.h"

double CPU_OP(lamb_step)(float *params, float *mom, float *vel, const void *grads_, const optim_tensor *tensors,
                         int n_tensors, adam_hyper h) {
    const real *grads = grads_;
    double norm = CPU_OP(optim_grad_norm)(grads, tensors, n_tensors, h.grad_scale);
    if (!isfinite(norm)) return norm;
    double clip = optim_clip_factor(norm, h.max_grad_norm);
    double bc1 = 1.0 - pow(h.beta1, (double)h.step), bc2 = 1.0 - pow(h.beta2, (double)h.step);
    for (int i = 0; i < n_tensors; i++) {
        const optim_tensor *p = &tensors[i];
        float *w = params + p->offset, *m = mom + p->offset, *v = vel + p->offset;
        const real *g = grads + p->offset;
        double wd = p->weight_decay ? h.weight_decay : 0.0;
        // Two passes over the tensor: moments and norms first, then the update recomputed
        // from the new moments (cheaper than keeping a copy of it).
        double w_sq = 0.0, u_sq = 0.0;
        for (size_t k = 0; k < p->numel; k++) {
            double gk = g[k] / h.grad_scale * clip;
            m[k] = (float)(h.beta1 * m[k] + (1.0 - h.beta1) * gk);
            v[k] = (float)(h.beta2 * v[k] + (1.0 - h.beta2) * gk * gk);
            double u = (m[k] / bc1) / (sqrt(v[k] / bc2) + h.eps) + wd * w[k];
            w_sq += (double)w[k] * w[k];
            u_sq += u * u;
        }
        double trust = 1.0;
        if (wd != 0.0 && w_sq > 0.0 && u_sq > 0.0) trust = sqrt(w_sq) / sqrt(u_sq);
        for (size_t k = 0; k < p->numel; k++) {
            double u = (m[k] / bc1) / (sqrt(v[k] / bc2) + h.eps) + wd * w[k];
            w[k] = (float)(w[k] - h.lr * trust * u);
        }
    }
    return norm;
}
