// Embeddings: out[n,:] = wte[input_ids[n]] + wpe[t] + wtt[segment_ids[n]]   [N,C], t =
// positions[n] (n % T without positions: the padded layout); without wpe (wtt: a model
// without those tables, such as ModernBERT) no position (segment) row is added, and the
// backward's dwpe (dwtt) is NULL.
// Forward saves nothing. Backward (+=, FP32): dwte[id] += dout rows with that id (none for
// pad_id), dwpe[t] += rows at position t, dwtt[s] += rows of segment s. The ids, segments
// and positions of the backward are the host's copies (backend.h): dwte, dwtt and (with
// positions) dwpe are scatters planned on the host (scatter_rows, whose buckets split the
// long runs: the [MASK] id, each segment); without positions dwpe is the column sums of
// dout as [N/T, T*C]; no download, no host synchronization, fixed-order sums.
#include "kernels/common/check.h"
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

// TABLES: BERT's position and segment tables are added (a separate instantiation without them).
template <typename Act, bool TABLES>
static __global__ void embeddings_forward_kernel(Act *out, const int *input_ids, const int *segment_ids,
                                                 const int *positions, const Act *wte, const Act *wpe,
                                                 const Act *wtt, int N, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    if constexpr (TABLES) {
        int t = positions ? positions[n] : n % T;
        float v = to_float(wte[(size_t)input_ids[n] * C + c]) + to_float(wpe[(size_t)t * C + c]) +
                  to_float(wtt[(size_t)segment_ids[n] * C + c]);
        out[i] = from_float<Act>(v);
    } else {
        out[i] = wte[(size_t)input_ids[n] * C + c];
    }
}

template <typename Act>
void embeddings_ops<Act>::forward(void *out, const int *input_ids, const int *segment_ids, const int *positions,
                                  const void *wte, const void *wpe, const void *wtt, int N, int T, int P, int C) {
    size_t total = (size_t)N * C;
    if (total == 0) return;
    // positions (device memory) lists real tokens' positions below T: T <= P bounds them all.
    if (T > P)
        fatal("embeddings: sequence length %d is longer than the position table of %d rows "
              "(max_position_embeddings)", T, P);
    if ((wpe == nullptr) != (wtt == nullptr))
        fatal("embeddings: a position table without a segment table, or the reverse, is not a model here");
    if (wpe)
        LAUNCH(ceil_div(total, 256), 256, 0, device_stream(), embeddings_forward_kernel<Act, true>)(
            (Act *)out, input_ids, segment_ids, positions, (const Act *)wte, (const Act *)wpe, (const Act *)wtt, N, T,
            C);
    else
        LAUNCH(ceil_div(total, 256), 256, 0, device_stream(), embeddings_forward_kernel<Act, false>)(
            (Act *)out, input_ids, segment_ids, positions, (const Act *)wte, nullptr, nullptr, N, T, C);
    CHECK_LAUNCH("embeddings_forward_kernel");
}

template <typename Act>
void embeddings_ops<Act>::backward(void *dwte, void *dwpe, void *dwtt, const void *dout, const int *input_ids,
                                   const int *segment_ids, const int *positions, int pad_id, int N, int T, int P,
                                   int C) {
    if (N == 0) return;
    if (T > P)  // as in the forward: the model's positions lie below T
        fatal("embeddings: sequence length %d is longer than the position table of %d rows "
              "(max_position_embeddings)", T, P);
    const Act *d = (const Act *)dout;
    scatter_rows((float *)dwte, d, input_ids, N, C, pad_id, true);
    // dwpe[t,:] += sum over b of dout[b,t,:]: the column sums of dout seen as [B, T*C].
    if (dwpe && positions)
        scatter_rows((float *)dwpe, d, positions, N, C, -1, true);
    else if (dwpe)
        column_sums_add((float *)dwpe, d, N / T, T * C);
    if (dwtt) scatter_rows((float *)dwtt, d, segment_ids, N, C, -1, true);
}

INSTANTIATE_OPS(embeddings_ops)

}  // namespace CUDA_NS
