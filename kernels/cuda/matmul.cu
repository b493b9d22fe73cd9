// Linear layer through the GEMM of device.h (cuBLASLt: operands in the activation type,
// FP32 accumulation), row-major as the CPU reference:
//   out[N,OC] = inp[N,IC] @ weight[OC,IC]^T + bias[OC]            (bias as a GEMM epilogue)
// Backward: dinp[N,IC] = dout @ weight (+ dinp_add, the GEMM's C input with beta = 1)  (=);
//           dweight[OC,IC] += dout^T @ inp  (FP32 output, beta = 1: accumulates across
//           micro-batches); dbias[OC] += column sums of dout (fixed order): a pass of its own
//           over dout, or with BERTPRE_BIAS_GRAD=epilogue the dweight GEMM's BGRADB epilogue,
//           which sums dout as the GEMM reads it (FP32, written to a scratch vector and then
//           added), where cuBLASLt has an algorithm for it (a variant to time on a GPU).
// The tanh GELU in the epilogues (backend.h's matmul_bias_gelu_forward and
// matmul_dgelu_backward): the forward GEMM writes pre = inp @ weight^T + bias as its aux
// output and gelu(pre) as out (GELU_AUX_BIAS); the backward's dinp GEMM multiplies by
// gelu'(pre) and writes the bias gradient of pre, the row sums of that product, in the
// activation type (DGELU_BGRAD), which is then added to the FP32 gradient. Where cuBLASLt
// cannot take the aux buffer (a leading dimension not a multiple of 8, a pointer not
// 16-byte aligned), or has no algorithm for the epilogue at this shape (device_gemm returns
// false, having written nothing), and always in FP32 (gelu_epilogue below), the same results
// come from a plain GEMM and the streaming GELU kernels.
// Row-major X[r,c] is the column-major matrix X^T, which is how the calls below read.
#include <stdint.h>
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

// cuBLASLt's conditions on a GELU epilogue's aux matrix: [ld, columns], ld % 8 == 0, 16-byte
// aligned.
static bool aux_fits(const void *aux, int ld) { return ld % 8 == 0 && (uintptr_t)aux % 16 == 0; }

// The GELU epilogues for 16-bit activations only. cuBLASLt computes their tanh with the SFU's
// tanh.approx.f32 (seen on an H100, docs/GPU-RESULTS.md 2026-11-28: gelu' bit-equal to that
// formula at 88% of a dense grid, within 4.8e-7 everywhere, 1.57e-5 from the exact value at
// x = 3.52), which PTX documents to 2^-11 relative: under the rounding of an FP16 or BF16
// output, but 10-100 times the FP32 streaming kernels' error, so FP32 takes those kernels.
template <typename Act>
static bool gelu_epilogue(const void *aux, int ld) {
    return sizeof(Act) == 2 && aux_fits(aux, ld);
}

template <typename Act>
void matmul_ops<Act>::forward(void *out, const void *inp, const void *weight, const void *bias, int N, int IC,
                              int OC) {
    if (N == 0) return;
    // out^T[OC,N] = weight[OC,IC] (as (weight^T)^T) x inp^T[IC,N]
    device_gemm(true, false, OC, N, IC, 1.0f, weight, IC, 0, inp, IC, 0, 0.0f, out, OC, 0, 1, dtype_of<Act>::value,
                dtype_of<Act>::value, bias);
}

// BERTPRE_BIAS_GRAD: sums (the default: the column sums' own pass) or epilogue (BGRADB); read once.
static bool bias_grad_epilogue() {
    static const bool epilogue = env_choice("BERTPRE_BIAS_GRAD", "sums", "epilogue") == 1;
    return epilogue;
}

// dweight and dbias of the backward (shared by both backwards).
template <typename Act>
static void weight_grads(void *dweight, void *dbias, const void *dout, const void *inp, int N, int IC, int OC) {
    // dweight^T[IC,OC] += inp^T[IC,N] x dout[N,OC]; with BGRADB the sums over N of
    // op(B) = dout[N,OC] too
    if (dbias && bias_grad_epilogue()) {
        float *sums = (float *)device_workspace(WS_WBGRAD, (size_t)OC * sizeof(float));
        if (device_gemm(false, true, IC, OC, N, 1.0f, inp, IC, 0, dout, OC, 0, 1.0f, dweight, IC, 0, 1,
                        dtype_of<Act>::value, DTYPE_F32, nullptr, nullptr, GEMM_BGRADB, nullptr, 0, sums)) {
            column_sums_add((float *)dbias, sums, 1, OC);
            return;
        }
    }
    device_gemm(false, true, IC, OC, N, 1.0f, inp, IC, 0, dout, OC, 0, 1.0f, dweight, IC, 0, 1, dtype_of<Act>::value,
                DTYPE_F32, nullptr);
    if (dbias) column_sums_add((float *)dbias, (const Act *)dout, N, OC);
}

template <typename Act>
void matmul_ops<Act>::backward(void *dinp, void *dweight, void *dbias, const void *dout, const void *inp,
                               const void *weight, const void *dinp_add, int N, int IC, int OC) {
    if (N == 0) return;
    dtype_t act = dtype_of<Act>::value;
    // dinp^T[IC,N] = weight^T[IC,OC] x dout^T[OC,N] (+ dinp_add, read as the GEMM's C input)
    device_gemm(false, false, IC, N, OC, 1.0f, weight, IC, 0, dout, OC, 0, dinp_add ? 1.0f : 0.0f, dinp, IC, 0, 1,
                act, act, nullptr, dinp_add);
    weight_grads<Act>(dweight, dbias, dout, inp, N, IC, OC);
}

template <typename Act>
void matmul_ops<Act>::bias_gelu_forward(void *out, void *pre, const void *inp, const void *weight, const void *bias,
                                        int N, int IC, int OC) {
    if (N == 0) return;
    dtype_t act = dtype_of<Act>::value;
    if (gelu_epilogue<Act>(pre, OC) && device_gemm(true, false, OC, N, IC, 1.0f, weight, IC, 0, inp, IC, 0, 0.0f, out, OC, 0, 1,
                                         act, act, bias, nullptr, GEMM_GELU_AUX_BIAS, pre, OC))
        return;
    forward(pre, inp, weight, bias, N, IC, OC);
    pointwise_ops<Act>::gelu_forward(out, pre, N * OC, GELU_TANH);
}

template <typename Act>
void matmul_ops<Act>::dgelu_backward(void *dinp, void *dweight, void *dbias, void *dpre_bias, const void *dout,
                                     const void *inp, const void *weight, const void *pre, int N, int IC, int OC) {
    if (N == 0) return;
    dtype_t act = dtype_of<Act>::value;
    void *bgrad = gelu_epilogue<Act>(pre, IC) ? device_workspace(WS_BGRAD, (size_t)IC * sizeof(Act)) : nullptr;
    if (bgrad && device_gemm(false, false, IC, N, OC, 1.0f, weight, IC, 0, dout, OC, 0, 0.0f, dinp, IC, 0, 1, act, act,
                             nullptr, nullptr, GEMM_DGELU_BGRAD, const_cast<void *>(pre), IC, bgrad)) {
        column_sums_add((float *)dpre_bias, (const Act *)bgrad, 1, IC);
    } else {
        device_gemm(false, false, IC, N, OC, 1.0f, weight, IC, 0, dout, OC, 0, 0.0f, dinp, IC, 0, 1, act, act,
                    nullptr);
        pointwise_ops<Act>::bias_gelu_backward(dinp, dpre_bias, dinp, pre, nullptr, N, IC, GELU_TANH);
    }
    weight_grads<Act>(dweight, dbias, dout, inp, N, IC, OC);
}

INSTANTIATE_OPS(matmul_ops)

}  // namespace CUDA_NS
