// LAMB update on the GPU over all tensors at once (multi-tensor: every launch covers the
// whole flat buffer, in the chunk layout of optim.cuh). Same rule as kernels/cpu/lamb.c;
// FP32 arithmetic, and every norm is summed in a fixed order (per chunk, then chunks in
// order), so the update is deterministic.
//   1. global gradient norm and clip factor (optim.cuh; the host reads the norm: not finite =
//      overflow, nothing changes)   2. moments, and per chunk the squares of w and u
//   3. trust ratio per tensor (optim.cuh)   4. update
#include "kernels/cuda/optim.cuh"

namespace CUDA_NS {

struct lamb_coefficients {
    adam_coefficients adam;
    float weight_decay;
};

static __device__ __forceinline__ float lamb_direction(float m, float v, float w, float wd,
                                                       const lamb_coefficients &c) {
    return adam_step(c.adam, m, v) + wd * w;
}

static __global__ void lamb_moments_kernel(float *chunk_wu, const optim_chunk *chunks, const int *decays,
                                           const float *params, float *mom, float *vel, const float *grads,
                                           const float *scalars, lamb_coefficients c) {
    __shared__ float scratch[32];
    optim_chunk ch = chunks[blockIdx.x];
    float clip = scalars[1], wd = decays[ch.tensor] ? c.weight_decay : 0.0f;
    float w_sq = 0.0f, u_sq = 0.0f;
    for (int k = threadIdx.x; k < ch.numel; k += blockDim.x) {
        long long i = ch.start + k;
        float m = mom[i], v = vel[i];
        adam_moments(c.adam, grads[i], clip, m, v);
        mom[i] = m;
        vel[i] = v;
        float w = params[i], u = lamb_direction(m, v, w, wd, c);
        w_sq += w * w;
        u_sq += u * u;
    }
    optim_store_chunk_pair(chunk_wu, w_sq, u_sq, scratch);
}

static __global__ void lamb_apply_kernel(float *params, const optim_chunk *chunks, const int *decays,
                                         const float *mom, const float *vel, const float *trust,
                                         lamb_coefficients c) {
    optim_chunk ch = chunks[blockIdx.x];
    float wd = decays[ch.tensor] ? c.weight_decay : 0.0f, step = c.adam.lr * trust[ch.tensor];
    for (int k = threadIdx.x; k < ch.numel; k += blockDim.x) {
        long long i = ch.start + k;
        params[i] -= step * lamb_direction(mom[i], vel[i], params[i], wd, c);
    }
}

double lamb_step(float *params, float *m, float *v, const void *grads_, const optim_tensor *tensors, int n_tensors,
                 adam_hyper h) {
    const float *grads = (const float *)grads_;
    optim_start s = optim_begin(tensors, n_tensors, grads, h);
    if (!s.go) return s.norm;
    lamb_coefficients c = {adam_coefficients_of(h, s.inv_scale), (float)h.weight_decay};
    cudaStream_t stream = device_stream();
    LAUNCH(s.L.n_chunks, OPTIM_THREADS, 0, stream, lamb_moments_kernel)(s.L.chunk_pair, s.L.chunks, s.L.decays,
                                                                        params, m, v, grads, s.L.scalars, c);
    CHECK_LAUNCH("lamb_moments_kernel");
    optim_tensor_ratios(s.L, RATIO_LAMB, 1.0f, (float)h.weight_decay, 0.0f, h.sum_over_ranks);
    LAUNCH(s.L.n_chunks, OPTIM_THREADS, 0, stream, lamb_apply_kernel)(params, s.L.chunks, s.L.decays, m, v,
                                                                      s.L.ratio, c);
    CHECK_LAUNCH("lamb_apply_kernel");
    return s.norm;
}

}  // namespace CUDA_NS
