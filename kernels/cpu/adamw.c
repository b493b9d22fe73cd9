// AdamW, CPU reference (torch.optim.AdamW; engine/optim.h states the rules), g clipped as
// optim.c says:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   w = w (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)   (wd = 0 without decay;
//   with decay_lr_ref, decoupled: 1 - (lr / decay_lr_ref) wd)
// A non-finite global norm (overflow) changes nothing.
#include "kernels/cpu/optim.h"

double CPU_OP(adamw_step)(float *params, float *mom, float *vel, const void *grads_, const optim_tensor *tensors,
                          int n_tensors, adam_hyper h) {
    const real *grads = grads_;
    double norm = CPU_OP(optim_grad_norm)(grads, tensors, n_tensors, h.grad_scale);
    if (!isfinite(norm)) return norm;
    double scale = optim_clip_factor(norm, h.max_grad_norm) / h.grad_scale;
    double bc1 = 1.0 - pow(h.beta1, (double)h.step), bc2 = 1.0 - pow(h.beta2, (double)h.step);
    for (int i = 0; i < n_tensors; i++) {
        const optim_tensor *p = &tensors[i];
        float *w = params + p->offset, *m = mom + p->offset, *v = vel + p->offset;
        const real *g = grads + p->offset;
        double rate = h.decay_lr_ref > 0.0 ? h.lr / h.decay_lr_ref : h.lr;  // decoupled: relative to the peak rate
        double decay = 1.0 - rate * (p->weight_decay ? h.weight_decay : 0.0);
        for (size_t k = 0; k < p->numel; k++) {
            double gk = g[k] * scale;
            m[k] = (float)(h.beta1 * m[k] + (1.0 - h.beta1) * gk);
            v[k] = (float)(h.beta2 * v[k] + (1.0 - h.beta2) * gk * gk);
            w[k] = (float)(w[k] * decay - h.lr * (m[k] / bc1) / (sqrt(v[k] / bc2) + h.eps));
        }
    }
    return norm;
}
