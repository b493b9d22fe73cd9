// Softmax cross-entropy with label smoothing s and an ignore rule, one block per row of
// logits[N,Vp] whose first V columns are the classes (the rest: vocabulary padding, ignored,
// gradient 0), FP32 math (the rule of kernels/cpu/crossentropy.c):
//   losses[n] = logsumexp(logits[n,:V]) - (1 - s) logits[n,target[n]] - s mean(logits[n,:V])
//               (FP32; 0 where target < 0)
//   correct[n] = (argmax == target), the first maximum winning as in the CPU reference.
// Forward saves nothing. Backward (=): dlogits = (softmax - (1 - s) onehot(target) - s / V)
// * dloss, zero rows where target < 0; dlogits may alias logits (every element is read
// before it is written by the same thread, after the row's reductions).
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

static const int CE_THREADS = 256;

template <typename Act>
static __device__ float row_logsumexp(const Act *x, int V, float *scratch, float *maxval_out) {
    float m = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) m = fmaxf(m, to_float(x[v]));
    m = block_max(m, scratch);
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(to_float(x[v]) - m);
    s = block_sum(s, scratch);
    *maxval_out = m;
    return m + logf(s);
}

template <typename Act>
static __global__ void crossentropy_forward_kernel(float *losses, int *correct, const Act *logits,
                                                   const int *targets, int V, int Vp, float smoothing) {
    __shared__ float scratch[32];
    int row = blockIdx.x;
    const Act *x = logits + (size_t)row * Vp;
    float maxval;
    float lse = row_logsumexp(x, V, scratch, &maxval);
    float sum = 0.0f;  // of the row, for the smoothed part (smoothing is the same in every thread)
    if (smoothing != 0.0f) {
        for (int v = threadIdx.x; v < V; v += blockDim.x) sum += to_float(x[v]);
        sum = block_sum(sum, scratch);
    }
    // First index holding the maximum: a min-reduction over the indices that hold it.
    int first = V;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        if (to_float(x[v]) == maxval && v < first) first = v;
    for (int offset = 16; offset > 0; offset >>= 1) first = min(first, __shfl_xor_sync(0xffffffffu, first, offset));
    __shared__ int firsts[32];
    if (threadIdx.x % 32 == 0) firsts[threadIdx.x / 32] = first;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)blockDim.x / 32; w++) first = min(first, firsts[w]);
        int target = targets[row];
        losses[row] = target < 0 ? 0.0f : lse - (1.0f - smoothing) * to_float(x[target]) - smoothing * (sum / V);
        if (correct) correct[row] = target >= 0 && first == target;
    }
}

template <typename Act>
static __global__ void crossentropy_backward_kernel(Act *dlogits, const Act *logits, const int *targets, int V,
                                                    int Vp, float dloss, float smoothing) {
    __shared__ float scratch[32];
    int row = blockIdx.x, target = targets[row];
    const Act *x = logits + (size_t)row * Vp;
    Act *d = dlogits + (size_t)row * Vp;
    for (int v = V + threadIdx.x; v < Vp; v += blockDim.x) d[v] = from_float<Act>(0.0f);
    if (target < 0) {
        for (int v = threadIdx.x; v < V; v += blockDim.x) d[v] = from_float<Act>(0.0f);
        return;
    }
    float maxval;
    float lse = row_logsumexp(x, V, scratch, &maxval);
    float on = 1.0f - smoothing, off = smoothing / V;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float p = expf(to_float(x[v]) - lse);
        d[v] = from_float<Act>((p - (v == target ? on : 0.0f) - off) * dloss);
    }
}

template <typename Act>
void crossentropy_ops<Act>::forward(void *losses, int *correct, const void *logits, const int *targets, int N,
                                    int V, int Vp, float smoothing) {
    if (N == 0) return;
    LAUNCH(N, CE_THREADS, 0, device_stream(), crossentropy_forward_kernel<Act>)((float *)losses, correct,
                                                                                (const Act *)logits, targets, V, Vp,
                                                                                smoothing);
    CHECK_LAUNCH("crossentropy_forward_kernel");
}

template <typename Act>
void crossentropy_ops<Act>::backward(void *dlogits, const void *logits, const int *targets, int N, int V,
                                     int Vp, float dloss, float smoothing) {
    if (N == 0) return;
    LAUNCH(N, CE_THREADS, 0, device_stream(), crossentropy_backward_kernel<Act>)(
        (Act *)dlogits, (const Act *)logits, targets, V, Vp, dloss, smoothing);
    CHECK_LAUNCH("crossentropy_backward_kernel");
}

INSTANTIATE_OPS(crossentropy_ops)

}  // namespace CUDA_NS
