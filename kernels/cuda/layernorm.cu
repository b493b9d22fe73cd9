// LayerNorm over the last dimension, FP32 math whatever the storage type:
//   out[n,:] = (inp[n,:] - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps)   [N,C]
// Forward saves mean[N] and rstd[N] (FP32). Backward: dinp (=) per row,
//   dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dout * weight,
// and dweight += sum_n dout * xhat, dbias += sum_n dout (FP32, fixed-order chunked sums).
// Without a bias (NULL: ModernBERT's LayerNorms) the forward adds none and dbias is NULL.
// Forward: one warp per row; the variance is taken around the mean (two passes over the row).
// Backward: one pass over dout and the input, which writes dinp and each chunk of rows' column
// sums of dout * xhat and dout (partials), then a second small kernel adds the chunks in order.
// Fused with the dropout around it (the post-LN encoder's sublayer end):
//   forward:  res = dropout(inp) + residual (saved, the LayerNorm's input), out = LN(res);
//             the decisions drawn at the keyed index (dropout_row_first(row) + c: the row map
//             read once per row), one Philox call per eight elements, and saved as bits
//             (dropout_t's keep_bits, C / 8 bytes per row);
//   backward: dres = LN backward of dout (=), dinp = dropout_backward(dres) (=) with the
//             forward's saved bits: no Philox in the backward.
// 128-bit loads and stores when C is a multiple of the pack and the pointers are aligned.
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/vec.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>

namespace CUDA_NS {

static const int ROWS_PER_BLOCK = 4;

// The keep bits of columns c .. c + W - 1 into a row's mask (bit c: byte c / 8, bit c % 8),
// from a warp whose lanes hold neighbouring spans (lane l: columns c0 + l W). A byte is
// written by one lane: for W < 8 the lanes that share it first OR their bits together, so
// every lane of the warp calls this (in_row: the lane's span lies in the row).
template <int W>
__device__ __forceinline__ void keep_bits_store(uint8_t *row_bits, int c, unsigned keep, bool in_row) {
    if constexpr (W % 8 == 0) {
        if (in_row)
            for (int g = 0; g < W / 8; g++) row_bits[c / 8 + g] = (uint8_t)(keep >> (8 * g));
    } else {
        unsigned v = in_row ? keep << (c % 8) : 0u;
        for (int m = 1; m < 8 / W; m *= 2) v |= __shfl_xor_sync(0xffffffffu, v, m);
        if (in_row && c % 8 == 0) row_bits[c / 8] = (uint8_t)v;
    }
}

// The keep bits of columns c .. c + W - 1 (c a multiple of W) from a row's mask.
template <int W>
__device__ __forceinline__ unsigned keep_bits_load(const uint8_t *row_bits, int c) {
    if constexpr (W % 8 == 0) {
        unsigned bits = 0;
        for (int g = 0; g < W / 8; g++) bits |= (unsigned)row_bits[c / 8 + g] << (8 * g);
        return bits;
    } else {
        return (unsigned)row_bits[c / 8] >> (c % 8) & ((1u << W) - 1u);
    }
}

// One warp per row; each lane takes W columns at a time (W = the pack size on the vector
// path). FUSED: the row is first made as res = dropout(inp) + residual and stored (rounded to
// the activation type, which is what the statistics then see), else it is inp; with
// dropout.keep_bits (and p > 0) the decisions are stored there too. BIAS: the LayerNorm has a
// bias (a separate instantiation without one, so that BERT's pays nothing for ModernBERT's).
template <typename Act, int W, bool FUSED, bool BIAS>
static __global__ void layernorm_forward_kernel(Act *out, Act *res, float *mean_out, float *rstd_out, const Act *inp,
                                                const Act *residual, const Act *weight, const Act *bias, int N,
                                                int C, float eps, dropout_t dropout) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    const Act *x = FUSED ? res + base : inp + base;
    float sum = 0.0f, v[W];
    if constexpr (FUSED) {
        uint64_t keyed = dropout_row_first(dropout, row, C);
        uint8_t *bits = dropout.keep_bits && dropout.p > 0.0f
                            ? (uint8_t *)(dropout.keep_bits + (size_t)row * dropout_keep_words(C))
                            : nullptr;
        float scale = 1.0f / (1.0f - dropout.p);
        // The same trip count on every lane: the lanes of a byte of bits meet in keep_bits_store.
        for (int c0 = 0; c0 < C; c0 += 32 * W) {
            int c = c0 + lane * W;
            bool in_row = c < C;
            unsigned keep = 0;
            if (in_row) {
                float r[W] = {};
                load_span<W>(v, inp + base + c);
                if (residual) load_span<W>(r, residual + base + c);
                keep = dropout_keep_span_keyed<W>(dropout, keyed + c);
                for (int k = 0; k < W; k++)
                    v[k] = to_float(from_float<Act>(((keep >> k) & 1u ? v[k] * scale : 0.0f) + r[k]));
                store_span<W>(res + base + c, v);
                for (int k = 0; k < W; k++) sum += v[k];
            }
            if (bits) keep_bits_store<W>(bits, c, keep, in_row);
        }
    } else {
        for (int c = lane * W; c < C; c += 32 * W) {
            load_span<W>(v, x + c);
            for (int k = 0; k < W; k++) sum += v[k];
        }
    }
    float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        load_span<W>(v, x + c);
        for (int k = 0; k < W; k++) sq += (v[k] - mean) * (v[k] - mean);
    }
    float rstd = rsqrtf(warp_sum(sq) / C + eps);
    for (int c = lane * W; c < C; c += 32 * W) {
        float w[W], b[W] = {};
        load_span<W>(v, x + c);
        load_span<W>(w, weight + c);
        if constexpr (BIAS) load_span<W>(b, bias + c);
        for (int k = 0; k < W; k++) v[k] = (v[k] - mean) * rstd * w[k] + b[k];
        store_span<W>(out + base + c, v);
    }
    if (lane == 0) {
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }
}

// Backward, one pass: a block takes a chunk of rows, G rows at a time (threadIdx.y), each row
// spread over the block's TX threads (threadIdx.x), thread tx owning the W columns at
// (s * TX + tx) * W for s < S. The thread holds its part of the row in registers: the row's
// two sums are one block reduction, then dinp (and with ddrop, ddrop = dropout_backward(dinp
// as stored) with the forward's keep bits) is written, and the thread adds dout * xhat and
// dout of its columns to its own column sums. At the end the G groups' sums are added in a
// fixed order (G-1 down to 0) into the chunk's row of partials[chunk, 2, C].
// The weights are loaded once; the next group's inputs, dout and statistics are loaded (as
// stored) before the current group's sums, and the current group's keep bits before its
// barrier, so that they arrive behind the barrier and math. dinp and ddrop may alias dout:
// each element is read before the same thread writes it, and the prefetched row is the one
// this thread takes next.
// One span per thread (S = 1: every width up to 512 packs, BERT's among them) is held to 64
// registers, two blocks of 512 threads per SM.
static const int LNB_THREADS = 512;  // most threads of a backward block (TX * G)
// The span loops run S times, unrolled so that the per-span arrays stay in registers.
#ifdef BERTPRE_CUDA_EMULATION
#define LNB_UNROLL
#else
#define LNB_UNROLL _Pragma("unroll")
#endif

// A row's spans of inp and dout as stored and its statistics: what the backward loads for
// the group after the current one.
template <typename Act, int W, int S>
struct ln_backward_row {
    Act x[S][W], d[S][W];
    float mu, rs;
};

template <typename Act, int W, int S>
__device__ __forceinline__ void ln_backward_load(ln_backward_row<Act, W, S> &r, const Act *inp, const Act *dout,
                                                 const float *mean, const float *rstd, int row, int C, int TX,
                                                 int tx) {
    size_t base = (size_t)row * C;
    r.mu = mean[row];
    r.rs = rstd[row];
    LNB_UNROLL
    for (int s = 0; s < S; s++) {
        int c = (s * TX + tx) * W;
        if (c >= C) continue;
        load_raw<W>(r.x[s], inp + base + c);
        load_raw<W>(r.d[s], dout + base + c);
    }
}

template <typename Act, int W, int S>
static __global__ void __launch_bounds__(LNB_THREADS, S == 1 ? 2 : 1)
    layernorm_backward_kernel(Act *dinp, Act *ddrop, float *partials, const Act *dout, const Act *inp,
                              const Act *weight, const float *mean, const float *rstd, const Act *dadd, int N,
                              int C, int rows_per_chunk, dropout_t dropout) {
    __shared__ float red[2][LNB_THREADS / 32][2];
    const int TX = blockDim.x, G = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
    const int warp = (ty * TX + tx) / 32, lane = tx % 32, group_warps = TX / 32;
    int first = blockIdx.x * rows_per_chunk, last = min(N, first + rows_per_chunk);
    float acc_w[S][W] = {}, acc_b[S][W] = {};
    float scale = 1.0f / (1.0f - dropout.p);
    const uint8_t *bits = ddrop && dropout.p > 0.0f ? (const uint8_t *)dropout.keep_bits : nullptr;
    // The weights, the rows and the prefetched rows are held as stored (half the registers
    // of FP32 for FP16/BF16) and converted where they are used.
    Act w[S][W] = {};
    LNB_UNROLL
    for (int s = 0; s < S; s++) {
        int c = (s * TX + tx) * W;
        if (c < C) load_raw<W>(w[s], weight + c);
    }
    ln_backward_row<Act, W, S> next = {};
    if (first + ty < last) ln_backward_load<Act, W, S>(next, inp, dout, mean, rstd, first + ty, C, TX, tx);
    int buf = 0;
    for (int r0 = first; r0 < last; r0 += G, buf ^= 1) {
        int row = r0 + ty;
        bool active = row < last;
        size_t base = (size_t)row * C;
        ln_backward_row<Act, W, S> cur = next;
        float sum_g = 0.0f, sum_gx = 0.0f;
        unsigned keep[S] = {};
        if (active) {
            if (row + G < last) ln_backward_load<Act, W, S>(next, inp, dout, mean, rstd, row + G, C, TX, tx);
            // The row's keep bits, needed after the barrier.
            LNB_UNROLL
            for (int s = 0; s < S; s++) {
                int c = (s * TX + tx) * W;
                keep[s] = bits && c < C ? keep_bits_load<W>(bits + (size_t)row * dropout_keep_words(C) * 4, c) : ~0u;
            }
            LNB_UNROLL
            for (int s = 0; s < S; s++) {
                int c = (s * TX + tx) * W;
                if (c >= C) continue;
                for (int k = 0; k < W; k++) {
                    float g = to_float(cur.d[s][k]) * to_float(w[s][k]);
                    sum_g += g;
                    sum_gx += g * (to_float(cur.x[s][k]) - cur.mu) * cur.rs;
                }
            }
        }
        sum_g = warp_sum(sum_g);
        sum_gx = warp_sum(sum_gx);
        if (lane == 0) {
            red[buf][warp][0] = sum_g;
            red[buf][warp][1] = sum_gx;
        }
        // One barrier per row group: red is double-buffered, and a warp can only overwrite
        // this buffer after the next barrier, which every thread reaches after reading it.
        __syncthreads();
        if (!active) continue;
        sum_g = sum_gx = 0.0f;
        for (int j = 0; j < group_warps; j++) {
            sum_g += red[buf][ty * group_warps + j][0];
            sum_gx += red[buf][ty * group_warps + j][1];
        }
        float mean_g = sum_g / C, mean_gx = sum_gx / C;
        LNB_UNROLL
        for (int s = 0; s < S; s++) {
            int c = (s * TX + tx) * W;
            if (c >= C) continue;
            float dv[W];
            for (int k = 0; k < W; k++) {
                float d = to_float(cur.d[s][k]), xhat = (to_float(cur.x[s][k]) - cur.mu) * cur.rs;
                acc_w[s][k] += d * xhat;
                acc_b[s][k] += d;
                dv[k] = to_float(from_float<Act>(cur.rs * (d * to_float(w[s][k]) - mean_g - xhat * mean_gx)));
            }
            if (dadd) {  // the residual's other gradient: rounded as a separate add would round the sum
                Act more[W];
                load_raw<W>(more, dadd + base + c);
                for (int k = 0; k < W; k++) dv[k] += to_float(more[k]);
            }
            store_span<W>(dinp + base + c, dv);
            if (ddrop) {
                for (int k = 0; k < W; k++) dv[k] = (keep[s] >> k) & 1u ? dv[k] * scale : 0.0f;
                store_span<W>(ddrop + base + c, dv);
            }
        }
    }
    // The groups' column sums, added in the order G-1, G-2, ..., 0 through carry.
    if (G > 1) {
        BERTPRE_DYNAMIC_SHARED(float, carry);  // 2 * S * W * TX floats
        for (int g = G - 1; g >= 1; g--) {
            if (ty == g)
                for (int s = 0; s < S; s++)
                    for (int k = 0; k < W; k++) {
                        float *slot = carry + (size_t)((s * W + k) * 2) * TX + tx;
                        slot[0] = g == G - 1 ? acc_w[s][k] : slot[0] + acc_w[s][k];
                        slot[TX] = g == G - 1 ? acc_b[s][k] : slot[TX] + acc_b[s][k];
                    }
            __syncthreads();
        }
        if (ty == 0)
            for (int s = 0; s < S; s++)
                for (int k = 0; k < W; k++) {
                    const float *slot = carry + (size_t)((s * W + k) * 2) * TX + tx;
                    acc_w[s][k] += slot[0];
                    acc_b[s][k] += slot[TX];
                }
    }
    if (ty != 0) return;
    float *pw = partials + (size_t)blockIdx.x * 2 * C, *pb = pw + C;
    LNB_UNROLL
    for (int s = 0; s < S; s++) {
        int c = (s * TX + tx) * W;
        if (c >= C) continue;
        for (int k = 0; k < W; k++) {
            pw[c + k] = acc_w[s][k];
            pb[c + k] = acc_b[s][k];
        }
    }
}

// dweight[c] += sum of the chunks' partials[chunk, 0, c], dbias[c] of partials[chunk, 1, c],
// in chunk order (dbias NULL: a LayerNorm without bias).
template <bool BIAS>
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
    if constexpr (BIAS) dbias[c] += sb;
}

template <typename Act, bool FUSED>
static void forward_rows(Act *out, Act *res, float *mean, float *rstd, const Act *inp, const Act *residual,
                         const Act *weight, const Act *bias, int N, int C, float eps, dropout_t dropout) {
    if (N == 0) return;
    constexpr int P = pack_size<Act>();
    bool vec = C % P == 0 && all_aligned({out, res, inp, residual, weight, bias});
#define LNF_LAUNCH(W_, BIAS_)                                                                                 \
    LAUNCH(ceil_div(N, ROWS_PER_BLOCK), ROWS_PER_BLOCK * 32, 0, device_stream(),                           \
           layernorm_forward_kernel<Act, W_, FUSED, BIAS_>)(out, res, mean, rstd, inp, residual, weight, bias, N, C, \
                                                            eps, dropout)
    if (vec && bias) LNF_LAUNCH(P, true);
    else if (vec) LNF_LAUNCH(P, false);
    else if (bias) LNF_LAUNCH(1, true);
    else LNF_LAUNCH(1, false);
#undef LNF_LAUNCH
    CHECK_LAUNCH("layernorm_forward_kernel");
}

template <typename Act>
void layernorm_ops<Act>::forward(void *out, void *mean, void *rstd, const void *inp, const void *weight,
                                 const void *bias, int N, int C, float eps) {
    forward_rows<Act, false>((Act *)out, nullptr, (float *)mean, (float *)rstd, (const Act *)inp, nullptr,
                             (const Act *)weight, (const Act *)bias, N, C, eps, dropout_t{});
}

// A row map keys rows of the op's width (dropout_row_first): the fused kernels' contract.
static void check_row_map(const char *op, int C, dropout_t dropout) {
    if (dropout.row_map && dropout.row_len != C)
        fatal("CUDA %s: dropout row map over rows of %d elements, the op's rows have C = %d", op, dropout.row_len, C);
}

template <typename Act>
void layernorm_ops<Act>::residual_dropout_forward(void *out, void *res, void *mean, void *rstd, const void *inp,
                                                  const void *residual, const void *weight, const void *bias, int N,
                                                  int C, float eps, dropout_t dropout) {
    check_row_map("residual dropout layernorm forward", C, dropout);
    forward_rows<Act, true>((Act *)out, (Act *)res, (float *)mean, (float *)rstd, (const Act *)inp,
                            (const Act *)residual, (const Act *)weight, (const Act *)bias, N, C, eps, dropout);
}

// The backward block's shape for rows of C elements taken W at a time: TX threads per row
// (a multiple of 32, at most LNB_THREADS) holding S spans of W columns each, G rows at once.
struct ln_backward_shape {
    int TX, G, S;
};
static ln_backward_shape ln_backward_shape_for(int C, int W) {
    int units = (int)ceil_div(C, W);
    int TX = std::min(LNB_THREADS, (int)ceil_div(units, 32) * 32);
    int S = (int)ceil_div(units, TX);
    return {TX, LNB_THREADS / TX, S};
}

template <typename Act, int W>
static void launch_backward(const ln_backward_shape &sh, int chunks, size_t smem, Act *dres, Act *dinp,
                            float *partials, const Act *dout, const Act *res, const Act *weight, const float *mean,
                            const float *rstd, const Act *dadd, int N, int C, int rows_per_chunk,
                            dropout_t dropout) {
    dim3 block(sh.TX, sh.G);
#define LNB_LAUNCH(SPANS)                                                                                      \
    LAUNCH(chunks, block, smem, device_stream(), layernorm_backward_kernel<Act, W, SPANS>)(                     \
        dres, dinp, partials, dout, res, weight, mean, rstd, dadd, N, C, rows_per_chunk, dropout)
    switch (sh.S) {
    case 1: LNB_LAUNCH(1); break;
    case 2: LNB_LAUNCH(2); break;
    case 3: case 4: LNB_LAUNCH(4); break;
    default: LNB_LAUNCH(8); break;
    }
#undef LNB_LAUNCH
    CHECK_LAUNCH("layernorm_backward_kernel");
}

template <typename Act>
static void ln_backward_rows(void *dres, void *dinp, void *dweight, void *dbias, const void *dout, const void *res,
                             const void *weight, const void *mean, const void *rstd, const void *dadd, int N, int C,
                             dropout_t dropout) {
    if (dinp && dropout.p > 0.0f && !dropout.keep_bits)
        fatal("CUDA layernorm dropout backward: dropout.keep_bits is NULL with p = %g "
              "(it reads the forward's saved decisions)", dropout.p);
    if (N == 0 || C == 0) return;
    constexpr int P = pack_size<Act>();
    bool vec = C % P == 0 && all_aligned({dres, dinp, dout, res, weight, dadd});
    int W = vec ? P : 1;
    ln_backward_shape sh = ln_backward_shape_for(C, W);
    if (sh.S > 8)  // the memory plan refuses such a model first (layernorm_backward_max_width)
        fatal("CUDA layernorm backward: rows of C = %d elements are wider than it takes (%d)", C, 8 * LNB_THREADS * W);
    // Chunks of rows as the column sums elsewhere (at most 256), one block each.
    int rows_per_chunk, chunks = column_chunks(N, &rows_per_chunk);
    float *partials = (float *)device_workspace(WS_REDUCE, (size_t)chunks * 2 * C * sizeof(float));
    size_t smem = sh.G > 1 ? (size_t)2 * sh.S * W * sh.TX * sizeof(float) : 0;
    if (vec)
        launch_backward<Act, P>(sh, chunks, smem, (Act *)dres, (Act *)dinp, partials, (const Act *)dout,
                                (const Act *)res, (const Act *)weight, (const float *)mean, (const float *)rstd,
                                (const Act *)dadd, N, C, rows_per_chunk, dropout);
    else
        launch_backward<Act, 1>(sh, chunks, smem, (Act *)dres, (Act *)dinp, partials, (const Act *)dout,
                                (const Act *)res, (const Act *)weight, (const float *)mean, (const float *)rstd,
                                (const Act *)dadd, N, C, rows_per_chunk, dropout);
    if (dbias)
        LAUNCH(ceil_div(C, 128), 128, 0, device_stream(), layernorm_add_partials_kernel<true>)(
            (float *)dweight, (float *)dbias, partials, chunks, C);
    else
        LAUNCH(ceil_div(C, 128), 128, 0, device_stream(), layernorm_add_partials_kernel<false>)(
            (float *)dweight, nullptr, partials, chunks, C);
    CHECK_LAUNCH("layernorm_add_partials_kernel");
}

// dres = the LayerNorm's input gradient (+ dadd, backward's dinp_add, in the plain backward),
// dinp = its dropout backward (NULL: none).
template <typename Act>
void layernorm_ops<Act>::dropout_backward(void *dres, void *dinp, void *dweight, void *dbias, const void *dout,
                                          const void *res, const void *weight, const void *mean, const void *rstd,
                                          int N, int C, dropout_t dropout) {
    ln_backward_rows<Act>(dres, dinp, dweight, dbias, dout, res, weight, mean, rstd, nullptr, N, C, dropout);
}

template <typename Act>
void layernorm_ops<Act>::backward(void *dinp, void *dweight, void *dbias, const void *dout, const void *inp,
                                  const void *weight, const void *mean, const void *rstd, const void *dinp_add, int N,
                                  int C) {
    ln_backward_rows<Act>(dinp, nullptr, dweight, dbias, dout, inp, weight, mean, rstd, dinp_add, N, C, dropout_t{});
}

template <typename Act>
int layernorm_backward_max_width(int C) {
    constexpr int P = pack_size<Act>();
    return 8 * LNB_THREADS * (C % P == 0 ? P : 1);
}
template int layernorm_backward_max_width<float>(int);
template int layernorm_backward_max_width<f16>(int);
template int layernorm_backward_max_width<bf16>(int);

INSTANTIATE_OPS(layernorm_ops)

}  // namespace CUDA_NS
