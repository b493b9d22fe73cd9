// LARS on the GPU over all tensors at once, in the chunk layout of optim.cuh. Same rule as
// kernels/cpu/lars.c (engine/optim.h states it); FP32 arithmetic, sums in a fixed order.
//   1. global norm and clip factor   2. per chunk ||w||^2 and ||g||^2 (decayed tensors)
//   3. trust ratio per tensor         4. momentum buffer and weights
#include <vector>
#include "kernels/cuda/optim.cuh"

namespace CUDA_NS {

static __global__ void lars_norms_kernel(float *chunk_pair, const optim_chunk *chunks, const int *decays,
                                         const float *params, const float *grads, const float *scalars,
                                         float inv_scale) {
    __shared__ float scratch[32];
    optim_chunk ch = chunks[blockIdx.x];
    float w_sq = 0.0f, g_sq = 0.0f, clip = scalars[1];
    if (decays[ch.tensor])
        for (int k = threadIdx.x; k < ch.numel; k += blockDim.x) {
            long long i = ch.start + k;
            float w = params[i], g = grads[i] * inv_scale * clip;
            w_sq += w * w;
            g_sq += g * g;
        }
    optim_store_chunk_pair(chunk_pair, w_sq, g_sq, scratch);
}

static __global__ void lars_apply_kernel(float *params, float *momentum, const optim_chunk *chunks, const int *decays,
                                         const float *grads, const float *scalars, const float *ratio,
                                         float inv_scale, float lr, float mu, float weight_decay) {
    optim_chunk ch = chunks[blockIdx.x];
    float clip = scalars[1], trust = ratio[ch.tensor], wd = decays[ch.tensor] ? weight_decay : 0.0f;
    for (int k = threadIdx.x; k < ch.numel; k += blockDim.x) {
        long long i = ch.start + k;
        float w = params[i];
        float d = (grads[i] * inv_scale * clip + wd * w) * trust;
        float buf = mu * momentum[i] + d;
        momentum[i] = buf;
        params[i] = w - lr * buf;
    }
}

double lars_step(float *params, float *momentum, const void *grads_, const optim_tensor *tensors, int n_tensors,
                 lars_hyper h) {
    const float *grads = (const float *)grads_;
    optim_start s = optim_begin(tensors, n_tensors, grads, h);
    if (!s.go) return s.norm;
    cudaStream_t stream = device_stream();
    LAUNCH(s.L.n_chunks, OPTIM_THREADS, 0, stream, lars_norms_kernel)(s.L.chunk_pair, s.L.chunks, s.L.decays,
                                                                      params, grads, s.L.scalars, s.inv_scale);
    CHECK_LAUNCH("lars_norms_kernel");
    optim_tensor_ratios(s.L, RATIO_LARS, (float)h.trust_coefficient, (float)h.weight_decay, (float)h.eps,
                        h.sum_over_ranks);
    LAUNCH(s.L.n_chunks, OPTIM_THREADS, 0, stream, lars_apply_kernel)(
        params, momentum, s.L.chunks, s.L.decays, grads, s.L.scalars, s.L.ratio, s.inv_scale, (float)h.lr,
        (float)h.momentum, (float)h.weight_decay);
    CHECK_LAUNCH("lars_apply_kernel");
    return s.norm;
}

}  // namespace CUDA_NS
