// FP32 master weights -> the compute copy in the activation type (round to nearest even).
// Saves nothing; no gradient.
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

template <typename T>
static __global__ void convert_kernel(T *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = from_float<T>(src[i]);
}

template <typename Act>
void convert_ops<Act>::params_to_compute(void *dst, const float *master, size_t n) {
    if (n == 0) return;
    LAUNCH(ceil_div(n, 256), 256, 0, device_stream(), convert_kernel<Act>)((Act *)dst, master, n);
    CHECK_LAUNCH("convert_kernel");
}

INSTANTIATE_OPS(convert_ops)

}  // namespace CUDA_NS
