// Softmax cross-entropy with label smoothing s and an ignore rule, one block per row of
// logits[N,Vp] whose first V columns are the classes (the rest: vocabulary padding, ignored,
// gradient 0), FP32 math (the rule of kernels/cpu/crossentropy.c):
//   losses[n] = logsumexp(logits[n,:V]) - (1 - s) logits[n,target[n]] - s mean(logits[n,:V])
//               (FP32; 0 where target < 0)
//   correct[n] = (argmax == target), the first maximum winning as in the CPU reference.
// Forward saves nothing. Backward (=): dlogits = (softmax - (1 - s) onehot(target) - s / V)
// * dloss, zero rows where target < 0; dlogits may alias logits (every element is read
// before it is written by the same thread, after the row's reductions).
// The forward reads its row once: each thread keeps a running maximum m, the sum of
// exp(x - m) (rescaled by exp(m_old - m_new) when m grows), the first index holding m and,
// with smoothing, the plain sum; then one block reduction of each. The backward reads the
// row twice (those statistics, then the gradient). Both move 16 bytes per access (W =
// pack_size) when the row length Vp is a whole number of packs and the pointers are
// 16-byte aligned, else one element (W = 1).
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/vec.cuh"

namespace CUDA_NS {

static const int CE_THREADS = 256;

// A thread's running softmax statistics over the classes v < V it visits, in increasing v.
struct ce_running {
    float m = -INFINITY, s = 0.0f, sum = 0.0f;
    int first;  // first index holding m (V while none)
    __device__ explicit ce_running(int V) : first(V) {}
    __device__ void add(float x, int v) {
        if (x > m) {
            s = s * expf(m - x) + 1.0f;  // exp(-inf) = 0 for the first class
            m = x, first = v;
        } else {
            s += expf(x - m);
        }
        sum += x;
    }
};

// The thread's statistics over row x (Vp columns, the first V classes).
template <int W, typename Act>
__device__ __forceinline__ ce_running row_pass(const Act *x, int V, int Vp) {
    ce_running r(V);
    for (int v0 = threadIdx.x * W; v0 < Vp; v0 += blockDim.x * W) {
        float vals[W];
        load_span<W>(vals, x + v0);
        for (int j = 0; j < W; j++)
            if (v0 + j < V) r.add(vals[j], v0 + j);
    }
    return r;
}

// The row's log-sum-exp from every thread's statistics (every thread gets it; *maxval the
// row maximum).
__device__ __forceinline__ float block_logsumexp(const ce_running &r, float *scratch, float *maxval) {
    float m = block_max(r.m, scratch);
    float s = block_sum(r.m == -INFINITY ? 0.0f : r.s * expf(r.m - m), scratch);
    *maxval = m;
    return m + logf(s);
}

template <int W, typename Act>
static __global__ void __launch_bounds__(CE_THREADS)
    crossentropy_forward_kernel(float *losses, int *correct, const Act *logits, const int *targets, int V, int Vp,
                                float smoothing) {
    __shared__ float scratch[32];
    __shared__ int firsts[32];
    int row = blockIdx.x;
    const Act *x = logits + (size_t)row * Vp;
    ce_running r = row_pass<W>(x, V, Vp);
    float maxval;
    float lse = block_logsumexp(r, scratch, &maxval);
    // smoothing is the same in every thread
    float sum = smoothing != 0.0f ? block_sum(r.sum, scratch) : 0.0f;
    // First index holding the row maximum: a min-reduction over the threads that hold it.
    int first = r.m == maxval ? r.first : V;
    for (int offset = 16; offset > 0; offset >>= 1) first = min(first, __shfl_xor_sync(0xffffffffu, first, offset));
    if (threadIdx.x % 32 == 0) firsts[threadIdx.x / 32] = first;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)blockDim.x / 32; w++) first = min(first, firsts[w]);
        int target = targets[row];
        losses[row] = target < 0 ? 0.0f : lse - (1.0f - smoothing) * to_float(x[target]) - smoothing * (sum / V);
        if (correct) correct[row] = target >= 0 && first == target;
    }
}

template <int W, typename Act>
static __global__ void __launch_bounds__(CE_THREADS)
    crossentropy_backward_kernel(Act *dlogits, const Act *logits, const int *targets, int V, int Vp, float dloss,
                                 float smoothing) {
    __shared__ float scratch[32];
    int row = blockIdx.x, target = targets[row];
    const Act *x = logits + (size_t)row * Vp;
    Act *d = dlogits + (size_t)row * Vp;
    float lse = 0.0f, maxval;
    if (target >= 0) lse = block_logsumexp(row_pass<W>(x, V, Vp), scratch, &maxval);  // target is the block's
    float on = 1.0f - smoothing, off = smoothing / V;
    for (int v0 = threadIdx.x * W; v0 < Vp; v0 += blockDim.x * W) {
        float vals[W];
        load_span<W>(vals, x + v0);
        for (int j = 0; j < W; j++) {
            int v = v0 + j;
            vals[j] = target < 0 || v >= V ? 0.0f : (expf(vals[j] - lse) - (v == target ? on : 0.0f) - off) * dloss;
        }
        store_span<W>(d + v0, vals);
    }
}

template <typename Act>
void crossentropy_ops<Act>::forward(void *losses, int *correct, const void *logits, const int *targets, int N,
                                    int V, int Vp, float smoothing) {
    if (N == 0) return;
    constexpr int P = pack_size<Act>();
    bool vec = Vp % P == 0 && all_aligned({logits});
    auto kernel = vec ? crossentropy_forward_kernel<P, Act> : crossentropy_forward_kernel<1, Act>;
    LAUNCH(N, CE_THREADS, 0, device_stream(), kernel)((float *)losses, correct, (const Act *)logits, targets, V, Vp,
                                                      smoothing);
    CHECK_LAUNCH("crossentropy_forward_kernel");
}

template <typename Act>
void crossentropy_ops<Act>::backward(void *dlogits, const void *logits, const int *targets, int N, int V,
                                     int Vp, float dloss, float smoothing) {
    if (N == 0) return;
    constexpr int P = pack_size<Act>();
    bool vec = Vp % P == 0 && all_aligned({logits, dlogits});
    auto kernel = vec ? crossentropy_backward_kernel<P, Act> : crossentropy_backward_kernel<1, Act>;
    LAUNCH(N, CE_THREADS, 0, device_stream(), kernel)((Act *)dlogits, (const Act *)logits, targets, V, Vp, dloss,
                                                      smoothing);
    CHECK_LAUNCH("crossentropy_backward_kernel");
}

INSTANTIATE_OPS(crossentropy_ops)

}  // namespace CUDA_NS
