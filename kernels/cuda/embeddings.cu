// Embeddings: out[b,t,:] = wte[input_ids[b,t]] + wpe[t] + wtt[segment_ids[b,t]]   [B,T,C]
// Forward saves nothing. Backward (+=, FP32): dwte[id] += dout rows with that id (none for
// pad_id), dwpe[t] += sum over b, dwtt[s] += rows of segment s. The ids and segments of the
// backward are the host's copies (backend.h): dwte and dwtt are scatters planned on the host
// (scatter_rows, whose buckets split the long runs: the [MASK] id, each segment), dwpe the
// column sums of dout as [B, T*C]; no download, no host synchronization, fixed-order sums.
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

template <typename Act>
static __global__ void embeddings_forward_kernel(Act *out, const int *input_ids, const int *segment_ids,
                                                 const Act *wte, const Act *wpe, const Act *wtt, int N, int T,
                                                 int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C), t = n % T;
    float v = to_float(wte[(size_t)input_ids[n] * C + c]) + to_float(wpe[(size_t)t * C + c]) +
              to_float(wtt[(size_t)segment_ids[n] * C + c]);
    out[i] = from_float<Act>(v);
}

template <typename Act>
void embeddings_ops<Act>::forward(void *out, const int *input_ids, const int *segment_ids, const void *wte,
                                  const void *wpe, const void *wtt, int B, int T, int C) {
    size_t total = (size_t)B * T * C;
    if (total == 0) return;
    LAUNCH(ceil_div(total, 256), 256, 0, device_stream(), embeddings_forward_kernel<Act>)(
        (Act *)out, input_ids, segment_ids, (const Act *)wte, (const Act *)wpe, (const Act *)wtt, B * T, T, C);
    CHECK_LAUNCH("embeddings_forward_kernel");
}

template <typename Act>
void embeddings_ops<Act>::backward(void *dwte, void *dwpe, void *dwtt, const void *dout, const int *input_ids,
                                   const int *segment_ids, int pad_id, int B, int T, int C) {
    int N = B * T;
    if (N == 0) return;
    const Act *d = (const Act *)dout;
    scatter_rows((float *)dwte, d, input_ids, N, C, pad_id, true);
    // dwpe[t,:] += sum over b of dout[b,t,:]: the column sums of dout seen as [B, T*C].
    column_sums_add((float *)dwpe, d, B, T * C);
    scatter_rows((float *)dwtt, d, segment_ids, N, C, -1, true);
}

INSTANTIATE_OPS(embeddings_ops)

}  // namespace CUDA_NS
