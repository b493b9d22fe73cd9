// Row gather: out[n,:] = inp[index[n],:]   [N,C] from [M,C]. Saves nothing.
// Backward (=): dinp[M,C] = 0, then dinp[index[n],:] = sum of the dout rows with that index,
// in increasing n (scatter_rows, planned from the host's copy of the index: backend.h).
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

template <typename Act>
static __global__ void gather_rows_kernel(Act *out, const Act *inp, const int *index, int N, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    int n = (int)(i / C), c = (int)(i % C);
    out[i] = inp[(size_t)index[n] * C + c];
}

template <typename Act>
void gather_ops<Act>::forward(void *out, const void *inp, const int *index, int N, int C) {
    size_t total = (size_t)N * C;
    if (total == 0) return;
    LAUNCH(ceil_div(total, 256), 256, 0, device_stream(), gather_rows_kernel<Act>)((Act *)out, (const Act *)inp,
                                                                                   index, N, C);
    CHECK_LAUNCH("gather_rows_kernel");
}

template <typename Act>
void gather_ops<Act>::backward(void *dinp, const void *dout, const int *index, int N, int M, int C) {
    device_zero(dinp, (size_t)M * C * sizeof(Act));
    if (N == 0) return;
    scatter_rows((Act *)dinp, (const Act *)dout, index, N, C, -1, false);
}

INSTANTIATE_OPS(gather_ops)

}  // namespace CUDA_NS
