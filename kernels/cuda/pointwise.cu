// Pointwise ops, FP32 math, as kernels/cpu/pointwise.c (same element index for dropout):
//   gelu:    out = 0.5 x (1 + erf(x / sqrt 2)); saves its input. dinp = dout (Phi + x phi).
//   tanh:    out = tanh(x); saves its output. dinp = dout (1 - out^2).
//   dropout: out = inp * keep / (1 - p) (+ residual); keep from Philox at the element's
//            flat index; saves nothing. dinp = dout * keep / (1 - p).
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

template <typename Act>
static __global__ void gelu_forward_kernel(Act *out, const Act *inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_float(inp[i]);
    out[i] = from_float<Act>(0.5f * x * (1.0f + erff(x * 0.70710678118654752f)));
}

template <typename Act>
static __global__ void gelu_backward_kernel(Act *dinp, const Act *dout, const Act *inp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_float(inp[i]);
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = expf(-0.5f * x * x) * 0.39894228040143268f;
    dinp[i] = from_float<Act>(to_float(dout[i]) * (cdf + x * pdf));
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

template <typename Act>
static __global__ void dropout_residual_kernel(Act *out, const Act *inp, const Act *residual, int n, dropout_t d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = dropout_keep(d, (uint64_t)i) ? to_float(inp[i]) / (1.0f - d.p) : 0.0f;
    if (residual) v += to_float(residual[i]);
    out[i] = from_float<Act>(v);
}

template <typename Act>
static __global__ void dropout_backward_kernel(Act *dinp, const Act *dout, int n, dropout_t d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    dinp[i] = from_float<Act>(dropout_keep(d, (uint64_t)i) ? to_float(dout[i]) / (1.0f - d.p) : 0.0f);
}

#define POINTWISE(kernel, ...)                                                            \
    do {                                                                                  \
        if (n == 0) return;                                                               \
        LAUNCH(ceil_div(n, 256), 256, 0, device_stream(), kernel<Act>)(__VA_ARGS__);      \
        CHECK_LAUNCH(#kernel);                                                            \
    } while (0)

template <typename Act>
void pointwise_ops<Act>::gelu_forward(void *out, const void *inp, int n) {
    POINTWISE(gelu_forward_kernel, (Act *)out, (const Act *)inp, n);
}
template <typename Act>
void pointwise_ops<Act>::gelu_backward(void *dinp, const void *dout, const void *inp, int n) {
    POINTWISE(gelu_backward_kernel, (Act *)dinp, (const Act *)dout, (const Act *)inp, n);
}
template <typename Act>
void pointwise_ops<Act>::tanh_forward(void *out, const void *inp, int n) {
    POINTWISE(tanh_forward_kernel, (Act *)out, (const Act *)inp, n);
}
template <typename Act>
void pointwise_ops<Act>::tanh_backward(void *dinp, const void *dout, const void *out, int n) {
    POINTWISE(tanh_backward_kernel, (Act *)dinp, (const Act *)dout, (const Act *)out, n);
}
template <typename Act>
void pointwise_ops<Act>::dropout_residual_forward(void *out, const void *inp, const void *residual, int n,
                                                  dropout_t d) {
    POINTWISE(dropout_residual_kernel, (Act *)out, (const Act *)inp, (const Act *)residual, n, d);
}
template <typename Act>
void pointwise_ops<Act>::dropout_backward(void *dinp, const void *dout, int n, dropout_t d) {
    POINTWISE(dropout_backward_kernel, (Act *)dinp, (const Act *)dout, n, d);
}

INSTANTIATE_OPS(pointwise_ops)

}  // namespace CUDA_NS
