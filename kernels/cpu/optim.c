// The gradient norm every CPU optimizer (lamb.c, lars.c, adamw.c) clips with: over every
// tensor of the list, summed in double in tensor order (engine/optim.h states the rules).
//   g = clip * grads / grad_scale, clip = min(1, max_grad_norm / ||grads / grad_scale||)
#include "kernels/cpu/optim.h"

double CPU_OP(optim_grad_norm)(const real *grads, const optim_tensor *tensors, int n_tensors, double grad_scale) {
    double sq = 0.0;
    for (int i = 0; i < n_tensors; i++)
        for (size_t k = 0; k < tensors[i].numel; k++) {
            double g = grads[tensors[i].offset + k] / grad_scale;
            sq += g * g;
        }
    return sqrt(sq);
}
