// The backend table: every op the model uses, with one C signature, implemented by the FP32
// CPU reference (kernels/cpu/) and by CUDA (kernels/cuda/). The model code in engine/ calls
// only through this table, so it is written once for every backend.
//
// Buffers are opaque device pointers. Each backend states two element types:
//   act  — activations and the compute copy of the weights (FP32 on cpu, FP16 on cuda)
//   acc  — gradients of the weights, LayerNorm statistics and per-row losses (FP32;
//          FP64 in the test-only "cpu64" backend used for finite differences)
// Index buffers (token ids, masks, gather indices, targets) are int32 everywhere.
//
// Gradient rules, as in every op file: parameter gradients are accumulated (+=), activation
// gradients are written (=).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "kernels/common/philox.h"

#ifdef __cplusplus
extern "C" {
#endif

// 32-bit words of attention dropout decisions per query row in attention_forward's `keep`:
// two per 64 keys.
static BERTPRE_HD inline int attention_keep_words(int T) { return (T + 63) / 64 * 2; }

// The optimizers over the flat buffers: each tensor is a range of them (engine/optim.h has the rules).
typedef struct {
    size_t offset, numel;
    int weight_decay;
} optim_tensor;
typedef struct {
    double lr, beta1, beta2, eps, weight_decay, max_grad_norm;
    double grad_scale;  // gradients are divided by it first (the loss scale)
    long step;          // 1 for the first update (bias correction)
    // Sharded optimizer state (engine/zero.h): the tensors are this rank's pieces of the
    // flat buffer (a tensor may straddle ranks, a piece may be empty), and the partial sums
    // that the norms need (squares of the gradients; per tensor, squares of w and of the
    // update) are summed over the ranks in place, in device memory, before they are used.
    // NULL: the tensors are whole.
    void (*sum_over_ranks)(float *values, int n);
    // > 0: decoupled weight decay (AdamW, StableAdamW): decayed tensors are multiplied by
    // 1 - (lr / decay_lr_ref) weight_decay, the decay independent of the rate's size
    // (Composer's DecoupledAdamW, torch-optimi's decouple_lr; decay_lr_ref the peak rate);
    // 0: by 1 - lr weight_decay, as torch.optim.AdamW.
    double decay_lr_ref;
} adam_hyper;
// LARS and AdamW take the same tensor list (engine/optim.h has their rules); AdamW takes
// adam_hyper (LAMB's: both keep Adam's two moments), LARS these.
typedef struct {
    double lr, momentum, trust_coefficient, eps, weight_decay, max_grad_norm;
    double grad_scale;  // gradients are divided by it first (the loss scale)
    void (*sum_over_ranks)(float *values, int n);  // as in adam_hyper
} lars_hyper;

// Collectives on the device for data-parallel ranks (kernels/cuda/comm.cu: NCCL on a GPU,
// the same code over the NCCL emulation in the emulated build). NULL where the backend has
// none (the CPU backends, a CUDA build without NCCL): those ranks sum through host MPI.
// A collective runs on a communication stream after the work already queued on the compute
// stream, so it overlaps whatever is queued next; `join` makes the compute stream wait.
enum { COMM_ID_BYTES = 128 };  // ncclUniqueId
// The type a gradient sum travels and is summed in: FP32, or the FP32 values rounded to
// BF16 or FP16 first (half the bytes), the sum cast back to FP32 in place.
typedef enum { COMM_FP32, COMM_BF16, COMM_FP16 } comm_dtype;

// Which GELU the gelu ops compute (model.hidden_act, engine/model.h gelu_kind_of):
//   GELU_ERF:  0.5 x (1 + erf(x / sqrt 2)), the exact one ("gelu")
//   GELU_TANH: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ("gelu_new", "gelu_pytorch_tanh";
//              "gelu_fast" writes it as tanh(0.7978845608 x (1 + 0.044715 x^2)), the same function
//              with sqrt(2/pi) rounded to 10 digits: 4e-12 relative, far below FP32's 6e-8)
typedef enum { GELU_ERF, GELU_TANH } gelu_kind;

typedef struct backend_comm {
    void (*unique_id)(void *id);  // on rank 0; the caller broadcasts it
    void (*init)(const void *id, int rank, int world);
    void (*destroy)(void);
    void (*abort)(void);  // ncclCommAbort: never waits
    // In-place sum over the ranks of buf[n] (FP32). In BF16 or FP16 the values are rounded on
    // the compute stream when queued (FP16 after a scale by 1 / ranks, so that the sum of
    // values below FP16's largest cannot exceed it; an overflow is an inf in every rank's
    // result), summed in that type, and written back to buf (times ranks) by join.
    void (*all_reduce)(float *buf, size_t n, comm_dtype type);
    // buf[ranks x shard]: rank r gets the sum of its shard in place (the type as all_reduce's).
    void (*reduce_scatter)(float *buf, size_t shard, comm_dtype type);
    void (*all_gather)(void *buf, size_t shard_bytes); // in place: rank r contributes buf + r x shard_bytes
    // 1 when the collectives queued so far have finished, 0 while in flight, -1 on an
    // asynchronous error (the message is written to err).
    int (*done)(char *err, size_t len);
    // The compute stream continues after the collectives queued so far; BF16 and FP16 sums
    // are cast back into their FP32 buffers.
    void (*join)(void);
    // One bucket of reduce_scatter, for ZeRO-1's sums during the backward: the sum over the
    // ranks of buf[offset, offset + n), each piece to the rank whose slot of `shard` elements
    // holds it (slot r: [r x shard, (r + 1) x shard)), in place there (a reduce to each owner,
    // grouped; the type as all_reduce's, join casting back the rank's own piece).
    void (*reduce_owned)(float *buf, size_t offset, size_t n, size_t shard, comm_dtype type);
    // One bucket of all_gather: the bytes buf[offset, offset + n) from the ranks whose slots of
    // shard_bytes hold them to every rank (a broadcast from each owner, grouped); then marks the
    // communication stream with `slot` (0 to 63) for mark_done.
    void (*broadcast_owned)(void *buf, size_t offset, size_t n, size_t shard_bytes, int slot);
    // As done, for the collectives queued up to the last mark of `slot`.
    int (*mark_done)(int slot, char *err, size_t len);
} backend_comm;

// The ops of the table, each named once here: the profiler's wrappers (kernels/cuda/profile.cu),
// the roofline model's recorder and cost table (engine/roofline/) expand from this list, and
// the check after backend_t holds it to the struct (every slot an op here or one of the eight
// that are not ops), so a new op is added to both or the build stops.
#define BACKEND_OPS(X)                                                                                      \
    X(upload) X(download) X(zero) X(params_to_compute) X(embeddings_forward) X(embeddings_backward)           \
    X(layernorm_forward) X(layernorm_backward) X(matmul_forward) X(matmul_backward) X(attention_forward)      \
    X(attention_backward) X(gelu_forward) X(gelu_backward) X(tanh_forward) X(tanh_backward)                   \
    X(dropout_residual_forward) X(dropout_backward) X(gather_rows_forward) X(gather_rows_backward)            \
    X(crossentropy_forward) X(crossentropy_backward) X(lamb_step) X(lars_step) X(adamw_step)                  \
    X(residual_dropout_layernorm_forward) X(layernorm_dropout_backward) X(bias_gelu_forward)                  \
    X(bias_gelu_backward) X(matmul_bias_gelu_forward) X(matmul_dgelu_backward) X(rope_forward)                \
    X(rope_backward) X(geglu_forward) X(geglu_backward) X(stableadamw_step)
#define BACKEND_OP_COUNT_ONE(name) +1
enum { BACKEND_OP_COUNT = 0 BACKEND_OPS(BACKEND_OP_COUNT_ONE) };
// The members of backend_t after `acc_size` that are not ops: memory, the device's facts, the
// device choice, the collectives and the shutdown.
enum { BACKEND_NOT_OPS = 9 };

typedef struct backend {
    const char *name;
    size_t act_size;  // bytes of one activation element
    size_t acc_size;  // bytes of one accumulator element

    // memory
    void *(*alloc)(size_t bytes);  // zero-filled; exits with a clear message when it cannot
    void (*release)(void *ptr);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    void (*zero)(void *ptr, size_t bytes);
    // Refresh the compute copy of the weights from the FP32 master (both backend memory).
    // NULL when the compute copy is the master itself.
    void (*params_to_compute)(void *dst, const float *master, size_t n);

    // out[N,C]: row n = wte[ids[n]] + wpe[position] + wtt[segments[n]] (wpe and wtt may both
    // be NULL: a model without position and segment tables, such as ModernBERT), position =
    // positions[n] (positions may be NULL: n % T, the padded layout [N/T, T]). positions
    // lists the real tokens' positions in the unpadded layout (each below T). P: the rows of
    // wpe (max_position_embeddings); a length T > P stops the process naming both, instead of
    // reading the parameters stored after the table (the CPU reference checks each position too).
    void (*embeddings_forward)(void *out, const int *input_ids, const int *segment_ids, const int *positions,
                               const void *wte, const void *wpe, const void *wtt, int N, int T, int P, int C);
    // dwte/dwpe/dwtt += scatter of dout (dwpe and dwtt NULL where the forward's tables were);
    // rows whose id equals pad_id get no gradient in dwte.
    // input_ids, segment_ids and positions are host memory here (the ids the host already holds).
    void (*embeddings_backward)(void *dwte, void *dwpe, void *dwtt, const void *dout, const int *input_ids,
                                const int *segment_ids, const int *positions, int pad_id, int N, int T, int P,
                                int C);
    // out[N,C] = (inp - mean) * rstd * weight + bias; saves mean[N], rstd[N] (acc). bias may be
    // NULL (a LayerNorm without bias), and then the backward's dbias is NULL too.
    void (*layernorm_forward)(void *out, void *mean, void *rstd, const void *inp, const void *weight,
                              const void *bias, int N, int C, float eps);
    // dinp = the input's gradient + dinp_add (=; dinp_add may be NULL or equal dinp, and dinp may
    // alias dout): a residual's other gradient summed in the same pass.
    void (*layernorm_backward)(void *dinp, void *dweight, void *dbias, const void *dout, const void *inp,
                               const void *weight, const void *mean, const void *rstd, const void *dinp_add, int N,
                               int C);
    // out[N,OC] = inp[N,IC] @ weight[OC,IC]^T + bias[OC]   (bias may be NULL)
    void (*matmul_forward)(void *out, const void *inp, const void *weight, const void *bias, int N, int IC,
                           int OC);
    // dinp = dout @ weight (+ dinp_add, which may be NULL or equal dinp); dweight += dout^T @ inp;
    // dbias += column sums of dout (dbias may be NULL)
    void (*matmul_backward)(void *dinp, void *dweight, void *dbias, const void *dout, const void *inp,
                            const void *weight, const void *dinp_add, int N, int IC, int OC);
    // Multi-head self-attention core over B sequences of at most T tokens. seq_offsets[B+1]
    // (int32, backend memory) are the sequences' offsets: sequence b has L_b =
    // seq_offsets[b+1] - seq_offsets[b] real tokens, which come first, seq_offsets[0] = 0.
    // packed = 0: token i of sequence b is row b*T + i of qkv[B*T,3C] (q | k | v per token)
    // and out[B*T,C], and every row is a query over the real keys. packed = 1: it is row
    // seq_offsets[b] + i of qkv[N,3C] and out[N,C], N = seq_offsets[B], and only real tokens
    // exist. Saves lse[B,NH,T] (acc, indexed by the position in the sequence): the
    // log-sum-exp of each query row's scaled scores over its real keys (+inf for a row
    // without any), from which the backward recomputes the probabilities. The backward takes
    // the forward's out too (rowsum(P' dP') = dout . out per row). keep[B,NH,T,
    // attention_keep_words(T)] is the backend's own record of the forward's dropout
    // decisions for its backward (one bit per key; what a backend writes there only it
    // reads): the CUDA backend's fused kernels keep the mask there so that the backward draws
    // nothing; the CPU backends draw again and leave it alone (NULL is fine there). Dropout
    // element ((b*NH + h)*T + i)*T + j in both layouts. window > 0: a sliding window, query i
    // attends only to the keys j with |i - j| <= window (ModernBERT's local layers, window =
    // local_attention / 2), as if the others were padding; 0: every real key.
    // doc_bounds (int32, backend memory) NULL: a sequence is one document. Otherwise [rows, 2],
    // one pair per token row of the layout (B*T padded, N packed): row r, position i of its
    // sequence, sees only the keys j with doc_bounds[2r] <= j < doc_bounds[2r+1], its
    // document's positions (packed rows whose attention stays inside each document). The
    // documents of a sequence are consecutive runs that cover it: a key's pair is the pair of
    // every query of its document (the relation is symmetric, which the backward relies on);
    // a padded sequence's padding rows are one more run, [L_b, T), which sees no real key.
    // The window, when there is one, applies within.
    void (*attention_forward)(void *out, void *lse, uint32_t *keep, const void *qkv, const int *seq_offsets,
                              const int *doc_bounds, int packed, int B, int T, int C, int NH, int window,
                              dropout_t dropout);
    void (*attention_backward)(void *dqkv, const void *dout, const void *qkv, const void *out, const void *lse,
                               const uint32_t *keep, const int *seq_offsets, const int *doc_bounds, int packed, int B,
                               int T, int C, int NH, int window, dropout_t dropout);
    // GELU of the given kind (gelu_kind above)
    void (*gelu_forward)(void *out, const void *inp, int n, gelu_kind act);
    void (*gelu_backward)(void *dinp, const void *dout, const void *inp, int n, gelu_kind act);
    void (*tanh_forward)(void *out, const void *inp, int n);
    void (*tanh_backward)(void *dinp, const void *dout, const void *out, int n);
    // out = dropout(inp) + residual (residual may be NULL)
    void (*dropout_residual_forward)(void *out, const void *inp, const void *residual, int n,
                                     dropout_t dropout);
    void (*dropout_backward)(void *dinp, const void *dout, int n, dropout_t dropout);
    // out[N,C] = inp[index[n],:]; backward: dinp[M,C] = 0, then dinp[index[n],:] += dout[n,:]
    // (the backward's index is host memory, the forward's backend memory)
    void (*gather_rows_forward)(void *out, const void *inp, const int *index, int N, int C);
    void (*gather_rows_backward)(void *dinp, const void *dout, const int *index, int N, int M, int C);
    // logits[N,Vp]: rows of Vp >= V columns, of which the first V are classes and the rest
    // padding (the padded vocabulary), never part of a loss or an argmax.
    // losses[N] (acc) = logsumexp(logits[n,:V]) - (1 - s) logits[n,target[n]] - s mean(logits[n,:V]),
    // 0 where target < 0 (ignored); s = smoothing (label smoothing, PyTorch's definition).
    // correct[N] (int, may be NULL) = 1 where argmax over the V classes == target.
    void (*crossentropy_forward)(void *losses, int *correct, const void *logits, const int *targets, int N, int V,
                                 int Vp, float smoothing);
    // dlogits = (softmax(logits[:, :V]) - (1 - s) onehot(target) - s / V) * dloss, zero rows where
    // target < 0, zero padding columns. dlogits may alias logits (computed row by row in place).
    void (*crossentropy_backward)(void *dlogits, const void *logits, const int *targets, int N, int V, int Vp,
                                  float dloss, float smoothing);

    // The device's name (for the log's % of peak) and its free memory in bytes; NULL on the
    // CPU backends.
    const char *(*device_name)(void);
    size_t (*memory_available)(void);
    // Bytes of scratch memory the ops need for these model shapes (R = gathered rows; I the
    // widest FFN GEMM output: ModernBERT's GeGLU input, 2 x intermediate), or NULL when the
    // backend needs none beyond the model's buffers.
    size_t (*workspace_bytes)(int B, int T, int C, int NH, int I, int V, int R);
    // The 32-bit words per query row that attention_forward records in keep when its dropout
    // is on (keep[B,NH,T,this], at most attention_keep_words(T)), or NULL / 0 when it records
    // none and keep may be NULL: the size of the model's keep buffers.
    int (*attention_keep_row_words)(int T, int C, int NH);
    // One LAMB update of params (FP32 master) and the moments m, v (FP32) from grads (acc).
    // When the global norm of grads / grad_scale is not finite (an FP16 overflow), nothing is
    // changed. Returns that norm, before clipping. Norms are summed in a fixed order.
    double (*lamb_step)(float *params, float *m, float *v, const void *grads, const optim_tensor *tensors,
                        int n_tensors, adam_hyper h);
    // The same contract for LARS (one FP32 momentum buffer) and AdamW (moments m, v).
    double (*lars_step)(float *params, float *momentum, const void *grads, const optim_tensor *tensors,
                        int n_tensors, lars_hyper h);
    double (*adamw_step)(float *params, float *m, float *v, const void *grads, const optim_tensor *tensors,
                         int n_tensors, adam_hyper h);
    // StableAdamW (Wortsman et al. 2023, as torch-optimi's StableAdamW computes it; ModernBERT's
    // optimizer): the moments kept bias-corrected (m = lerp(m, g, 1 - b1^), b1^ = b1 (1 - b1^(t-1))
    // / (1 - b1^t), likewise v with g^2), each tensor's rate lr_T = lr / max(1, RMS_T), RMS_T =
    // sqrt(mean(g^2 / max(v, eps^2))) over the tensor, then w *= 1 - lr_T wd (decay_lr_ref: as
    // adam_hyper says) and w -= lr_T m / (sqrt(v) + eps). The same global clipping first.
    double (*stableadamw_step)(float *params, float *m, float *v, const void *grads, const optim_tensor *tensors,
                               int n_tensors, adam_hyper h);

    // ---- fused ops: one pass where the unfused ops above would take two or three ----
    // res = dropout(inp) + residual (residual may be NULL; the element index is the flat one in
    // [N,C], as dropout_residual_forward), saved; out = LayerNorm(res), mean/rstd saved.
    void (*residual_dropout_layernorm_forward)(void *out, void *res, void *mean, void *rstd, const void *inp,
                                               const void *residual, const void *weight, const void *bias, int N,
                                               int C, float eps, dropout_t dropout);
    // dres = layernorm_backward's dinp (=), dweight/dbias += as there, and dinp =
    // dropout_backward(dres) (=), the forward's draws. Either dres or dinp may alias dout.
    void (*layernorm_dropout_backward)(void *dres, void *dinp, void *dweight, void *dbias, const void *dout,
                                       const void *res, const void *weight, const void *mean, const void *rstd, int N,
                                       int C, dropout_t dropout);
    // out[N,C] = gelu(inp + bias[c]) (bias may be NULL); saves inp (without the bias).
    void (*bias_gelu_forward)(void *out, const void *inp, const void *bias, int N, int C, gelu_kind act);
    // dinp = dout * gelu'(inp + bias) (=, may alias dout); dbias (acc, may be NULL) += column
    // sums of dinp.
    void (*bias_gelu_backward)(void *dinp, void *dbias, const void *dout, const void *inp, const void *bias, int N,
                               int C, gelu_kind act);
    // The FFN's GEMMs with the tanh GELU (GELU_TANH) in their epilogues, as cuBLASLt's
    // GELU_AUX_BIAS and DGELU_BGRAD; NULL where the backend has none (the model then takes
    // matmul_forward + bias_gelu_forward and their backwards). Forward: pre[N,OC] = inp @
    // weight^T + bias (saved: the GELU's input, bias included) and out = gelu(pre).
    void (*matmul_bias_gelu_forward)(void *out, void *pre, const void *inp, const void *weight, const void *bias,
                                     int N, int IC, int OC);
    // The backward of the GEMM that reads that out (inp = out, as matmul_backward without
    // dinp_add) through the GELU: dinp[N,IC] = (dout @ weight) * gelu'(pre) (=), dweight +=
    // dout^T @ inp, dbias += column sums of dout (may be NULL), and dpre_bias (acc) += column
    // sums of dinp: the gradient of the bias in pre.
    void (*matmul_dgelu_backward)(void *dinp, void *dweight, void *dbias, void *dpre_bias, const void *dout,
                                  const void *inp, const void *weight, const void *pre, int N, int IC, int OC);

    // ---- ModernBERT's ops (NULL where a backend has none yet) ----
    // Rotary position embedding, in place on the queries and keys of qkv[N,3C] (columns [0,2C);
    // the values are left alone), as transformers' apply_rotary_pos_emb: in each head's HS =
    // C / NH columns, pair (d, d + HS/2), d < HS/2, rotates by the angle t * f_d, t the token's
    // position (positions[n], or n % T when positions is NULL: the padded layout) and f_d =
    // 1 / theta^(2d / HS), computed in FP32 as transformers does (the angle t * f_d rounded to
    // FP32 before its cosine and sine):
    //   x'_d = x_d cos - x_{d+HS/2} sin,   x'_{d+HS/2} = x_{d+HS/2} cos + x_d sin.
    // The backward rotates the gradient of qkv (in place) by the opposite angle: the rotation's
    // transpose, the gradient of the input of the forward.
    void (*rope_forward)(void *qkv, const int *positions, int N, int T, int C, int NH, float theta);
    void (*rope_backward)(void *dqkv, const int *positions, int N, int T, int C, int NH, float theta);
    // GeGLU: out[N,I] = act(inp[:, :I]) * inp[:, I:2I] for inp[N,2I] (transformers'
    // ModernBertMLP: Wi's output chunked into input and gate). The backward writes dinp[N,2I]
    // (=): dout * gate * act'(input) in the first half, dout * act(input) in the second.
    void (*geglu_forward)(void *out, const void *inp, int N, int I, gelu_kind act);
    void (*geglu_backward)(void *dinp, const void *dout, const void *inp, int N, int I, gelu_kind act);

    // This rank's device, before any other device call, by what the rank sees: one visible
    // device is the rank's own (per-task binding); as many as the node's ranks or more, local
    // rank k takes device k; otherwise it exits with a message naming the rank and the counts.
    // Returns the chosen device's PCI bus id (static storage), which tells the physical GPU
    // apart whatever each rank sees. NULL on the CPU backends.
    const char *(*select_device)(int rank, int local_rank, int local_size);
    const backend_comm *comm;  // NULL: ranks sum through host MPI
    // The end of the process's use of the device, after the caller released its buffers:
    // frees what the backend keeps for the process (workspaces; on a GPU also the cuBLASLt
    // handle and plans, streams, events, pinned staging). Returns how many allocations of
    // `alloc` are still live (0 when the caller released everything) and their bytes in
    // *live_bytes. A later call starts the device afresh. NULL on the CPU backends.
    size_t (*shutdown)(size_t *live_bytes);
} backend_t;
#ifdef __cplusplus
static_assert(
#else
_Static_assert(
#endif
    sizeof(backend_t) == offsetof(backend_t, alloc) + (BACKEND_OP_COUNT + BACKEND_NOT_OPS) * sizeof(void (*)(void)),
    "a member of backend_t is neither in BACKEND_OPS nor one of the BACKEND_NOT_OPS");

extern const backend_t backend_cpu;    // FP32 reference
extern const backend_t backend_cpu64;  // FP64, tests only (finite differences)
// CUDA (kernels/cuda/), one table per activation precision; FP32 accumulators in all three.
extern const backend_t backend_cuda_fp32, backend_cuda_fp16, backend_cuda_bf16;
// Number of CUDA GPUs visible (0 when none, or when the driver is missing); CUDA builds only.
int cuda_device_count(void);
// The same kernel sources on the host through the CUDA emulation (tests only).
extern const backend_t backend_cuda_emu_fp32, backend_cuda_emu_fp16, backend_cuda_emu_bf16;
// The same table with every op timed (kernels/cuda/profile.cu): for BERTPRE_PROFILE, whose
// value (a file, or "1" / "-" for stderr) is `destination`. One per process.
const backend_t *cuda_profile_wrap(const backend_t *be, const char *destination);
const backend_t *cuda_emu_profile_wrap(const backend_t *be, const char *destination);

// The end of a command's use of its backend, after every buffer of the command was released:
// the backend's shutdown, and a warning naming the count and bytes of device allocations
// still live, which would be a leak.
static inline void backend_release(const backend_t *be) {
    if (!be || !be->shutdown) return;
    size_t bytes = 0, live = be->shutdown(&bytes);
    if (live)
        fprintf(stderr, "bertpre: warning: %s: %zu device allocation%s (%zu bytes) still live at shutdown\n",
                be->name, live, live == 1 ? "" : "s", bytes);
}

#ifdef __cplusplus
}
#endif
