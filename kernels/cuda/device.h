// The host side of the CUDA backend: memory, the stream, workspaces and GEMMs. Two
// implementations: device_gpu.cu (CUDA runtime + cuBLASLt) and emu/device_emu.cpp (host
// memory, GEMMs in FP32 on the CPU), so the op files above them are the same in both builds.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "kernels/cuda/gemm_plans.h"

namespace CUDA_NS {

// dtype_t and gemm_gelu are in gemm_plans.h.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
    static const dtype_t value = DTYPE_F32;
};
template <>
struct dtype_of<__half> {
    static const dtype_t value = DTYPE_F16;
};
template <>
struct dtype_of<__nv_bfloat16> {
    static const dtype_t value = DTYPE_BF16;
};

cudaStream_t device_stream();
// Data parallelism: the rank's device (backend_t.select_device: before any other call, by
// what the rank sees; returns its PCI bus id), a second stream for the collectives, and
// ordering between the two streams (events).
const char *device_select(int rank, int local_rank, int local_size);
// The rule of device_select for both implementations: the visible device that local rank
// `local_rank` of `local_size` takes among the `devices` it sees: the only one, or device
// local_rank when there are enough. Otherwise exits naming the rank, both counts and
// `variable`, the environment variable that decides which devices are visible.
inline int device_choose(int rank, int local_rank, int local_size, int devices, const char *variable) {
    if (devices == 1) return 0;                    // per-task binding: the rank's own GPU
    if (devices >= local_size) return local_rank;  // node-wide visibility
    const char *visible = getenv(variable);
    fatal("rank %d is local rank %d of %d ranks on its node, but %d GPU%s visible to it (%s=%s): "
          "let every rank see all of the node's GPUs (local rank k takes GPU k) or exactly one (per-task binding, "
          "e.g. SLURM's --gpus-per-task=1), or start at most %d ranks per node",
          rank, local_rank, local_size, devices, devices == 1 ? " is" : "s are", variable,
          visible ? visible : "(unset)", devices);
}
cudaStream_t device_comm_stream();
void device_stream_wait(cudaStream_t waiter, cudaStream_t signaller);  // waiter runs after what signaller has queued
int device_stream_done(cudaStream_t stream);                          // 1 when its queued work finished
// Marks what `stream` has queued so far as slot `slot` (0 to 63); device_mark_done: 1 when the
// work up to the slot's last mark finished (a slot never marked: 1).
void device_stream_mark(cudaStream_t stream, int slot);
int device_mark_done(int slot);
void *device_alloc(size_t bytes);  // zero-filled; a clear error when memory runs out
void device_free(void *ptr);
void device_upload(void *dst, const void *host_src, size_t bytes);
void device_download(void *host_dst, const void *src, size_t bytes);
// In stream order without waiting: host_src is copied into pinned staging first, so the
// caller may reuse it at once.
void device_upload_async(void *dst, const void *host_src, size_t bytes);
void device_zero(void *ptr, size_t bytes);
void device_synchronize();
const char *device_name();
int device_cluster_launch();  // 1 when the device launches thread-block clusters (sm_90 on; the emulation)
size_t device_memory_available();
void device_check_launch(const char *what, const char *file, int line);

// Scratch memory that lives until the next call with the same slot; grows on demand and is
// never shrunk, so steady-state steps allocate nothing.
enum workspace_slot {
    WS_REDUCE,     // partial column sums
    WS_SCATTER,    // row orders uploaded for scatter_rows
    WS_LAMB,       // the optimizers' chunk layout and partial norms (optim.cuh)
    WS_ATTN_QKV,   // q, k, v as [B,NH,T,HS]
    WS_ATTN_P,     // attention probabilities after dropout
    WS_ATTN_DP,    // the gradient of the scores
    WS_ATTN_F32,   // scores (forward) and the gradient of P' (backward), FP32
    WS_ATTN_DCTX,  // gradient of the context as [B,NH,T,HS]
    WS_ATTN_DQKV,  // gradients of q, k, v as [B,NH,T,HS]
    WS_BGRAD,      // the bias gradient of a GEMM's DGELU_BGRAD epilogue, before it is added
    WS_WBGRAD,     // the bias gradient of a weight-gradient GEMM's BGRADB epilogue (FP32), before it is added
    WS_COUNT
};
void *device_workspace(workspace_slot slot, size_t bytes);
void *device_workspace_current(workspace_slot slot);  // the slot's buffer now; nullptr after release

// The end of the backend's use of the device (backend_t.shutdown, in workspace.cu): waits for
// the device's queued work (device_drain), frees the workspaces (workspaces_release), then
// whatever the implementation keeps for the process (device_shutdown); returns the
// allocations still live and their bytes. Both implementations count their allocations in
// one ledger (ledger.h).
size_t device_release(size_t *live_bytes);
void device_drain();
void workspaces_release();  // after the stream has drained
size_t device_shutdown(size_t *live_bytes);

// Column-major, as BLAS: C[m,n] = alpha * op(A)[m,k] op(B)[k,n] + beta * C, for `batch`
// matrices at the given element strides. A and B in ab_type, C in c_type, FP32 accumulation.
// With bias (length m, may be NULL; only when c_type == ab_type) each column of C gets bias added
// (beta must be 0). With C_in (same layout as C) the beta term reads C_in instead of C:
// C = alpha op(A) op(B) + beta C_in, a sum into a new buffer without a copy first.
//
// The GELU epilogues (cuBLASLt's, in the tanh form gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi)
// (x + 0.044715 x^3))); batch 1, beta 0, c_type == ab_type; aux is [m,n] in c_type with
// leading dimension ld_aux, a multiple of 8 and at least m, its pointer 16-byte aligned):
//   GEMM_GELU_AUX_BIAS: with P = alpha op(A) op(B) + bias (FP32), aux = P and C = gelu(P),
//     each rounded to c_type once (bias required).
//   GEMM_DGELU_BGRAD:   with G = alpha op(A) op(B) (FP32), C = G gelu'(aux) and bgrad[m]
//     (c_type, written) = the row sums of that product over the n columns; bias unused.
// Every call is checked against the rules of gemm_plans.h (gemm_check) first, in both builds;
// a call that breaks one is a bug and exits naming it. Returns true when the GEMM ran. False
// only for a GELU epilogue for which cuBLASLt has no algorithm at this shape: nothing was
// written, and the caller computes the same with a plain GEMM and the streaming GELU kernels
// (matmul.cu). Any other GEMM without an algorithm exits with a clear error.
bool device_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void *A, int lda,
                 long long stride_a, const void *B, int ldb, long long stride_b, float beta, void *C, int ldc,
                 long long stride_c, int batch, dtype_t ab_type, dtype_t c_type, const void *bias,
                 const void *C_in = nullptr, gemm_gelu gelu = GEMM_NO_GELU, void *aux = nullptr, int ld_aux = 0,
                 void *bgrad = nullptr);
// The plan cache's counts (gemm_plans.h); reset: start them again from zero.
gemm_plan_stats device_gemm_plan_stats(bool reset);

}  // namespace CUDA_NS
