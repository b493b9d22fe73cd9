// LayerNorm over the last dimension, FP32 math whatever the storage type:
//   out[n,:] = (inp[n,:] - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps)   [N,C]
// Forward saves mean[N] and rstd[N] (FP32). Backward: dinp (=) per row,
//   dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * weight,
// and dweight += sum_n dout * xhat, dbias += sum_n dout (FP32, fixed-order chunked sums).
// One warp per row; the variance is taken around the mean (two passes over the row).
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

static const int ROWS_PER_BLOCK = 4;

template <typename Act>
static __global__ void layernorm_forward_kernel(Act *out, float *mean_out, float *rstd_out, const Act *inp,
                                                const Act *weight, const Act *bias, int N, int C, float eps) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const Act *x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += to_float(x[c]);
    float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = to_float(x[c]) - mean;
        sq += d * d;
    }
    float rstd = rsqrtf(warp_sum(sq) / C + eps);
    Act *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        o[c] = from_float<Act>((to_float(x[c]) - mean) * rstd * to_float(weight[c]) + to_float(bias[c]));
    if (lane == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

template <typename Act>
static __global__ void layernorm_dinp_kernel(Act *dinp, const Act *dout, const Act *inp, const Act *weight,
                                             const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const Act *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
    float mu = mean[row], rs = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float g = to_float(d[c]) * to_float(weight[c]);
        sum_g += g;
        sum_gx += g * (to_float(x[c]) - mu) * rs;
    }
    float mean_g = warp_sum(sum_g) / C, mean_gx = warp_sum(sum_gx) / C;
    Act *o = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float g = to_float(d[c]) * to_float(weight[c]);
        float xhat = (to_float(x[c]) - mu) * rs;
        o[c] = from_float<Act>(rs * (g - mean_g - xhat * mean_gx));
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

template <typename Act>
void layernorm_ops<Act>::forward(void *out, void *mean, void *rstd, const void *inp, const void *weight,
                                 const void *bias, int N, int C, float eps) {
    if (N == 0) return;
    LAUNCH(ceil_div(N, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32, 0, device_stream(), layernorm_forward_kernel<Act>)(
        (Act *)out, (float *)mean, (float *)rstd, (const Act *)inp, (const Act *)weight, (const Act *)bias, N, C,
        eps);
    CHECK_LAUNCH("layernorm_forward_kernel");
}

template <typename Act>
void layernorm_ops<Act>::backward(void *dinp, void *dweight, void *dbias, const void *dout, const void *inp,
                                  const void *weight, const void *mean, const void *rstd, int N, int C) {
    if (N == 0) return;
    const Act *d = (const Act *)dout, *x = (const Act *)inp;
    // Parameter gradients first: dinp may alias dout.
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
    LAUNCH(ceil_div(N, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32, 0, device_stream(), layernorm_dinp_kernel<Act>)(
        (Act *)dinp, d, x, (const Act *)weight, (const float *)mean, (const float *)rstd, N, C);
    CHECK_LAUNCH("layernorm_dinp_kernel");
}

INSTANTIATE_OPS(layernorm_ops)

}  // namespace CUDA_NS
