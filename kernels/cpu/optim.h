// What the CPU optimizers (lamb.c, lars.c, adamw.c) share: the global gradient norm and the
// clipping factor, summed in double in tensor order.
#pragma once
#include "kernels/backend.h"
#include "kernels/cpu/real.h"

// ||grads / grad_scale|| over every tensor of the list.
double CPU_OP(optim_grad_norm)(const real *grads, const optim_tensor *tensors, int n_tensors, double grad_scale);
// The factor the unscaled gradients are multiplied by: min(1, max_norm / norm).
static inline double optim_clip_factor(double norm, double max_norm) {
    return norm > max_norm ? max_norm / norm : 1.0;
}
