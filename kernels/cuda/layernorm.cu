// LayerNorm over the last dimension, FP32 math whatever the storage type:
//   out[n,:] = (inp[n,:] - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps)   [N,C]
// Forward saves mean[N] and rstd[N] (FP32). Backward: dinp (=) per row,
//   dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * weight,
// and dweight += sum_n dout * xhat, dbias += sum_n dout (FP32, fixed-order chunked sums).
// One warp per row; the variance is taken around the mean (two passes over the row).
// Fused with the dropout around it (the post-LN encoder's sublayer end):
//   forward:  res = dropout(inp) + residual (saved, the LayerNorm's input), out = LN(res);
//   backward: dres = LN backward of dout (=), dinp = dropout_backward(dres) (=), the same
//             draws as the forward (flat index n*C + c), one Philox call per four elements.
// 128-bit loads and stores when C is a multiple of the pack and the pointers are aligned.
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/vec.cuh"

namespace CUDA_NS {

static const int ROWS_PER_BLOCK = 4;

// One warp per row; each lane takes W columns at a time (W = the pack size on the vector
// path). FUSED: the row is first made as res = dropout(inp) + residual and stored (rounded to
// the activation type, which is what the statistics then see), else it is inp.
template <typename Act, int W, bool FUSED>
static __global__ void layernorm_forward_kernel(Act *out, Act *res, float *mean_out, float *rstd_out, const Act *inp,
                                                const Act *residual, const Act *weight, const Act *bias, int N,
                                                int C, float eps, dropout_t dropout) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    const Act *x = FUSED ? res + base : inp + base;
    float sum = 0.0f, v[W];
    for (int c = lane * W; c < C; c += 32 * W) {
        if constexpr (FUSED) {
            float r[W] = {};
            load_span<W>(v, inp + base + c);
            if (residual) load_span<W>(r, residual + base + c);
            unsigned keep = dropout_keep_span<W>(dropout, base + c);
            float scale = 1.0f / (1.0f - dropout.p);
            for (int k = 0; k < W; k++) v[k] = to_float(from_float<Act>(((keep >> k) & 1u ? v[k] * scale : 0.0f) + r[k]));
            store_span<W>(res + base + c, v);
        } else {
            load_span<W>(v, x + c);
        }
        for (int k = 0; k < W; k++) sum += v[k];
    }
    float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        load_span<W>(v, x + c);
        for (int k = 0; k < W; k++) sq += (v[k] - mean) * (v[k] - mean);
    }
    float rstd = rsqrtf(warp_sum(sq) / C + eps);
    for (int c = lane * W; c < C; c += 32 * W) {
        float w[W], b[W];
        load_span<W>(v, x + c);
        load_span<W>(w, weight + c);
        load_span<W>(b, bias + c);
        for (int k = 0; k < W; k++) v[k] = (v[k] - mean) * rstd * w[k] + b[k];
        store_span<W>(out + base + c, v);
    }
    if (lane == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

// dinp of a row; with ddrop also ddrop = dropout_backward(dinp as stored), the same draws as
// the forward's dropout at the flat index.
template <typename Act, int W>
static __global__ void layernorm_dinp_kernel(Act *dinp, Act *ddrop, const Act *dout, const Act *inp,
                                             const Act *weight, const float *mean, const float *rstd, int N, int C,
                                             dropout_t dropout) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    const Act *x = inp + base, *d = dout + base;
    float mu = mean[row], rs = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    float xv[W], dv[W], w[W];
    for (int c = lane * W; c < C; c += 32 * W) {
        load_span<W>(xv, x + c);
        load_span<W>(dv, d + c);
        load_span<W>(w, weight + c);
        for (int k = 0; k < W; k++) {
            float g = dv[k] * w[k];
            sum_g += g;
            sum_gx += g * (xv[k] - mu) * rs;
        }
    }
    float mean_g = warp_sum(sum_g) / C, mean_gx = warp_sum(sum_gx) / C;
    float scale = 1.0f / (1.0f - dropout.p);
    for (int c = lane * W; c < C; c += 32 * W) {
        load_span<W>(xv, x + c);
        load_span<W>(dv, d + c);
        load_span<W>(w, weight + c);
        for (int k = 0; k < W; k++) {
            float xhat = (xv[k] - mu) * rs;
            dv[k] = to_float(from_float<Act>(rs * (dv[k] * w[k] - mean_g - xhat * mean_gx)));
        }
        store_span<W>(dinp + base + c, dv);
        if (ddrop) {
            unsigned keep = dropout_keep_span<W>(dropout, base + c);
            for (int k = 0; k < W; k++) dv[k] = (keep >> k) & 1u ? dv[k] * scale : 0.0f;
            store_span<W>(ddrop + base + c, dv);
        }
    }
}

// Per chunk of rows and 32 columns: partial sums of dout * xhat and of dout.
template <typename Act>
static __global__ void layernorm_partials_kernel(float *partials, const Act *dout, const Act *inp,
                                                 const float *mean, const float *rstd, int N, int C,
                                                 int rows_per_chunk) {
    __shared__ float tile_w[8][33], tile_b[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int first = blockIdx.y * rows_per_chunk, last = min(N, first + rows_per_chunk);
    float acc_w = 0.0f, acc_b = 0.0f;
    if (c < C)
        for (int n = first + (int)threadIdx.y; n < last; n += 8) {
            float d = to_float(dout[(size_t)n * C + c]);
            acc_w += d * (to_float(inp[(size_t)n * C + c]) - mean[n]) * rstd[n];
            acc_b += d;
        }
    tile_w[threadIdx.y][threadIdx.x] = acc_w;
    tile_b[threadIdx.y][threadIdx.x] = acc_b;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float sw = 0.0f, sb = 0.0f;
        for (int r = 0; r < 8; r++) {
            sw += tile_w[r][threadIdx.x];
            sb += tile_b[r][threadIdx.x];
        }
        partials[(size_t)blockIdx.y * 2 * C + c] = sw;
        partials[(size_t)blockIdx.y * 2 * C + C + c] = sb;
    }
}

static __global__ void layernorm_add_partials_kernel(float *dweight, float *dbias, const float *partials, int chunks,
                                                     int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int k = 0; k < chunks; k++) {
        sw += partials[(size_t)k * 2 * C + c];
        sb += partials[(size_t)k * 2 * C + C + c];
    }
    dweight[c] += sw;
    dbias[c] += sb;
}

template <typename Act, bool FUSED>
static void forward_rows(Act *out, Act *res, float *mean, float *rstd, const Act *inp, const Act *residual,
                         const Act *weight, const Act *bias, int N, int C, float eps, dropout_t dropout) {
    if (N == 0) return;
    constexpr int P = pack_size<Act>();
    bool vec = C % P == 0 && all_aligned({out, res, inp, residual, weight, bias});
    if (vec)
        LAUNCH(ceil_div(N, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32, 0, device_stream(),
               layernorm_forward_kernel<Act, P, FUSED>)(out, res, mean, rstd, inp, residual, weight, bias, N, C, eps,
                                                        dropout);
    else
        LAUNCH(ceil_div(N, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32, 0, device_stream(),
               layernorm_forward_kernel<Act, 1, FUSED>)(out, res, mean, rstd, inp, residual, weight, bias, N, C, eps,
                                                        dropout);
    CHECK_LAUNCH("layernorm_forward_kernel");
}

template <typename Act>
void layernorm_ops<Act>::forward(void *out, void *mean, void *rstd, const void *inp, const void *weight,
                                 const void *bias, int N, int C, float eps) {
    forward_rows<Act, false>((Act *)out, nullptr, (float *)mean, (float *)rstd, (const Act *)inp, nullptr,
                             (const Act *)weight, (const Act *)bias, N, C, eps, dropout_t{});
}

template <typename Act>
void layernorm_ops<Act>::residual_dropout_forward(void *out, void *res, void *mean, void *rstd, const void *inp,
                                                  const void *residual, const void *weight, const void *bias, int N,
                                                  int C, float eps, dropout_t dropout) {
    forward_rows<Act, true>((Act *)out, (Act *)res, (float *)mean, (float *)rstd, (const Act *)inp,
                            (const Act *)residual, (const Act *)weight, (const Act *)bias, N, C, eps, dropout);
}

template <typename Act>
void layernorm_ops<Act>::dropout_backward(void *dres, void *dinp, void *dweight, void *dbias, const void *dout,
                                          const void *res, const void *weight, const void *mean, const void *rstd,
                                          int N, int C, dropout_t dropout) {
    if (N == 0) return;
    const Act *d = (const Act *)dout, *x = (const Act *)res;
    // Parameter gradients first: dres may alias dout.
    int chunks = N < 16384 ? (N + 63) / 64 : 256;
    int rows_per_chunk = (N + chunks - 1) / chunks;
    chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
    float *partials = (float *)device_workspace(WS_REDUCE, (size_t)chunks * 2 * C * sizeof(float));
    LAUNCH(dim3(ceil_div(C, 32), chunks), dim3(32, 8), 0, device_stream(), layernorm_partials_kernel<Act>)(
        partials, d, x, (const float *)mean, (const float *)rstd, N, C, rows_per_chunk);
    CHECK_LAUNCH("layernorm_partials_kernel");
    LAUNCH(ceil_div(C, 128), 128, 0, device_stream(), layernorm_add_partials_kernel)(
        (float *)dweight, (float *)dbias, partials, chunks, C);
    CHECK_LAUNCH("layernorm_add_partials_kernel");
    constexpr int P = pack_size<Act>();
    bool vec = C % P == 0 && all_aligned({dres, dinp, dout, res, weight});
    if (vec)
        LAUNCH(ceil_div(N, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32, 0, device_stream(), layernorm_dinp_kernel<Act, P>)(
            (Act *)dres, (Act *)dinp, d, x, (const Act *)weight, (const float *)mean, (const float *)rstd, N, C,
            dropout);
    else
        LAUNCH(ceil_div(N, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32, 0, device_stream(), layernorm_dinp_kernel<Act, 1>)(
            (Act *)dres, (Act *)dinp, d, x, (const Act *)weight, (const float *)mean, (const float *)rstd, N, C,
            dropout);
    CHECK_LAUNCH("layernorm_dinp_kernel");
}

template <typename Act>
void layernorm_ops<Act>::backward(void *dinp, void *dweight, void *dbias, const void *dout, const void *inp,
                                  const void *weight, const void *mean, const void *rstd, int N, int C) {
    dropout_backward(dinp, nullptr, dweight, dbias, dout, inp, weight, mean, rstd, N, C, dropout_t{});
}

INSTANTIATE_OPS(layernorm_ops)

}  // namespace CUDA_NS
