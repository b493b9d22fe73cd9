// Pointwise ops, FP32 math, as kernels/cpu/pointwise.c and fused.c (same element index for
// dropout):
//   gelu:      GELU_ERF: out = 0.5 x (1 + erf(x / sqrt 2)); saves its input. dinp = dout (Phi + x phi).
//              GELU_TANH: out = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed
//              as x sigmoid(2u); dinp = dout (s + 2 x u' s (1 - s)), s = sigmoid(2u).
//   bias+gelu: out[n,c] = gelu(inp[n,c] + bias[c]) in one pass (the GEMM writes inp without
//              bias); backward dinp = dout gelu'(inp + bias) (=, may alias dout) with
//              dbias += column sums of dinp (as stored) in the same pass, fixed-order chunks.
//              gelu is bias+gelu without a bias.
//   tanh:      out = tanh(x); saves its output. dinp = dout (1 - out^2).
//   dropout:   out = inp * keep / (1 - p) (+ residual); keep from Philox at the element's
//              flat index, one Philox call per 16-byte vector; saves nothing.
//              dinp = dout * keep / (1 - p), the same draws.
//   geglu:     out[n,i] = gelu(x) * gate over inp[n,:] = [x | gate] (2I wide); saves inp.
//              dinp = [dout gate gelu'(x) | dout gelu(x)].
//   rope:      in place on the queries and keys of qkv[N,3C]: in each head, pair (d, d + HS/2)
//              rotated by t f_d, f_d = 1 / theta^(2d / HS) and the angle rounded to FP32 as
//              transformers computes them (kernels/cpu/rope.c), sine and cosine by the precise
//              sincosf; the backward rotates by -t f_d. One thread per pair.
// Streaming kernels move W elements per thread: 128-bit loads when every pointer is
// 16-byte aligned and the length a multiple of the pack (vec.cuh), else scalar accesses.
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/sfu.cuh"
#include "kernels/cuda/vec.cuh"

namespace CUDA_NS {

__device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
// gelu'(x) = Phi(x) + x phi(x) with one exponential e = exp(-x^2/2) for both terms: phi =
// e / sqrt(2 pi), and Phi(-|x|) = erfc(|x| / sqrt 2) / 2 = t P(t) e, t = 1 / (1 + p |x| / sqrt 2)
// (Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7 on erfc, so 7.5e-8 on Phi; P's coefficients
// are A&S's halved). test_cuda_ops derives a bound for each x from the documented errors (A&S,
// ex2/rcp.approx, FP32 rounding; at most 8.4e-7, 8.8e-8 at x = -3.07) and checks every point of
// a dense grid against the exact form within it (the emulation errs as much as PTX allows).
// 214 SASS per 8 FP16 elements in bias_gelu_backward_kernel's loop (erff + expf: 377).
__device__ __forceinline__ float gelu_grad(float x) {
    float e = sfu_exp2(x * x * -0.72134752044448170f);  // -log2(e) / 2
    float t = sfu_rcp(fmaf(0.23164188826636040f, fabsf(x), 1.0f));  // p / sqrt 2
    float poly = fmaf(fmaf(fmaf(fmaf(0.5307027145f, t, -0.7265760135f), t, 0.7107068705f), t, -0.142248368f), t,
                      0.127414796f);
    float tail = t * poly * e;  // Phi(-|x|)
    return fmaf(x * 0.39894228040143268f, e, x >= 0.0f ? 1.0f - tail : tail);
}

// The tanh form: 0.5 (1 + tanh(u)) = s = sigmoid(2u) = 1 / (1 + e), e = exp(-2u), by the SFU's
// exp2 and rcp (2 and 1 ulp); its derivative's bound is derived per point as for gelu_grad. The exponent is capped at 64 (x below about -7.6), where
// s = 2^-64 stands in for smaller values: an absolute error under |x| 2^-64 on gelu, and
// e s^2 (= s (1 - s), no cancellation near s = 1) stays finite for the gradient.
__device__ __forceinline__ float gelu_tanh_sigmoid(float x, float &e) {
    // -2u log2(e) = -2 sqrt(2/pi) log2(e) (x + 0.044715 x^3)
    float u = x * fmaf(0.044715f * x, x, 1.0f);
    e = sfu_exp2(fminf(u * -2.3022082f, 64.0f));
    return sfu_rcp(1.0f + e);
}
template <int A> __device__ __forceinline__ float gelu_of(float x) {
    if constexpr (A == GELU_TANH) {
        float e;
        return x * gelu_tanh_sigmoid(x, e);
    } else {
        return gelu(x);
    }
}
// d/dx x s(2u) = s + x s (1 - s) 2 u', u' = sqrt(2/pi) (1 + 3 0.044715 x^2)
template <int A> __device__ __forceinline__ float gelu_grad_of(float x) {
    if constexpr (A == GELU_TANH) {
        float e, s = gelu_tanh_sigmoid(x, e);
        // 2 sqrt(2/pi) (1 + 0.134145 x^2): 2 sqrt(2/pi) 0.134145 = 0.214064449, 2 sqrt(2/pi) = 1.595769122
        float du2 = fmaf(0.21406444907f * x, x, 1.59576912161f);
        return fmaf(x * du2, e * s * s, s);
    } else {
        return gelu_grad(x);
    }
}

// W elements at i0 of a flat tensor of n: a vector span (VEC), or W scalars with a bounds check.
template <int W, bool VEC, typename Act>
__device__ __forceinline__ void load_flat(float (&dst)[W], const Act *p, size_t i0, size_t n) {
    if constexpr (VEC) {
        load_span<W>(dst, p + i0);
    } else {
        for (int k = 0; k < W; k++) dst[k] = i0 + k < n ? to_float(p[i0 + k]) : 0.0f;
    }
}
template <int W, bool VEC, typename Act>
__device__ __forceinline__ void store_flat(Act *p, const float (&src)[W], size_t i0, size_t n) {
    if constexpr (VEC) {
        store_span<W>(p + i0, src);
    } else {
        for (int k = 0; k < W; k++)
            if (i0 + k < n) p[i0 + k] = from_float<Act>(src[k]);
    }
}

// GeGLU's two halves for the W output elements at i0 of [n / I, I]: the input half x and the
// gate half of inp[n / I, 2I] (VEC: I % W == 0, so a span stays in one row).
template <int W, bool VEC, typename Act>
__device__ __forceinline__ void geglu_load(float (&x)[W], float (&gate)[W], const Act *inp, size_t i0, size_t n,
                                           int I) {
    if constexpr (VEC) {
        size_t at = i0 / I * 2 * I + i0 % I;
        load_span<W>(x, inp + at);
        load_span<W>(gate, inp + at + I);
    } else {
        for (int k = 0; k < W; k++) {
            size_t at = (i0 + k) / I * 2 * I + (i0 + k) % I;
            x[k] = i0 + k < n ? to_float(inp[at]) : 0.0f;
            gate[k] = i0 + k < n ? to_float(inp[at + I]) : 0.0f;
        }
    }
}
template <int W, bool VEC, typename Act>
__device__ __forceinline__ void geglu_store(Act *dinp, const float (&dx)[W], const float (&dgate)[W], size_t i0,
                                            size_t n, int I) {
    if constexpr (VEC) {
        size_t at = i0 / I * 2 * I + i0 % I;
        store_span<W>(dinp + at, dx);
        store_span<W>(dinp + at + I, dgate);
    } else {
        for (int k = 0; k < W; k++) {
            if (i0 + k >= n) continue;
            size_t at = (i0 + k) / I * 2 * I + (i0 + k) % I;
            dinp[at] = from_float<Act>(dx[k]);
            dinp[at + I] = from_float<Act>(dgate[k]);
        }
    }
}

// inp + bias[c] for the W elements at i0 of [n / C, C] (bias may be NULL). VEC: C % W == 0.
template <int W, bool VEC, typename Act>
__device__ __forceinline__ void load_biased(float (&x)[W], const Act *inp, const Act *bias, size_t i0, size_t n,
                                            int C) {
    load_flat<W, VEC>(x, inp, i0, n);
    if (!bias) return;
    float b[W];
    if constexpr (VEC) {
        load_span<W>(b, bias + i0 % C);
    } else {
        for (int k = 0; k < W; k++) b[k] = i0 + k < n ? to_float(bias[(i0 + k) % C]) : 0.0f;
    }
    for (int k = 0; k < W; k++) x[k] += b[k];
}

template <typename Act, int A, int W, bool VEC>
static __global__ void bias_gelu_forward_kernel(Act *out, const Act *inp, const Act *bias, size_t n, int C) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i0 >= n) return;
    float x[W];
    load_biased<W, VEC>(x, inp, bias, i0, n, C);
    for (int k = 0; k < W; k++) x[k] = gelu_of<A>(x[k]);
    store_flat<W, VEC>(out, x, i0, n);
}

// dinp = dout gelu'(inp + bias), without the bias gradient.
template <typename Act, int A, int W, bool VEC>
static __global__ void bias_gelu_dinp_kernel(Act *dinp, const Act *dout, const Act *inp, const Act *bias, size_t n,
                                             int C) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i0 >= n) return;
    float x[W], d[W];
    load_biased<W, VEC>(x, inp, bias, i0, n, C);
    load_flat<W, VEC>(d, dout, i0, n);
    for (int k = 0; k < W; k++) d[k] *= gelu_grad_of<A>(x[k]);
    store_flat<W, VEC>(dinp, d, i0, n);
}

// Blocks of 32 x 8 threads over (32 W columns, a chunk of rows): dinp for those rows and
// the chunk's column sums of dinp (as stored) into partials[chunk, C].
static const int BG_ROWS = 8;
template <typename Act, int A, int W>
static __global__ void bias_gelu_backward_kernel(Act *dinp, float *partials, const Act *dout, const Act *inp,
                                                 const Act *bias, int N, int C, int rows_per_chunk) {
    __shared__ float tile[BG_ROWS][32 * W + 1];
    int c0 = (blockIdx.x * 32 + threadIdx.x) * W;
    int first = blockIdx.y * rows_per_chunk, last = min(N, first + rows_per_chunk);
    float acc[W] = {};
    if (c0 < C) {
        float b[W] = {};
        if (bias) load_span<W>(b, bias + c0);
        // The next row's inp and dout are loaded (as stored) before this row's math, so their
        // latency hides behind it. dinp may alias dout: the prefetched row is not the one
        // being written.
        Act xr[W], dr[W];
        int n = first + (int)threadIdx.y;
        if (n < last) {
            load_raw<W>(xr, inp + (size_t)n * C + c0);
            load_raw<W>(dr, dout + (size_t)n * C + c0);
        }
        for (; n < last; n += BG_ROWS) {
            float x[W], d[W];
            for (int k = 0; k < W; k++) x[k] = to_float(xr[k]) + b[k], d[k] = to_float(dr[k]);
            if (n + BG_ROWS < last) {
                load_raw<W>(xr, inp + (size_t)(n + BG_ROWS) * C + c0);
                load_raw<W>(dr, dout + (size_t)(n + BG_ROWS) * C + c0);
            }
            for (int k = 0; k < W; k++) d[k] = to_float(from_float<Act>(d[k] * gelu_grad_of<A>(x[k])));
            store_span<W>(dinp + (size_t)n * C + c0, d);
            for (int k = 0; k < W; k++) acc[k] += d[k];
        }
    }
    for (int k = 0; k < W; k++) tile[threadIdx.y][threadIdx.x * W + k] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && c0 < C)
        for (int k = 0; k < W; k++) {
            float sum = 0.0f;
            for (int r = 0; r < BG_ROWS; r++) sum += tile[r][threadIdx.x * W + k];
            partials[(size_t)blockIdx.y * C + c0 + k] = sum;
        }
}

template <typename Act>
static __global__ void tanh_forward_kernel(Act *out, const Act *inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_float<Act>(tanhf(to_float(inp[i])));
}

template <typename Act>
static __global__ void tanh_backward_kernel(Act *dinp, const Act *dout, const Act *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float y = to_float(out[i]);
    dinp[i] = from_float<Act>(to_float(dout[i]) * (1.0f - y * y));
}

// out = dropout(inp) (+ residual); with residual == NULL and inp = dout it is the backward.
template <typename Act, int W, bool VEC>
static __global__ void dropout_residual_kernel(Act *out, const Act *inp, const Act *residual, size_t n, dropout_t d) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i0 >= n) return;
    float x[W], r[W] = {};
    load_flat<W, VEC>(x, inp, i0, n);
    if (residual) load_flat<W, VEC>(r, residual, i0, n);
    unsigned keep = dropout_keep_span<W>(d, i0);
    float scale = 1.0f / (1.0f - d.p);
    for (int k = 0; k < W; k++) x[k] = ((keep >> k) & 1u ? x[k] * scale : 0.0f) + r[k];
    store_flat<W, VEC>(out, x, i0, n);
}

// GeGLU over the W output elements at i0 of [N, I] (VEC: I % W == 0, the spans aligned): the
// input half at row n's column c, the gate half I columns on.
template <typename Act, int A, int W, bool VEC>
static __global__ void geglu_forward_kernel(Act *out, const Act *inp, size_t n, int I) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i0 >= n) return;
    float x[W], gate[W];
    geglu_load<W, VEC>(x, gate, inp, i0, n, I);
    for (int k = 0; k < W; k++) x[k] = to_float(from_float<Act>(gelu_of<A>(x[k]))) * gate[k];
    store_flat<W, VEC>(out, x, i0, n);
}

template <typename Act, int A, int W, bool VEC>
static __global__ void geglu_backward_kernel(Act *dinp, const Act *dout, const Act *inp, size_t n, int I) {
    size_t i0 = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i0 >= n) return;
    float x[W], gate[W], d[W], dx[W], dgate[W];
    geglu_load<W, VEC>(x, gate, inp, i0, n, I);
    load_flat<W, VEC>(d, dout, i0, n);
    for (int k = 0; k < W; k++) {
        dx[k] = to_float(from_float<Act>(d[k] * gate[k])) * gelu_grad_of<A>(x[k]);
        dgate[k] = d[k] * to_float(from_float<Act>(gelu_of<A>(x[k])));
    }
    geglu_store<W, VEC>(dinp, dx, dgate, i0, n, I);
}

// One thread per (row, q or k, head, pair d < HS/2): the rotation by sign * t f_d.
template <typename Act>
static __global__ void rope_kernel(Act *qkv, const int *positions, int N, int T, int C, int NH, float theta,
                                   float sign) {
    int HS = C / NH, half = HS / 2;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, pairs = (size_t)N * 2 * NH * half;
    if (i >= pairs) return;
    int d = (int)(i % half);
    size_t r = i / half;
    int h = (int)(r % NH);
    r /= NH;
    int part = (int)(r % 2), n = (int)(r / 2), t = positions ? positions[n] : n % T;
    float freq = 1.0f / powf(theta, (float)(2 * d) / (float)HS), s, c;
    sincosf((float)t * freq, &s, &c);
    s *= sign;
    Act *x = qkv + (size_t)n * 3 * C + (size_t)part * C + (size_t)h * HS + d;
    float a = to_float(x[0]), b = to_float(x[half]);
    x[0] = from_float<Act>(a * c - b * s);
    x[half] = from_float<Act>(b * c + a * s);
}

// A flat kernel on the vector path (W = the pack size) when `vec`, else 4 scalars a thread:
// kernel<ARGS..., W, VEC> for the parenthesized template arguments ARGS, e.g. (Act).
#define FLAT_ARGS_(...) __VA_ARGS__
#define FLAT(kernel, args, n, vec, ...)                                                               \
    do {                                                                                              \
        constexpr int P_ = pack_size<Act>();                                                          \
        if (vec)                                                                                      \
            LAUNCH(ceil_div(ceil_div(n, P_), 256), 256, 0, device_stream(),                           \
                   kernel<FLAT_ARGS_ args, P_, true>)(__VA_ARGS__);                                   \
        else                                                                                          \
            LAUNCH(ceil_div(ceil_div(n, 4), 256), 256, 0, device_stream(),                            \
                   kernel<FLAT_ARGS_ args, 4, false>)(__VA_ARGS__);                                   \
        CHECK_LAUNCH(#kernel);                                                                        \
    } while (0)

// The GELU kernels of one kind A (gelu_kind): the erf and the tanh forms are separate
// instantiations, so neither pays for the other.
template <typename Act, int A>
static void bias_gelu_forward_as(void *out, const void *inp, const void *bias, int N, int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    constexpr int P = pack_size<Act>();
    bool vec = C % P == 0 && all_aligned({out, inp, bias});
    FLAT(bias_gelu_forward_kernel, (Act, A), n, vec, (Act *)out, (const Act *)inp, (const Act *)bias, n, C);
}

template <typename Act, int A>
static void bias_gelu_backward_as(void *dinp, void *dbias, const void *dout, const void *inp, const void *bias,
                                  int N, int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    constexpr int P = pack_size<Act>();
    bool vec = C % P == 0 && all_aligned({dinp, dout, inp, bias});
    if (!dbias) {
        FLAT(bias_gelu_dinp_kernel, (Act, A), n, vec, (Act *)dinp, (const Act *)dout, (const Act *)inp,
             (const Act *)bias, n, C);
        return;
    }
    int rows_per_chunk, chunks = column_chunks(N, &rows_per_chunk);
    float *partials = (float *)device_workspace(WS_REDUCE, (size_t)chunks * C * sizeof(float));
    if (vec)
        LAUNCH(dim3(ceil_div(C, 32 * P), chunks), dim3(32, BG_ROWS), 0, device_stream(),
               bias_gelu_backward_kernel<Act, A, P>)((Act *)dinp, partials, (const Act *)dout, (const Act *)inp,
                                                     (const Act *)bias, N, C, rows_per_chunk);
    else
        LAUNCH(dim3(ceil_div(C, 32), chunks), dim3(32, BG_ROWS), 0, device_stream(),
               bias_gelu_backward_kernel<Act, A, 1>)((Act *)dinp, partials, (const Act *)dout, (const Act *)inp,
                                                     (const Act *)bias, N, C, rows_per_chunk);
    CHECK_LAUNCH("bias_gelu_backward_kernel");
    add_column_partials((float *)dbias, partials, chunks, C);
}

template <typename Act>
void pointwise_ops<Act>::bias_gelu_forward(void *out, const void *inp, const void *bias, int N, int C,
                                           gelu_kind act) {
    if (act == GELU_TANH) bias_gelu_forward_as<Act, GELU_TANH>(out, inp, bias, N, C);
    else bias_gelu_forward_as<Act, GELU_ERF>(out, inp, bias, N, C);
}

template <typename Act>
void pointwise_ops<Act>::bias_gelu_backward(void *dinp, void *dbias, const void *dout, const void *inp,
                                            const void *bias, int N, int C, gelu_kind act) {
    if (act == GELU_TANH) bias_gelu_backward_as<Act, GELU_TANH>(dinp, dbias, dout, inp, bias, N, C);
    else bias_gelu_backward_as<Act, GELU_ERF>(dinp, dbias, dout, inp, bias, N, C);
}

template <typename Act>
void pointwise_ops<Act>::gelu_forward(void *out, const void *inp, int n, gelu_kind act) {
    bias_gelu_forward(out, inp, nullptr, 1, n, act);
}
template <typename Act>
void pointwise_ops<Act>::gelu_backward(void *dinp, const void *dout, const void *inp, int n, gelu_kind act) {
    bias_gelu_backward(dinp, nullptr, dout, inp, nullptr, 1, n, act);
}
template <typename Act>
void pointwise_ops<Act>::tanh_forward(void *out, const void *inp, int n) {
    if (n == 0) return;
    LAUNCH(ceil_div(n, 256), 256, 0, device_stream(), tanh_forward_kernel<Act>)((Act *)out, (const Act *)inp, n);
    CHECK_LAUNCH("tanh_forward_kernel");
}
template <typename Act>
void pointwise_ops<Act>::tanh_backward(void *dinp, const void *dout, const void *out, int n) {
    if (n == 0) return;
    LAUNCH(ceil_div(n, 256), 256, 0, device_stream(), tanh_backward_kernel<Act>)((Act *)dinp, (const Act *)dout,
                                                                                 (const Act *)out, n);
    CHECK_LAUNCH("tanh_backward_kernel");
}
template <typename Act>
void pointwise_ops<Act>::dropout_residual_forward(void *out, const void *inp, const void *residual, int n,
                                                  dropout_t d) {
    if (n == 0) return;
    bool vec = n % pack_size<Act>() == 0 && all_aligned({out, inp, residual});
    FLAT(dropout_residual_kernel, (Act), (size_t)n, vec, (Act *)out, (const Act *)inp, (const Act *)residual, (size_t)n, d);
}
template <typename Act>
void pointwise_ops<Act>::dropout_backward(void *dinp, const void *dout, int n, dropout_t d) {
    dropout_residual_forward(dinp, dout, nullptr, n, d);
}

template <typename Act, int A>
static void geglu_as(void *out_or_dinp, const void *dout, const void *inp, int N, int I) {
    size_t n = (size_t)N * I;
    if (n == 0) return;
    constexpr int P = pack_size<Act>();
    bool vec = I % P == 0 && all_aligned({out_or_dinp, dout, inp});
    if (dout)
        FLAT(geglu_backward_kernel, (Act, A), n, vec, (Act *)out_or_dinp, (const Act *)dout, (const Act *)inp, n, I);
    else
        FLAT(geglu_forward_kernel, (Act, A), n, vec, (Act *)out_or_dinp, (const Act *)inp, n, I);
}

template <typename Act>
void pointwise_ops<Act>::geglu_forward(void *out, const void *inp, int N, int I, gelu_kind act) {
    if (act == GELU_TANH) geglu_as<Act, GELU_TANH>(out, nullptr, inp, N, I);
    else geglu_as<Act, GELU_ERF>(out, nullptr, inp, N, I);
}
template <typename Act>
void pointwise_ops<Act>::geglu_backward(void *dinp, const void *dout, const void *inp, int N, int I, gelu_kind act) {
    if (act == GELU_TANH) geglu_as<Act, GELU_TANH>(dinp, dout, inp, N, I);
    else geglu_as<Act, GELU_ERF>(dinp, dout, inp, N, I);
}

template <typename Act>
static void rope(void *qkv, const int *positions, int N, int T, int C, int NH, float theta, float sign) {
    size_t pairs = (size_t)N * C;  // 2 parts x NH heads x HS / 2 pairs per row
    if (pairs == 0) return;
    LAUNCH(ceil_div(pairs, 256), 256, 0, device_stream(), rope_kernel<Act>)((Act *)qkv, positions, N, T, C, NH,
                                                                           theta, sign);
    CHECK_LAUNCH("rope_kernel");
}
template <typename Act>
void pointwise_ops<Act>::rope_forward(void *qkv, const int *positions, int N, int T, int C, int NH, float theta) {
    rope<Act>(qkv, positions, N, T, C, NH, theta, 1.0f);
}
template <typename Act>
void pointwise_ops<Act>::rope_backward(void *dqkv, const int *positions, int N, int T, int C, int NH, float theta) {
    rope<Act>(dqkv, positions, N, T, C, NH, theta, -1.0f);
}

INSTANTIATE_OPS(pointwise_ops)

}  // namespace CUDA_NS
