// StableAdamW on the GPU over all tensors at once, in the chunk layout of optim.cuh. Same rule
// as kernels/cpu/stableadamw.c (kernels/backend.h states it); FP32 arithmetic, every sum in a
// fixed order (per chunk, then the chunks in order):
//   1. global norm and clip factor   2. moments (kept bias-corrected), and per chunk the sum
//   of g^2 / max(v, eps^2) and its element count   3. per tensor 1 / max(1, RMS) (optim.cuh,
//   RATIO_STABLE)   4. decay and update with the tensor's rate
#include "kernels/cuda/optim.cuh"

namespace CUDA_NS {

// The debiased betas and the rest, computed in double on the host.
struct stable_coefficients {
    float one_minus_b1, b2, one_minus_b2, eps, eps_sq, inv_scale, lr, weight_decay, decay_per_lr;
};

static __global__ void stableadamw_moments_kernel(float *chunk_pair, const optim_chunk *chunks, float *mom,
                                                  float *vel, const float *grads, const float *scalars,
                                                  stable_coefficients c) {
    __shared__ float scratch[32];
    optim_chunk ch = chunks[blockIdx.x];
    float clip = scalars[1], sum = 0.0f;
    for (int k = threadIdx.x; k < ch.numel; k += blockDim.x) {
        long long i = ch.start + k;
        float g = grads[i] * c.inv_scale * clip, m = mom[i], v = vel[i];
        m += c.one_minus_b1 * (g - m);
        v = c.b2 * v + c.one_minus_b2 * g * g;
        mom[i] = m;
        vel[i] = v;
        sum += g * g / fmaxf(v, c.eps_sq);
    }
    optim_store_chunk_pair(chunk_pair, sum, threadIdx.x == 0 ? (float)ch.numel : 0.0f, scratch);
}

static __global__ void stableadamw_apply_kernel(float *params, const optim_chunk *chunks, const int *decays,
                                                const float *mom, const float *vel, const float *ratio,
                                                stable_coefficients c) {
    optim_chunk ch = chunks[blockIdx.x];
    float lr = c.lr * ratio[ch.tensor];
    float decay = decays[ch.tensor] ? 1.0f - lr * c.decay_per_lr * c.weight_decay : 1.0f;
    for (int k = threadIdx.x; k < ch.numel; k += blockDim.x) {
        long long i = ch.start + k;
        params[i] = params[i] * decay - lr * mom[i] / (sqrtf(vel[i]) + c.eps);
    }
}

// beta (1 - beta^(t-1)) / (1 - beta^t): the EMA weight that keeps the average bias-corrected.
static double debiased(double beta, long t) {
    return beta * (1.0 - pow(beta, (double)(t - 1))) / (1.0 - pow(beta, (double)t));
}

double stableadamw_step(float *params, float *m, float *v, const void *grads_, const optim_tensor *tensors,
                        int n_tensors, adam_hyper h) {
    const float *grads = (const float *)grads_;
    optim_start s = optim_begin(tensors, n_tensors, grads, h);
    if (!s.go) return s.norm;
    double b1 = debiased(h.beta1, h.step), b2 = debiased(h.beta2, h.step);
    stable_coefficients c = {(float)(1.0 - b1), (float)b2, (float)(1.0 - b2), (float)h.eps, (float)(h.eps * h.eps),
                             s.inv_scale, (float)h.lr, (float)h.weight_decay,
                             (float)(h.decay_lr_ref > 0.0 ? 1.0 / h.decay_lr_ref : 1.0)};
    cudaStream_t stream = device_stream();
    LAUNCH(s.L.n_chunks, OPTIM_THREADS, 0, stream, stableadamw_moments_kernel)(s.L.chunk_pair, s.L.chunks, m, v, grads,
                                                                               s.L.scalars, c);
    CHECK_LAUNCH("stableadamw_moments_kernel");
    optim_tensor_ratios(s.L, RATIO_STABLE, 1.0f, 0.0f, 0.0f, h.sum_over_ranks);
    LAUNCH(s.L.n_chunks, OPTIM_THREADS, 0, stream, stableadamw_apply_kernel)(params, s.L.chunks, s.L.decays, m, v,
                                                                             s.L.ratio, c);
    CHECK_LAUNCH("stableadamw_apply_kernel");
    return s.norm;
}

}  // namespace CUDA_NS
