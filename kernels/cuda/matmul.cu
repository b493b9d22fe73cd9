// Linear layer through the GEMM of device.h (cuBLASLt: operands in the activation type,
// FP32 accumulation), row-major as the CPU reference:
//   out[N,OC] = inp[N,IC] @ weight[OC,IC]^T + bias[OC]            (bias as a GEMM epilogue)
// Backward: dinp[N,IC] = dout @ weight (+ dinp_add, the GEMM's C input with beta = 1)  (=);
//           dweight[OC,IC] += dout^T @ inp  (FP32 output, beta = 1: accumulates across
//           micro-batches); dbias[OC] += column sums of dout (fixed order).
// Row-major X[r,c] is the column-major matrix X^T, which is how the calls below read.
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

template <typename Act>
void matmul_ops<Act>::forward(void *out, const void *inp, const void *weight, const void *bias, int N, int IC,
                              int OC) {
    if (N == 0) return;
    // out^T[OC,N] = weight[OC,IC] (as (weight^T)^T) x inp^T[IC,N]
    device_gemm(true, false, OC, N, IC, 1.0f, weight, IC, 0, inp, IC, 0, 0.0f, out, OC, 0, 1, dtype_of<Act>::value,
                dtype_of<Act>::value, bias);
}

template <typename Act>
void matmul_ops<Act>::backward(void *dinp, void *dweight, void *dbias, const void *dout, const void *inp,
                               const void *weight, const void *dinp_add, int N, int IC, int OC) {
    if (N == 0) return;
    dtype_t act = dtype_of<Act>::value;
    // dinp^T[IC,N] = weight^T[IC,OC] x dout^T[OC,N] (+ dinp_add, read as the GEMM's C input)
    device_gemm(false, false, IC, N, OC, 1.0f, weight, IC, 0, dout, OC, 0, dinp_add ? 1.0f : 0.0f, dinp, IC, 0, 1,
                act, act, nullptr, dinp_add);
    // dweight^T[IC,OC] += inp^T[IC,N] x dout[N,OC]
    device_gemm(false, true, IC, OC, N, 1.0f, inp, IC, 0, dout, OC, 0, 1.0f, dweight, IC, 0, 1, act, DTYPE_F32,
                nullptr);
    if (dbias) column_sums_add((float *)dbias, (const Act *)dout, N, OC);
}

INSTANTIATE_OPS(matmul_ops)

}  // namespace CUDA_NS
