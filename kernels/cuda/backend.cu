// The CUDA backend tables, one per activation precision: fp32 (debugging), fp16 (the
// default), bf16. Memory is device memory; the compute copy of the weights is a separate
// buffer in the activation type, refreshed from the FP32 master after every update.
// The emulated build defines the same tables under emu names (backend.h).
#include <algorithm>
#include "kernels/common/check.h"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/vec.cuh"

namespace CUDA_NS {

// The largest request each workspace slot gets for these shapes (see the op files).
template <typename Act>
static size_t workspace_bytes(int B, int T, int C, int NH, int I, int V, int R) {
    // Asked for the memory plan, before anything is allocated: a model these kernels cannot
    // run is refused here rather than at its first backward.
    if (C > layernorm_backward_max_width<Act>(C))
        fatal("model.hidden_size = %d: the CUDA backend's LayerNorm backward takes rows of at most %d elements "
              "in this precision%s", C, layernorm_backward_max_width<Act>(C),
              C % pack_size<Act>() ? " when hidden_size is not a multiple of 8 (FP16/BF16) or 4 (FP32)" : "");
    size_t N = (size_t)B * T, A = sizeof(Act), widest = (size_t)std::max(std::max(I, 3 * C), V);
    size_t gemm = 32u << 20;
    // at most 256 chunks of partial column sums; the position gradient sums [B, T*C]
    size_t reduce = std::max(256 * widest, ((size_t)B / 64 + 1) * T * C) * sizeof(float);
    size_t scatter = scatter_workspace_bytes((int)std::max(N, (size_t)R), C);
    // The fused attention needs its row sums; the GEMM path its copies of q, k,
    // v, two T x T buffers in Act and one in FP32, and the gradients.
    size_t attention = flash_attention_fits<Act>(T, C, NH)
                           ? flash_attention_workspace(B, T, NH)
                           : 3 * N * C * A + 2 * (size_t)B * NH * T * T * A + (size_t)B * NH * T * T * sizeof(float) +
                                 N * C * A + 3 * N * C * A;
    size_t bgrad = (size_t)I * A;  // the DGELU_BGRAD epilogue's bias gradient
    return gemm + reduce + scatter + attention + bgrad;
}

// The fused kernels record the forward's dropout decisions for sequences a cluster holds;
// the GEMM path draws again from the same counters.
template <typename Act>
static int attention_keep_row_words(int T, int C, int NH) {
    return flash_attention_fits<Act>(T, C, NH) ? flash_attention_keep_words(T) : 0;
}

template <typename Act>
static backend_t make_backend(const char *name) {
    backend_t be = {};
    be.name = name;
    be.act_size = sizeof(Act);
    be.acc_size = sizeof(float);
    be.alloc = device_alloc;
    be.release = device_free;
    be.upload = device_upload;
    be.download = device_download;
    be.zero = device_zero;
    be.params_to_compute = convert_ops<Act>::params_to_compute;
    be.embeddings_forward = embeddings_ops<Act>::forward;
    be.embeddings_backward = embeddings_ops<Act>::backward;
    be.layernorm_forward = layernorm_ops<Act>::forward;
    be.layernorm_backward = layernorm_ops<Act>::backward;
    be.matmul_forward = matmul_ops<Act>::forward;
    be.matmul_backward = matmul_ops<Act>::backward;
    be.attention_forward = attention_ops<Act>::forward;
    be.attention_backward = attention_ops<Act>::backward;
    be.gelu_forward = pointwise_ops<Act>::gelu_forward;
    be.gelu_backward = pointwise_ops<Act>::gelu_backward;
    be.tanh_forward = pointwise_ops<Act>::tanh_forward;
    be.tanh_backward = pointwise_ops<Act>::tanh_backward;
    be.dropout_residual_forward = pointwise_ops<Act>::dropout_residual_forward;
    be.dropout_backward = pointwise_ops<Act>::dropout_backward;
    be.gather_rows_forward = gather_ops<Act>::forward;
    be.gather_rows_backward = gather_ops<Act>::backward;
    be.crossentropy_forward = crossentropy_ops<Act>::forward;
    be.crossentropy_backward = crossentropy_ops<Act>::backward;
    be.device_name = device_name;
    be.memory_available = device_memory_available;
    be.workspace_bytes = workspace_bytes<Act>;
    be.attention_keep_row_words = attention_keep_row_words<Act>;
    be.lamb_step = lamb_step;
    be.lars_step = lars_step;
    be.adamw_step = adamw_step;
    be.stableadamw_step = stableadamw_step;
    be.residual_dropout_layernorm_forward = layernorm_ops<Act>::residual_dropout_forward;
    be.layernorm_dropout_backward = layernorm_ops<Act>::dropout_backward;
    be.bias_gelu_forward = pointwise_ops<Act>::bias_gelu_forward;
    be.bias_gelu_backward = pointwise_ops<Act>::bias_gelu_backward;
    be.matmul_bias_gelu_forward = matmul_ops<Act>::bias_gelu_forward;
    be.matmul_dgelu_backward = matmul_ops<Act>::dgelu_backward;
    be.rope_forward = pointwise_ops<Act>::rope_forward;
    be.rope_backward = pointwise_ops<Act>::rope_backward;
    be.geglu_forward = pointwise_ops<Act>::geglu_forward;
    be.geglu_backward = pointwise_ops<Act>::geglu_backward;
    be.select_device = device_select;
    be.comm = comm_ops();
    be.shutdown = device_release;
    return be;
}

}  // namespace CUDA_NS

#ifdef BERTPRE_CUDA_EMULATION
#define TABLE(precision) backend_cuda_emu_##precision
#define TABLE_NAME(precision) "cuda-emu-" #precision
#else
#define TABLE(precision) backend_cuda_##precision
#define TABLE_NAME(precision) "cuda-" #precision
#endif

extern "C" {
const backend_t TABLE(fp32) = CUDA_NS::make_backend<float>(TABLE_NAME(fp32));
const backend_t TABLE(fp16) = CUDA_NS::make_backend<CUDA_NS::f16>(TABLE_NAME(fp16));
const backend_t TABLE(bf16) = CUDA_NS::make_backend<CUDA_NS::bf16>(TABLE_NAME(bf16));
}
