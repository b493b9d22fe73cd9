// What the multi-tensor optimizers on the GPU share (lamb.cu, lars.cu, adamw.cu; implemented
// in optim.cu): one chunk layout of the tensor list (chunks of at most OPTIM_CHUNK elements that
// never straddle two tensors, one block each), the global gradient norm with its clip factor,
// and per-tensor ratios from per-chunk pairs of sums. Every sum runs in a fixed order (per
// chunk, then the chunks in order), so the updates are deterministic.
#pragma once
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

static const int OPTIM_CHUNK = 16384, OPTIM_THREADS = 256;

struct optim_chunk {
    long long start;
    int numel;
    int tensor;
};

// The layout in device memory (built and uploaded when the tensor list changes; in
// training, once) and the per-step scratch beside it.
struct optim_layout {
    int n_chunks, n_tensors;
    const optim_chunk *chunks;
    const int *first_chunk;  // [n_tensors + 1]: tensor t has chunks first_chunk[t] .. first_chunk[t + 1] - 1
    const int *decays;       // [n_tensors]: the weight-decay flag
    float *chunk_sq;         // [n_chunks]
    float *chunk_pair;       // [2 n_chunks]: two sums per chunk, filled by the optimizer's kernel
    float *scalars;          // [2]: global gradient norm, clip factor
    float *ratio;            // [n_tensors]: per-tensor trust ratio
    float *tensor_pair;      // [2 n_tensors]: the two sums per tensor, when they are summed over ranks
};

optim_layout optim_layout_of(const optim_tensor *tensors, int n_tensors);

// ||grads * inv_scale|| over the whole list; on the device scalars[0] = that norm and
// scalars[1] = min(1, max_norm / norm). Returns the norm to the host (not finite: overflow).
// With sum_over_ranks (sharded state, engine/zero.c) the sum of squares is summed over the
// ranks in device memory before the norm is taken.
float optim_grad_norm(const optim_layout &L, const float *grads, float inv_scale, float max_norm,
                      void (*sum_over_ranks)(float *, int));

// The start every optimizer step shares: the layout of the tensor list, 1 / grad_scale and
// the global gradient norm with its clip factor. go is false when there is nothing to update:
// an empty list (norm 0) or a norm that is not finite (an overflow: the step is skipped).
struct optim_start {
    optim_layout L;
    float inv_scale, norm;
    bool go;
};
optim_start optim_begin(const optim_tensor *tensors, int n_tensors, const float *grads, double grad_scale,
                        double max_grad_norm, void (*sum_over_ranks)(float *, int));
// The same from an optimizer's hyperparameters (adam_hyper, lars_hyper).
template <typename Hyper>
optim_start optim_begin(const optim_tensor *tensors, int n_tensors, const float *grads, const Hyper &h) {
    return optim_begin(tensors, n_tensors, grads, h.grad_scale, h.max_grad_norm, h.sum_over_ranks);
}

// ratio[t] from the sums a = sum of chunk_pair[2i], b = sum of chunk_pair[2i + 1] over the
// tensor's chunks, where the tensor decays and both sums are > 0 (else 1):
//   RATIO_LAMB: sqrt(a) / sqrt(b)                                   (a = ||w||^2, b = ||u||^2)
//   RATIO_LARS: coefficient sqrt(a) / (sqrt(b) + wd sqrt(a) + eps)  (a = ||w||^2, b = ||g||^2)
//   RATIO_STABLE: 1 / max(1, sqrt(a / b)) on every tensor         (a = sum g^2 / max(v, eps^2), b = elements)
// With weight_decay 0, LAMB leaves every ratio at 1 (apex: no trust ratio without decay).
enum optim_ratio_rule { RATIO_LAMB, RATIO_LARS, RATIO_STABLE };
// With sum_over_ranks the per-tensor sums are summed over the ranks first.
void optim_tensor_ratios(const optim_layout &L, optim_ratio_rule rule, float coefficient, float weight_decay,
                         float eps, void (*sum_over_ranks)(float *, int));

// The block's sums of a and b into chunk_pair[2 blockIdx.x], [2 blockIdx.x + 1]: the
// per-chunk pair that optim_tensor_ratios reads (every thread calls it).
__device__ __forceinline__ void optim_store_chunk_pair(float *chunk_pair, float a, float b, float *scratch) {
    a = block_sum(a, scratch);
    b = block_sum(b, scratch);
    if (threadIdx.x == 0) {
        chunk_pair[2 * blockIdx.x] = a;
        chunk_pair[2 * blockIdx.x + 1] = b;
    }
}

// The Adam moments of LAMB and AdamW: their coefficients, with 1 - beta and the bias
// corrections computed in double on the host (1.0f - 0.999f is off by 1.3e-5 relative).
struct adam_coefficients {
    float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, inv_scale, bc1, bc2, lr;
};
inline adam_coefficients adam_coefficients_of(const adam_hyper &h, float inv_scale) {
    return {(float)h.beta1,         (float)(1.0 - h.beta1),
            (float)h.beta2,         (float)(1.0 - h.beta2),
            (float)h.eps,           inv_scale,
            (float)(1.0 - pow(h.beta1, (double)h.step)), (float)(1.0 - pow(h.beta2, (double)h.step)),
            (float)h.lr};
}
// m and v updated from the raw gradient g_raw (times 1/scale and the clip factor).
__device__ __forceinline__ void adam_moments(const adam_coefficients &c, float g_raw, float clip, float &m, float &v) {
    float g = g_raw * c.inv_scale * clip;
    m = c.beta1 * m + c.one_minus_beta1 * g;
    v = c.beta2 * v + c.one_minus_beta2 * g * g;
}
// The bias-corrected Adam step m^ / (sqrt(v^) + eps).
__device__ __forceinline__ float adam_step(const adam_coefficients &c, float m, float v) {
    return (m / c.bc1) / (sqrtf(v / c.bc2) + c.eps);
}

}  // namespace CUDA_NS
