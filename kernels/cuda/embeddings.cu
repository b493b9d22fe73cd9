// Embeddings: out[b,t,:] = wte[input_ids[b,t]] + wpe[t] + wtt[segment_ids[b,t]]   [B,T,C]
// Forward saves nothing. Backward (+=, FP32): dwte[id] += dout rows with that id (none for
// pad_id), dwpe[t] += sum over b, dwtt[s] += rows of segment s. The three are scatters
// whose keys (ids, positions, segments) are brought to the host and summed per key in a
// fixed order (scatter_rows): deterministic, no float atomics.
#include <vector>
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
    static thread_local std::vector<int> ids, segments, positions;
    ids.resize(N);
    segments.resize(N);
    positions.resize(N);
    device_download(ids.data(), input_ids, (size_t)N * sizeof(int));
    device_download(segments.data(), segment_ids, (size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) positions[n] = n % T;
    const Act *d = (const Act *)dout;
    scatter_rows((float *)dwte, d, ids.data(), N, C, pad_id, true);
    scatter_rows((float *)dwpe, d, positions.data(), N, C, -1, true);
    scatter_rows((float *)dwtt, d, segments.data(), N, C, -1, true);
}

INSTANTIATE_OPS(embeddings_ops)

}  // namespace CUDA_NS
