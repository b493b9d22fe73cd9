// Multi-head self-attention core, as kernels/cpu/attention.c (same dropout element index,
// same layouts: padded rows b*T + i or packed rows seq_offsets[b] + i; sequence b has
// L_b = seq_offsets[b+1] - seq_offsets[b] real tokens).
// FP16/BF16 with head sizes 32/64/128 (any T) go to the fused tensor-core kernels of
// flash_attention.cu; FP32 and every other shape take this GEMM path:
//   qkv -> q, k, v as [B,NH,T,HS] (permute; in the packed layout the rows past L_b are zeros)
//   S = q k^T / sqrt(HS)                       batched GEMM, B*NH matrices [T,T], FP32 out
//   P = softmax over keys j < L_b              fused kernel, FP32 math; saves lse = m + log l
//       (and |i - j| <= window with a sliding window, and lo_i <= j < hi_i with documents,
//       doc_bounds: the other scores get probability 0)
//   P' = dropout(P), index ((b*NH + h)*T + i)*T + j, one Philox call per eight elements
//   out = P' v, back to the token rows        batched GEMM + permute (packed: real rows only)
// Backward (=): S again by the GEMM, P = exp(S - lse) and P' (one kernel, the only draw);
//   dP' = dout v^T (FP32 out); dv = P'^T dout; dS = P (dP - rowsum(P dP)) / sqrt(HS),
//   dP = dropout_backward(dP'); dq = dS k; dk = dS^T q; then back to dqkv[B,T,3C].
// S and dP' leave their GEMMs in FP32: the softmax backward subtracts rowsum(P dP) from dP,
// and with the near-uniform attention of early training that cancels most digits; rounded
// to FP16 first, the query/key gradients of BERT-base widths were off by ~10%.
// A row-major [rows, cols] matrix is the column-major [cols, rows] one, which is how the
// GEMM calls read.
#include <type_traits>
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

static const int SOFTMAX_ROWS_PER_BLOCK = 4;

// Between the token-major rows (qkv with parts = 3, the context with parts = 1; padded
// [B,T,parts,NH,HS] or packed [N_real,parts,NH,HS]) and the head-major [parts,B,NH,T,HS] the
// batched GEMMs use. Packed, the head-major rows past a sequence's length are written as
// zeros and never copied back.
template <typename Act>
static __global__ void permute_kernel(Act *dst, const Act *src, const int *seq_offsets, int packed, int B, int T,
                                      int NH, int HS, int parts, int to_token_major) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // head-major index
    size_t total = (size_t)parts * B * T * NH * HS;
    if (i >= total) return;
    int e = (int)(i % HS);
    size_t r = i / HS;
    int t = (int)(r % T);
    r /= T;
    int h = (int)(r % NH);
    r /= NH;
    int b = (int)(r % B);
    int part = (int)(r / B);
    size_t row = (size_t)b * T + t;
    if (packed) {
        if (t >= seq_offsets[b + 1] - seq_offsets[b]) {
            if (!to_token_major) dst[i] = from_float<Act>(0.0f);
            return;
        }
        row = (size_t)seq_offsets[b] + t;
    }
    size_t token_major = (row * parts + part) * NH * HS + (size_t)h * HS + e;
    if (to_token_major)
        dst[token_major] = src[i];
    else
        dst[i] = src[token_major];
}

template <typename Act>
static void permute(Act *dst, const Act *src, const int *seq_offsets, int packed, int B, int T, int NH, int HS,
                    int parts, int to_token_major) {
    size_t total = (size_t)parts * B * T * NH * HS;
    LAUNCH(ceil_div(total, 256), 256, 0, device_stream(), permute_kernel<Act>)(dst, src, seq_offsets, packed, B, T,
                                                                               NH, HS, parts, to_token_major);
    CHECK_LAUNCH("permute_kernel");
}

// One warp per row (b,h,i): the probabilities after dropout from the FP32 scores, and the
// row's log-sum-exp (+inf for a row without real keys, whose probabilities are all 0; packed,
// none for the rows i >= L_b, which do not exist).
// WIN: the masked instantiation (a window, window > 0, or documents, doc_bounds); the other
// has no masking code.
template <typename Act, bool WIN>
static __global__ void softmax_forward_kernel(float *lse, Act *dropped, const float *scores, const int *seq_offsets,
                                              const int *doc_bounds, int packed, int B, int NH, int T,
                                              int window_arg, dropout_t dropout) {
    const int window = WIN ? window_arg : 0;
    int row = blockIdx.x * SOFTMAX_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T) return;
    int b = row / (NH * T), i = row % T;
    const float *s = scores + (size_t)row * T;
    const int L = seq_offsets[b + 1] - seq_offsets[b];
    // The keys this row sees: j < L, within the window and the document.
    int lo = WIN && window > 0 && i - window > 0 ? i - window : 0;
    int hi = WIN && window > 0 && i + window + 1 < L ? i + window + 1 : L;
    if (WIN && doc_bounds && (!packed || i < L)) {
        size_t r = packed ? (size_t)seq_offsets[b] + i : (size_t)b * T + i;
        lo = max(lo, doc_bounds[2 * r]), hi = min(hi, doc_bounds[2 * r + 1]);
    }
    float maxval = -INFINITY;
    for (int j = lo + lane; j < hi; j += 32) maxval = fmaxf(maxval, s[j]);
    maxval = warp_max(maxval);
    float sum = 0.0f;
    for (int j = lo + lane; j < hi; j += 32) sum += expf(s[j] - maxval);
    sum = warp_sum(sum);
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    if (lane == 0 && (!packed || row % T < L)) lse[row] = sum > 0.0f ? maxval + logf(sum) : INFINITY;
    // One Philox call per eight elements of the flat index: each lane takes the groups of
    // eight that meet this row (a group at the row's ends is drawn by both rows it touches).
    uint64_t first = (uint64_t)row * T, end = first + T;
    for (uint64_t g = first / 8 + lane; g * 8 < end; g += 32) {
        unsigned keep = dropout_keep8_unmapped(dropout, g);
        for (int k = 0; k < 8; k++) {
            uint64_t e = g * 8 + k;
            if (e < first || e >= end) continue;
            int j = (int)(e - first);
            bool seen = WIN ? j >= lo && j < hi : j < L;  // hi <= lo: none
            float p = to_float(from_float<Act>(seen ? expf(s[j] - maxval) * inv : 0.0f));
            dropped[e] = from_float<Act>((keep >> k) & 1u ? p / (1.0f - dropout.p) : 0.0f);
        }
    }
}

// P = exp(S - lse) (0 for padding keys) and P' = dropout(P) from the recomputed FP32
// scores, eight elements (one Philox call) per thread.
template <typename Act, bool WIN>
static __global__ void probs_from_lse_kernel(Act *probs, Act *dropped, const float *scores, const float *lse,
                                             const int *seq_offsets, const int *doc_bounds, int packed, int NH, int T,
                                             int window_arg, size_t n, dropout_t dropout) {
    const int window = WIN ? window_arg : 0;
    size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (g * 8 >= n) return;
    unsigned keep = dropout_keep8_unmapped(dropout, g);
    for (int k = 0; k < 8 && g * 8 + k < n; k++) {
        size_t i = g * 8 + k, row = i / T;
        int j = (int)(i % T), b = (int)(row / ((size_t)NH * T)), L = seq_offsets[b + 1] - seq_offsets[b];
        // Packed, a query row past L has no lse (nor a row): its probabilities are 0.
        bool real = j < L && (!packed || (int)(row % T) < L);
        if constexpr (WIN) {
            int q = (int)(row % T);
            real = real && (window <= 0 || (q - j <= window && j - q <= window));
            if (real && doc_bounds) {
                size_t r = packed ? (size_t)seq_offsets[b] + q : (size_t)b * T + q;
                real = j >= doc_bounds[2 * r] && j < doc_bounds[2 * r + 1];
            }
        }
        Act p = from_float<Act>(real ? expf(scores[i] - lse[row]) : 0.0f);
        probs[i] = p;
        dropped[i] = from_float<Act>((keep >> k) & 1u ? to_float(p) / (1.0f - dropout.p) : 0.0f);
    }
}

// One warp per row: dS from P and dP' (FP32); dscores may be probs (each lane reads its
// elements before writing them). The keep decisions come from P' (drawn by
// probs_from_lse_kernel): where P != 0, P' != 0 exactly when the element is kept; where
// P == 0 the element adds nothing either way. So the backward draws once per eight
// elements, as the forward.
template <typename Act>
static __global__ void softmax_backward_kernel(Act *dscores, const float *dgrad, const Act *probs,
                                               const Act *dropped, int rows, int T, float scale, dropout_t dropout) {
    int row = blockIdx.x * SOFTMAX_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const Act *p = probs + (size_t)row * T, *pd = dropped + (size_t)row * T;
    const float *d = dgrad + (size_t)row * T;
    float inv_keep = 1.0f / (1.0f - dropout.p);
    float dot = 0.0f;
    for (int j = lane; j < T; j += 32) {
        float dp = to_float(pd[j]) != 0.0f ? d[j] * inv_keep : 0.0f;
        dot += to_float(p[j]) * dp;
    }
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32) {
        float dp = to_float(pd[j]) != 0.0f ? d[j] * inv_keep : 0.0f;
        dscores[(size_t)row * T + j] = from_float<Act>(to_float(p[j]) * (dp - dot) * scale);
    }
}

template <typename Act>
void attention_ops<Act>::forward(void *out, void *lse, uint32_t *keep, const void *qkv, const int *seq_offsets,
                                 const int *doc_bounds, int packed, int B, int T, int C, int NH, int window,
                                 dropout_t dropout) {
    if (B == 0) return;
    (void)keep;
    if (flash_attention_fits<Act>(T, C, NH)) {
        if constexpr (!std::is_same<Act, float>::value)
            flash_attention_forward<Act>(out, lse, keep, qkv, seq_offsets, doc_bounds, packed, B, T, C, NH, window,
                                         dropout);
        return;
    }
    // This path's backward draws the mask again (probs_from_lse_kernel): `keep` goes unused.
    int HS = C / NH;
    size_t NC = (size_t)B * T * C, TT = (size_t)T * T;
    int batch = B * NH;
    dtype_t act = dtype_of<Act>::value;
    Act *q = (Act *)device_workspace(WS_ATTN_QKV, 3 * NC * sizeof(Act));
    Act *k = q + NC, *v = q + 2 * NC;
    Act *dropped = (Act *)device_workspace(WS_ATTN_P, (size_t)batch * TT * sizeof(Act));
    float *scores = (float *)device_workspace(WS_ATTN_F32, (size_t)batch * TT * sizeof(float));
    cudaStream_t stream = device_stream();
    permute(q, (const Act *)qkv, seq_offsets, packed, B, T, NH, HS, 3, 0);
    // S^T[T_j, T_i] = k[T_j,HS] (as (k^T)^T) x q^T[HS,T_i], scaled
    device_gemm(true, false, T, T, HS, 1.0f / sqrtf((float)HS), k, HS, (long long)T * HS, q, HS, (long long)T * HS,
                0.0f, scores, T, (long long)TT, batch, act, DTYPE_F32, nullptr);
    int rows = batch * T;
    if (window > 0 || doc_bounds)
        LAUNCH(ceil_div(rows, SOFTMAX_ROWS_PER_BLOCK), SOFTMAX_ROWS_PER_BLOCK * 32, 0, stream,
               softmax_forward_kernel<Act, true>)((float *)lse, dropped, scores, seq_offsets, doc_bounds, packed, B,
                                                  NH, T, window, dropout);
    else
        LAUNCH(ceil_div(rows, SOFTMAX_ROWS_PER_BLOCK), SOFTMAX_ROWS_PER_BLOCK * 32, 0, stream,
               softmax_forward_kernel<Act, false>)((float *)lse, dropped, scores, seq_offsets, nullptr, packed, B, NH,
                                                   T, 0, dropout);
    CHECK_LAUNCH("softmax_forward_kernel");
    // ctx^T[HS, T_i] = v^T[HS, T_j] x P'^T[T_j, T_i]; the context goes where q was.
    device_gemm(false, false, HS, T, T, 1.0f, v, HS, (long long)T * HS, dropped, T, (long long)TT, 0.0f, q, HS,
                (long long)T * HS, batch, act, act, nullptr);
    permute((Act *)out, q, seq_offsets, packed, B, T, NH, HS, 1, 1);
}

template <typename Act>
void attention_ops<Act>::backward(void *dqkv, const void *dout, const void *qkv, const void *out, const void *lse,
                                  const uint32_t *keep, const int *seq_offsets, const int *doc_bounds, int packed,
                                  int B, int T, int C, int NH, int window, dropout_t dropout) {
    if (B == 0) return;
    (void)keep;
    if (flash_attention_fits<Act>(T, C, NH)) {
        if constexpr (!std::is_same<Act, float>::value)
            flash_attention_backward<Act>(dqkv, dout, qkv, out, lse, keep, seq_offsets, doc_bounds, packed, B, T, C,
                                          NH, window, dropout);
        return;
    }
    int HS = C / NH;
    size_t NC = (size_t)B * T * C, TT = (size_t)T * T;
    int batch = B * NH;
    long long sh = (long long)T * HS;
    dtype_t act = dtype_of<Act>::value;
    cudaStream_t stream = device_stream();
    Act *q = (Act *)device_workspace(WS_ATTN_QKV, 3 * NC * sizeof(Act));
    Act *k = q + NC, *v = q + 2 * NC;
    Act *dropped = (Act *)device_workspace(WS_ATTN_P, (size_t)batch * TT * sizeof(Act));
    Act *probs = (Act *)device_workspace(WS_ATTN_DP, (size_t)batch * TT * sizeof(Act));  // P, then dS in place
    float *f32 = (float *)device_workspace(WS_ATTN_F32, (size_t)batch * TT * sizeof(float));  // S, then dP'
    Act *dctx = (Act *)device_workspace(WS_ATTN_DCTX, NC * sizeof(Act));
    Act *dq = (Act *)device_workspace(WS_ATTN_DQKV, 3 * NC * sizeof(Act));
    Act *dk = dq + NC, *dv = dq + 2 * NC;
    permute(q, (const Act *)qkv, seq_offsets, packed, B, T, NH, HS, 3, 0);
    permute(dctx, (const Act *)dout, seq_offsets, packed, B, T, NH, HS, 1, 0);
    device_gemm(true, false, T, T, HS, 1.0f / sqrtf((float)HS), k, HS, sh, q, HS, sh, 0.0f, f32, T, (long long)TT,
                batch, act, DTYPE_F32, nullptr);
    if (window > 0 || doc_bounds)
        LAUNCH(ceil_div(ceil_div((size_t)batch * TT, 8), 256), 256, 0, stream, probs_from_lse_kernel<Act, true>)(
            probs, dropped, f32, (const float *)lse, seq_offsets, doc_bounds, packed, NH, T, window,
            (size_t)batch * TT, dropout);
    else
        LAUNCH(ceil_div(ceil_div((size_t)batch * TT, 8), 256), 256, 0, stream, probs_from_lse_kernel<Act, false>)(
            probs, dropped, f32, (const float *)lse, seq_offsets, nullptr, packed, NH, T, 0, (size_t)batch * TT,
            dropout);
    CHECK_LAUNCH("probs_from_lse_kernel");
    // dP'^T[T_j, T_i] = v[T_j,HS] x dctx^T[HS,T_i]
    device_gemm(true, false, T, T, HS, 1.0f, v, HS, sh, dctx, HS, sh, 0.0f, f32, T, (long long)TT, batch, act,
                DTYPE_F32, nullptr);
    // dv^T[HS, T_j] = dctx^T[HS, T_i] x P'[T_i, T_j]
    device_gemm(false, true, HS, T, T, 1.0f, dctx, HS, sh, dropped, T, (long long)TT, 0.0f, dv, HS, sh, batch, act,
                act, nullptr);
    int rows = batch * T;
    // dS overwrites P.
    LAUNCH(ceil_div(rows, SOFTMAX_ROWS_PER_BLOCK), SOFTMAX_ROWS_PER_BLOCK * 32, 0, stream,
           softmax_backward_kernel<Act>)(probs, f32, probs, dropped, rows, T, 1.0f / sqrtf((float)HS), dropout);
    CHECK_LAUNCH("softmax_backward_kernel");
    Act *dscores = probs;
    // dq^T[HS, T_i] = k^T[HS, T_j] x dS^T[T_j, T_i]
    device_gemm(false, false, HS, T, T, 1.0f, k, HS, sh, dscores, T, (long long)TT, 0.0f, dq, HS, sh, batch, act,
                act, nullptr);
    // dk^T[HS, T_j] = q^T[HS, T_i] x dS[T_i, T_j]
    device_gemm(false, true, HS, T, T, 1.0f, q, HS, sh, dscores, T, (long long)TT, 0.0f, dk, HS, sh, batch, act,
                act, nullptr);
    permute((Act *)dqkv, dq, seq_offsets, packed, B, T, NH, HS, 3, 1);
}

INSTANTIATE_OPS(attention_ops)

}  // namespace CUDA_NS
