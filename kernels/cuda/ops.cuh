// The CUDA ops, one struct per op file, each a template over the activation type
// (float, f16, bf16). The member signatures are those of backend_t (kernels/backend.h), so
// backend.cu can put them straight into the backend tables.
#pragma once
#include "kernels/cuda/common.cuh"
#include "kernels/backend.h"

namespace CUDA_NS {

template <typename Act>
struct convert_ops {
    static void params_to_compute(void *dst, const float *master, size_t n);
};

template <typename Act>
struct embeddings_ops {
    static void forward(void *out, const int *input_ids, const int *segment_ids, const int *positions,
                        const void *wte, const void *wpe, const void *wtt, int N, int T, int P, int C);
    static void backward(void *dwte, void *dwpe, void *dwtt, const void *dout, const int *input_ids,
                         const int *segment_ids, const int *positions, int pad_id, int N, int T, int P, int C);
};

template <typename Act>
struct layernorm_ops {
    static void forward(void *out, void *mean, void *rstd, const void *inp, const void *weight, const void *bias,
                        int N, int C, float eps);
    static void backward(void *dinp, void *dweight, void *dbias, const void *dout, const void *inp,
                         const void *weight, const void *mean, const void *rstd, const void *dinp_add, int N, int C);
    static void residual_dropout_forward(void *out, void *res, void *mean, void *rstd, const void *inp,
                                         const void *residual, const void *weight, const void *bias, int N, int C,
                                         float eps, dropout_t dropout);
    static void dropout_backward(void *dres, void *dinp, void *dweight, void *dbias, const void *dout,
                                 const void *res, const void *weight, const void *mean, const void *rstd, int N,
                                 int C, dropout_t dropout);
};

template <typename Act>
struct matmul_ops {
    static void forward(void *out, const void *inp, const void *weight, const void *bias, int N, int IC, int OC);
    static void backward(void *dinp, void *dweight, void *dbias, const void *dout, const void *inp,
                         const void *weight, const void *dinp_add, int N, int IC, int OC);
    static void bias_gelu_forward(void *out, void *pre, const void *inp, const void *weight, const void *bias, int N,
                                  int IC, int OC);
    static void dgelu_backward(void *dinp, void *dweight, void *dbias, void *dpre_bias, const void *dout,
                               const void *inp, const void *weight, const void *pre, int N, int IC, int OC);
};

template <typename Act>
struct attention_ops {
    static void forward(void *out, void *lse, uint32_t *keep, const void *qkv, const int *seq_offsets,
                        const int *doc_bounds, int packed, int B, int T, int C, int NH, int window, dropout_t dropout);
    static void backward(void *dqkv, const void *dout, const void *qkv, const void *out, const void *lse,
                         const uint32_t *keep, const int *seq_offsets, const int *doc_bounds, int packed, int B, int T,
                         int C, int NH, int window, dropout_t dropout);
};
// The fused tensor-core attention (flash_attention.cu): FP16/BF16, head sizes 32/64/128, any
// T (flash_attention_fits); attention_ops takes it for those shapes.
template <typename Act>
bool flash_attention_fits(int T, int C, int NH);
// The words per query row of its forward's dropout record (attention_keep_words(T) up to
// T = 512, where the fused backward reads them; 0 past it, where the backward draws again).
int flash_attention_keep_words(int T);
// Its workspace: the backward's FP32 row sums.
size_t flash_attention_workspace(int B, int T, int NH);
template <typename Act>
void flash_attention_forward(void *out, void *lse, uint32_t *keep, const void *qkv, const int *seq_offsets,
                             const int *doc_bounds, int packed, int B, int T, int C, int NH, int window,
                             dropout_t dropout);
template <typename Act>
void flash_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const void *lse,
                              const uint32_t *keep, const int *seq_offsets, const int *doc_bounds, int packed, int B,
                              int T, int C, int NH, int window, dropout_t dropout);

template <typename Act>
struct pointwise_ops {
    static void gelu_forward(void *out, const void *inp, int n, gelu_kind act);
    static void gelu_backward(void *dinp, const void *dout, const void *inp, int n, gelu_kind act);
    static void tanh_forward(void *out, const void *inp, int n);
    static void tanh_backward(void *dinp, const void *dout, const void *out, int n);
    static void dropout_residual_forward(void *out, const void *inp, const void *residual, int n, dropout_t d);
    static void dropout_backward(void *dinp, const void *dout, int n, dropout_t d);
    static void bias_gelu_forward(void *out, const void *inp, const void *bias, int N, int C, gelu_kind act);
    static void bias_gelu_backward(void *dinp, void *dbias, const void *dout, const void *inp, const void *bias,
                                   int N, int C, gelu_kind act);
    // ModernBERT's GeGLU (inp [N,2I]: input | gate) and RoPE (in place on qkv's q and k).
    static void geglu_forward(void *out, const void *inp, int N, int I, gelu_kind act);
    static void geglu_backward(void *dinp, const void *dout, const void *inp, int N, int I, gelu_kind act);
    static void rope_forward(void *qkv, const int *positions, int N, int T, int C, int NH, float theta);
    static void rope_backward(void *dqkv, const int *positions, int N, int T, int C, int NH, float theta);
};

template <typename Act>
struct gather_ops {
    static void forward(void *out, const void *inp, const int *index, int N, int C);
    static void backward(void *dinp, const void *dout, const int *index, int N, int M, int C);
};

template <typename Act>
struct crossentropy_ops {
    static void forward(void *losses, int *correct, const void *logits, const int *targets, int N, int V, int Vp,
                        float smoothing);
    static void backward(void *dlogits, const void *logits, const int *targets, int N, int V, int Vp, float dloss,
                         float smoothing);
};

// The optimizers (lamb.cu, lars.cu, adamw.cu): the same for every activation type.
// The device collectives (comm.cu); NULL in a CUDA build without NCCL.
const backend_comm *comm_ops();
double lamb_step(float *params, float *m, float *v, const void *grads, const optim_tensor *tensors, int n_tensors,
                 adam_hyper h);
double lars_step(float *params, float *momentum, const void *grads, const optim_tensor *tensors, int n_tensors,
                 lars_hyper h);
double adamw_step(float *params, float *m, float *v, const void *grads, const optim_tensor *tensors, int n_tensors,
                  adam_hyper h);
double stableadamw_step(float *params, float *m, float *v, const void *grads, const optim_tensor *tensors,
                        int n_tensors, adam_hyper h);

// Shared by several ops: deterministic reductions and scatters (reduce.cu).
// dst[c] += sum over rows n of src[n,c], in a fixed order.
template <typename T>
void column_sums_add(float *dst, const T *src, int N, int C);
// The same in two steps, for kernels that make their own partial sums: rows cut into
// column_chunks(N) chunks of rows_per_chunk, partials[chunk, C] summed into dst in order.
int column_chunks(int N, int *rows_per_chunk);
void add_column_partials(float *dst, const float *partials, int chunks, int C);
// dst[key[n],:] (+)= src[n,:] for keys known on the host, summed per key in order of n.
// Rows with key == skip_key are left out. accumulate = 0 overwrites the rows that are hit.
template <typename D, typename S>
void scatter_rows(D *dst, const S *src, const int *host_keys, int N, int C, int skip_key, bool accumulate);
// The WS_SCATTER bytes scatter_rows needs for N keys and rows of C.
size_t scatter_workspace_bytes(int N, int C);
// The widest row (C) the LayerNorm backward takes in activation type Act: it holds a row in
// registers, 8 spans of 512 threads, each span a 16-byte pack where C is a whole number of
// packs, one element otherwise.
template <typename Act>
int layernorm_backward_max_width(int C);

}  // namespace CUDA_NS
