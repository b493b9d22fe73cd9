// AdamW on the GPU over all tensors at once, in the chunk layout of optim.cuh. Same rule as
// kernels/cpu/adamw.c (engine/optim.h states it); FP32 arithmetic.
//   1. global norm and clip factor   2. moments and weights, element by element
#include <vector>
#include "kernels/cuda/optim.cuh"

namespace CUDA_NS {

struct adamw_coefficients {
    adam_coefficients adam;
    float decay;  // 1 - lr * weight_decay, computed in double on the host
};

static __global__ void adamw_kernel(float *params, float *mom, float *vel, const optim_chunk *chunks,
                                    const int *decays, const float *grads, const float *scalars,
                                    adamw_coefficients c) {
    optim_chunk ch = chunks[blockIdx.x];
    float clip = scalars[1], decay = decays[ch.tensor] ? c.decay : 1.0f;
    for (int k = threadIdx.x; k < ch.numel; k += blockDim.x) {
        long long i = ch.start + k;
        float m = mom[i], v = vel[i];
        adam_moments(c.adam, grads[i], clip, m, v);
        mom[i] = m;
        vel[i] = v;
        params[i] = params[i] * decay - c.adam.lr * adam_step(c.adam, m, v);
    }
}

double adamw_step(float *params, float *m, float *v, const void *grads_, const optim_tensor *tensors, int n_tensors,
                  adam_hyper h) {
    const float *grads = (const float *)grads_;
    optim_start s = optim_begin(tensors, n_tensors, grads, h);
    if (!s.go) return s.norm;
    double rate = h.decay_lr_ref > 0.0 ? h.lr / h.decay_lr_ref : h.lr;  // decoupled: lr / the peak rate
    adamw_coefficients c = {adam_coefficients_of(h, s.inv_scale), (float)(1.0 - rate * h.weight_decay)};
    LAUNCH(s.L.n_chunks, OPTIM_THREADS, 0, device_stream(), adamw_kernel)(params, m, v, s.L.chunks, s.L.decays,
                                                                          grads, s.L.scalars, c);
    CHECK_LAUNCH("adamw_kernel");
    return s.norm;
}

}  // namespace CUDA_NS
