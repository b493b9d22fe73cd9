// The roofline model of a training step (see roofline.h): the recording backend, the cost
// table (one entry per backend op: the launches the CUDA backend makes for it, or with
// opt.baseline those of the unfused kernels the fused ones replaced), and the report.
#include "engine/roofline.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "engine/optim.h"
#include "engine/loss_scaler.h"
#include "engine/model.h"
#include "engine/train.h"
#include "kernels/backend.h"
#include "kernels/common/check.h"
#include "sass_budgets.h"

roofline_options roofline_defaults(void) {
    return (roofline_options){.gemm_eff = 0.70, .dram_eff = 0.80, .sync_us = 10.0, .baseline = 0, .act_size = 2};
}

// Instruction estimates (per thread; docs/PERFORMANCE.md states them): a 64-bit integer
// division or remainder is a software routine on NVIDIA GPUs (no hardware divider), about 60
// instructions; one Philox4x32-10 call is 10 rounds of two wide multiplies (two issue slots
// each), two three-input XORs and two key additions, plus the draw's conversion: about 90.
// An SM issues one warp instruction per scheduler per clock: 4 x 32 thread instructions.
enum { INSTR_DIV64 = 60, INSTR_PHILOX = 90, INSTR_PER_SM_CLOCK = 128 };

// ---- the recording backend -------------------------------------------------------------------
#define R_ENUM(name) R_##name,
typedef enum { BACKEND_OPS(R_ENUM) R_COUNT } rec_op;
#undef R_ENUM

typedef struct {
    rec_op op;
    long n[6];            // the op's integer arguments, in signature order
    int flag_a, flag_b;   // op-specific (bias present, dropout on, dinp_add, dbias, residual)
} record;

static struct {
    record *list;
    int n, cap;
    uintptr_t next_address;
} rec;

static void put(record r) {
    if (rec.n == rec.cap) {
        rec.cap = rec.cap ? 2 * rec.cap : 4096;
        rec.list = realloc(rec.list, (size_t)rec.cap * sizeof(record));
        check_alloc(rec.list, (size_t)rec.cap * sizeof(record));
    }
    rec.list[rec.n++] = r;
}

// Distinct, never dereferenced addresses: the model only does arithmetic on them.
static void *r_alloc(size_t bytes) {
    void *p = (void *)rec.next_address;
    rec.next_address += (bytes + 255) / 256 * 256 + 256;
    return p;
}
static void r_release(void *p) { (void)p; }
static void r_upload(void *dst, const void *src, size_t bytes) {
    (void)src;
    put((record){.op = R_upload, .n = {(long)bytes}});
}
static void r_download(void *dst, const void *src, size_t bytes) {
    memset(dst, 0, bytes);  // zero losses and hits
    put((record){.op = R_download, .n = {(long)bytes}});
}
static void r_zero(void *p, size_t bytes) { put((record){.op = R_zero, .n = {(long)bytes}}); }
static void r_params_to_compute(void *dst, const float *src, size_t n) {
    put((record){.op = R_params_to_compute, .n = {(long)n}});
}
static void r_embeddings_forward(void *out, const int *ids, const int *seg, const int *pos, const void *wte, const void *wpe,
                      const void *wtt, int N, int T, int P, int C) {
    (void)ids, (void)seg, (void)wte, (void)wpe, (void)wtt, (void)P;
    put((record){.op = R_embeddings_forward, .n = {N, T, C}, .flag_a = pos != NULL});
}
static void r_embeddings_backward(void *dwte, void *dwpe, void *dwtt, const void *dout, const int *ids, const int *seg,
                      const int *pos, int pad, int N, int T, int P, int C) {
    (void)dwte, (void)dwpe, (void)dwtt, (void)ids, (void)seg, (void)pad, (void)P;
    put((record){.op = R_embeddings_backward, .n = {N, T, C}, .flag_a = pos != NULL});
}
static void r_layernorm_forward(void *out, void *mean, void *rstd, const void *inp, const void *w, const void *b, int N, int C,
                     float eps) {
    (void)mean, (void)rstd, (void)w, (void)b, (void)eps;
    put((record){.op = R_layernorm_forward, .n = {N, C}});
}
static void r_layernorm_backward(void *dinp, void *dw, void *db, const void *dout, const void *inp, const void *w, const void *mean,
                     const void *rstd, int N, int C) {
    (void)dw, (void)db, (void)inp, (void)w, (void)mean, (void)rstd;
    put((record){.op = R_layernorm_backward, .n = {N, C}});
}
static void r_matmul_forward(void *out, const void *inp, const void *w, const void *bias, int N, int IC, int OC) {
    (void)w;
    put((record){.op = R_matmul_forward, .n = {N, IC, OC}, .flag_a = bias != NULL});
}
static void r_matmul_backward(void *dinp, void *dw, void *db, const void *dout, const void *inp, const void *w,
                     const void *dinp_add, int N, int IC, int OC) {
    (void)dw, (void)inp, (void)w;
    put((record){.op = R_matmul_backward, .n = {N, IC, OC}, .flag_a = dinp_add ? (dinp_add == dinp ? 1 : 2) : 0,
                  .flag_b = db != NULL});
}
static void r_matmul_bias_gelu_forward(void *out, void *pre, const void *inp, const void *w, const void *bias, int N, int IC,
                          int OC) {
    (void)out, (void)pre, (void)inp, (void)w, (void)bias;
    put((record){.op = R_matmul_bias_gelu_forward, .n = {N, IC, OC}});
}
static void r_matmul_dgelu_backward(void *dinp, void *dw, void *db, void *dpre_b, const void *dout, const void *inp,
                           const void *w, const void *pre, int N, int IC, int OC) {
    (void)dinp, (void)dw, (void)dpre_b, (void)dout, (void)inp, (void)w, (void)pre;
    put((record){.op = R_matmul_dgelu_backward, .n = {N, IC, OC}, .flag_b = db != NULL});
}
static void r_attention_forward(void *out, void *lse, uint32_t *keep, const void *qkv, const int *offsets, int packed, int B,
                      int T, int C, int NH, dropout_t d) {
    (void)lse, (void)keep, (void)offsets, (void)packed;
    put((record){.op = R_attention_forward, .n = {B, T, C, NH}, .flag_a = d.p > 0.0f});
}
static void r_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const void *lse,
                      const uint32_t *keep, const int *offsets, int packed, int B, int T, int C, int NH,
                      dropout_t d) {
    (void)qkv, (void)out, (void)lse, (void)keep, (void)offsets, (void)packed;
    put((record){.op = R_attention_backward, .n = {B, T, C, NH}, .flag_a = d.p > 0.0f});
}
static void r_gelu_forward(void *out, const void *inp, int n, gelu_kind act) {
    (void)act;  // the same bytes either way
    put((record){.op = R_gelu_forward, .n = {n}});
}
static void r_gelu_backward(void *dinp, const void *dout, const void *inp, int n, gelu_kind act) {
    (void)inp, (void)act;
    put((record){.op = R_gelu_backward, .n = {n}});
}
static void r_tanh_forward(void *out, const void *inp, int n) {
    put((record){.op = R_tanh_forward, .n = {n}});
}
static void r_tanh_backward(void *dinp, const void *dout, const void *out, int n) {
    (void)out;
    put((record){.op = R_tanh_backward, .n = {n}});
}
static void r_dropout_residual_forward(void *out, const void *inp, const void *residual, int n, dropout_t d) {
    put((record){.op = R_dropout_residual_forward, .n = {n}, .flag_a = d.p > 0.0f, .flag_b = residual != NULL});
}
static void r_dropout_backward(void *dinp, const void *dout, int n, dropout_t d) {
    put((record){.op = R_dropout_backward, .n = {n}, .flag_a = d.p > 0.0f});
}
static void r_gather_rows_forward(void *out, const void *inp, const int *index, int N, int C) {
    (void)index;
    put((record){.op = R_gather_rows_forward, .n = {N, C}});
}
static void r_gather_rows_backward(void *dinp, const void *dout, const int *index, int N, int M, int C) {
    (void)index;
    put((record){.op = R_gather_rows_backward, .n = {N, M, C}});
}
static void r_crossentropy_forward(void *losses, int *correct, const void *logits, const int *targets, int N, int V, int Vp,
                     float smoothing) {
    (void)losses, (void)correct, (void)targets, (void)smoothing;
    put((record){.op = R_crossentropy_forward, .n = {N, V, Vp}});
}
static void r_crossentropy_backward(void *dlogits, const void *logits, const int *targets, int N, int V, int Vp, float dloss,
                     float smoothing) {
    (void)targets, (void)dloss, (void)smoothing;
    put((record){.op = R_crossentropy_backward, .n = {N, V, Vp}});
}
static void r_residual_dropout_layernorm_forward(void *out, void *res, void *mean, void *rstd, const void *inp, const void *residual,
                       const void *w, const void *b, int N, int C, float eps, dropout_t d) {
    (void)res, (void)mean, (void)rstd, (void)w, (void)b, (void)eps;
    put((record){.op = R_residual_dropout_layernorm_forward, .n = {N, C}, .flag_a = d.p > 0.0f, .flag_b = residual != NULL});
}
static void r_layernorm_dropout_backward(void *dres, void *dinp, void *dw, void *db, const void *dout, const void *res, const void *w,
                         const void *mean, const void *rstd, int N, int C, dropout_t d) {
    (void)dres, (void)dw, (void)db, (void)res, (void)w, (void)mean, (void)rstd;
    put((record){.op = R_layernorm_dropout_backward, .n = {N, C}, .flag_a = d.p > 0.0f});
}
static void r_bias_gelu_forward(void *out, const void *inp, const void *bias, int N, int C, gelu_kind act) {
    (void)act;
    put((record){.op = R_bias_gelu_forward, .n = {N, C}, .flag_a = bias != NULL});
}
static void r_bias_gelu_backward(void *dinp, void *dbias, const void *dout, const void *inp, const void *bias, int N, int C,
                        gelu_kind act) {
    (void)inp, (void)bias, (void)act;
    put((record){.op = R_bias_gelu_backward, .n = {N, C}, .flag_b = dbias != NULL});
}
static double r_lamb_step(float *params, float *m, float *v, const void *grads, const lamb_tensor *tensors, int n_tensors,
                     lamb_hyper h) {
    (void)m, (void)v, (void)grads, (void)h;
    size_t numel = 0;
    for (int i = 0; i < n_tensors; i++) numel += tensors[i].numel;
    put((record){.op = R_lamb_step, .n = {(long)numel, n_tensors}});
    return 1.0;  // a finite norm: the step is applied, the compute copy refreshed
}

static double r_optim(int op, const lamb_tensor *tensors, int n_tensors) {
    size_t numel = 0;
    for (int i = 0; i < n_tensors; i++) numel += tensors[i].numel;
    put((record){.op = op, .n = {(long)numel, n_tensors}});
    return 1.0;
}
static double r_lars_step(float *params, float *mom, const void *grads, const lamb_tensor *tensors, int n_tensors,
                     lars_hyper h) {
    (void)params, (void)mom, (void)grads, (void)h;
    return r_optim(R_lars_step, tensors, n_tensors);
}
static double r_adamw_step(float *params, float *m, float *v, const void *grads, const lamb_tensor *tensors, int n_tensors,
                      lamb_hyper h) {
    (void)params, (void)m, (void)v, (void)grads, (void)h;
    return r_optim(R_adamw_step, tensors, n_tensors);
}

static backend_t recording_backend(size_t act_size) {
    return (backend_t){
        .name = "roofline",
        .act_size = act_size,
        .acc_size = sizeof(float),
        .alloc = r_alloc,
        .release = r_release,
#define R_SLOT(name) .name = r_##name,
        BACKEND_OPS(R_SLOT)
#undef R_SLOT
    };
}

// ---- the cost table ---------------------------------------------------------------------------
typedef struct {
    roofline_result *r;
    const record *rec;
    double n[6];   // the op's arguments as costed: rec->n, or its unpadded counterparts
    double weight; // multiplies every launch's FLOPs, bytes and instructions (1; sequences of
                   // one length in the unpadded attention)
    double A;      // activation bytes
    int baseline;  // cost the unfused kernels the fused ones replaced
    int clusters;  // the GPU launches thread-block clusters (the one-kernel attention backward)
    int phase;
} cost_ctx;

static roofline_launch *emit(cost_ctx *c, const char *kernel, double flops, double bytes, double instructions) {
    roofline_result *r = c->r;
    if (r->n_launches == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 1024;
        r->launches = realloc(r->launches, (size_t)r->cap * sizeof(roofline_launch));
        check_alloc(r->launches, (size_t)r->cap * sizeof(roofline_launch));
    }
    roofline_launch *l = &r->launches[r->n_launches++];
    memset(l, 0, sizeof *l);
    l->kernel = kernel;
    l->phase = c->phase;
    l->flops = flops * c->weight;
    l->bytes = bytes * c->weight;
    l->instructions = instructions * c->weight;
    l->gemm = flops > 0.0;
    // Integers as such; a mean micro-batch's unpadded row counts to one decimal.
    char v[6][20];
    for (int k = 0; k < 6; k++)
        snprintf(v[k], sizeof v[k], c->n[k] == floor(c->n[k]) ? "%.0f" : "%.1f", c->n[k]);
    switch (c->rec->op) {
    case R_matmul_forward: case R_matmul_backward: case R_matmul_bias_gelu_forward: case R_matmul_dgelu_backward: snprintf(l->shape, sizeof l->shape, "N=%s IC=%s OC=%s", v[0], v[1], v[2]); break;
    case R_attention_forward: case R_attention_backward:
        snprintf(l->shape, sizeof l->shape, "B=%s T=%s C=%s NH=%s", v[0], v[1], v[2], v[3]);
        break;
    case R_embeddings_forward: case R_embeddings_backward: snprintf(l->shape, sizeof l->shape, "N=%s T=%s C=%s", v[0], v[1], v[2]); break;
    case R_layernorm_forward: case R_layernorm_backward: case R_gather_rows_forward: case R_residual_dropout_layernorm_forward: case R_layernorm_dropout_backward: case R_bias_gelu_forward:
    case R_bias_gelu_backward: snprintf(l->shape, sizeof l->shape, "N=%s C=%s", v[0], v[1]); break;
    case R_gather_rows_backward: snprintf(l->shape, sizeof l->shape, "N=%s M=%s C=%s", v[0], v[1], v[2]); break;
    case R_crossentropy_forward: case R_crossentropy_backward: snprintf(l->shape, sizeof l->shape, "N=%s V=%s Vp=%s", v[0], v[1], v[2]); break;
    case R_lamb_step:
    case R_lars_step:
    case R_adamw_step: snprintf(l->shape, sizeof l->shape, "n=%s tensors=%s", v[0], v[1]); break;
    default: snprintf(l->shape, sizeof l->shape, "n=%s", v[0]); break;
    }
    return l;
}

static void emit_sync(cost_ctx *c, const char *what, int syncs) {
    roofline_launch *l = emit(c, what, 0.0, 0.0, 0.0);
    l->host_syncs = syncs;
}

// Philox instructions for n dropout decisions drawn per_call to a call (one call per element
// in the baseline). The streaming kernels draw a 16-byte vector's at a time (philox): eight
// FP16/BF16 elements, four FP32.
static double philox_per(const cost_ctx *c, double n, double per_call) {
    return n * INSTR_PHILOX / (c->baseline ? 1.0 : per_call);
}
static double philox(const cost_ctx *c, double n) { return philox_per(c, n, c->A == 2 ? 8.0 : 4.0); }

static void gemm(cost_ctx *c, const char *kernel, double M, double N, double K, double batch, double a_bytes,
                 double b_bytes, double c_bytes) {
    emit(c, kernel, 2.0 * M * N * K * batch, a_bytes + b_bytes + c_bytes, 0.0);
}

// The chunks of rows whose column partials the CUDA kernels write (column_chunks, reduce.cu).
static double column_chunks(double N) { return fmin(256.0, ceil(N / 64.0)); }

// Column sums of src[N,C] into an FP32 dst (reduce.cu): partials per chunk, then their sum.
static void column_sums(cost_ctx *c, const char *kernel, double N, double C) {
    double chunks = column_chunks(N);
    emit(c, kernel, 0.0, N * C * c->A + chunks * C * 4, 0.0);
    emit(c, "add_partials", 0.0, chunks * C * 4 + 2 * C * 4, 0.0);
}

// dst[key[n],:] += src[n,:] over host-sorted keys (reduce.cu): the rows read once and each
// touched row of dst read and written once; the baseline uploaded the sorted order
// synchronously, now it goes through pinned staging without a host round trip.
static void scatter(cost_ctx *c, const char *kernel, double N, double C, double rows, double dst_bytes) {
    if (c->baseline) emit_sync(c, "upload sorted keys", 1);
    emit(c, kernel, 0.0, N * C * c->A + N * 4 * 3 + rows * C * dst_bytes * 2, 0.0);
}

// The pieces the fused ops are made of (and that the baseline ran as separate launches).
static void ln_forward(cost_ctx *c, double N, double C) {
    emit(c, "layernorm_forward", 0.0, 2 * N * C * c->A + 2 * C * c->A + 2 * N * 4, 0.0);
}
static void dropout_residual(cost_ctx *c, double n, int dropout, int residual) {
    emit(c, "dropout_residual", 0.0, (residual ? 3 : 2) * n * c->A, dropout ? philox(c, n) : 0.0);
}
static void dropout_backward(cost_ctx *c, double n, int dropout) {
    emit(c, "dropout_backward", 0.0, 2 * n * c->A, dropout ? philox(c, n) : 0.0);
}
// LayerNorm backward. Now one pass (layernorm.cu): dout and the input read once for dinp
// (and, fused, the dropout backward's output beside it: two outputs, the forward's keep bits)
// and the chunks' weight/bias column partials written beside it, then their sum. The
// baseline read dout and the input twice: a partials pass, their sum, then the dinp pass.
static void ln_backward(cost_ctx *c, double N, double C, int fused_dropout, int dropout) {
    double A = c->A, chunks = column_chunks(N);
    double dinp_bytes = (fused_dropout ? 4 : 3) * N * C * A + C * A + 2 * N * 4;
    // Fused, it reads the forward's keep bits (C / 8 bytes per row) and draws nothing.
    if (fused_dropout && dropout) dinp_bytes += N * C / 8;
    if (c->baseline) {
        emit(c, "layernorm_partials", 0.0, 2 * N * C * A + 2 * N * 4 + chunks * 2 * C * 4, 0.0);
        emit(c, "layernorm_add_partials", 0.0, chunks * 2 * C * 4 + 4 * C * 4, 0.0);
        emit(c, "layernorm_dinp", 0.0, dinp_bytes, 0.0);  // never fused there
        return;
    }
    emit(c, fused_dropout ? "layernorm_dropout_backward" : "layernorm_backward", 0.0,
         dinp_bytes + chunks * 2 * C * 4, 0.0);
    emit(c, "layernorm_add_partials", 0.0, chunks * 2 * C * 4 + 4 * C * 4, 0.0);
}

static void cost_emb_fwd(cost_ctx *c) {
    double N = c->n[0], T = c->n[1], C = c->n[2], A = c->A;
    emit(c, "embeddings_forward", 0.0, N * C * A * 2 + T * C * A + 2 * C * A + 2 * N * 4, 0.0);
}
static void cost_emb_bwd(cost_ctx *c) {
    double N = c->n[0], T = c->n[1], C = c->n[2], B = N / T;
    // Distinct word rows: at most N (fewer in real text; N is the bound).
    if (c->baseline) {
        emit_sync(c, "download ids and segments", 2);
        scatter(c, "scatter_rows (word)", N, C, N, 4);
        scatter(c, "scatter_rows (position)", N, C, T, 4);
        scatter(c, "scatter_rows (token type)", N, C, 2, 4);
        return;
    }
    // From the host's ids: word and token-type rows scattered, positions as column sums of
    // dout seen as [B, T*C] (padded) or scattered too (unpadded rows).
    scatter(c, "scatter_pieces (word)", N, C, N, 4);
    if (c->rec->flag_a)
        scatter(c, "scatter_pieces (position)", N, C, T, 4);
    else
        column_sums(c, "column_partials (position)", B, T * C);
    scatter(c, "scatter_pieces (token type)", N, C, 2, 4);
}
static void cost_ln_fwd(cost_ctx *c) { ln_forward(c, c->n[0], c->n[1]); }
static void cost_ln_bwd(cost_ctx *c) { ln_backward(c, c->n[0], c->n[1], 0, 0); }
static void cost_rdln_fwd(cost_ctx *c) {
    double N = c->n[0], C = c->n[1], A = c->A;
    int dropout = c->rec->flag_a, residual = c->rec->flag_b;
    if (c->baseline) {
        dropout_residual(c, N * C, dropout, residual);
        ln_forward(c, N, C);
        return;
    }
    // Reads inp and the residual, writes the LayerNorm input (kept for the backward) and output,
    // and the dropout's decisions as bits (C / 8 bytes per row) for the backward.
    emit(c, "residual_dropout_layernorm", 0.0,
         (residual ? 4 : 3) * N * C * A + 2 * C * A + 2 * N * 4 + (dropout ? N * C / 8 : 0.0),
         dropout ? philox(c, N * C) : 0.0);
}
static void cost_lndrop_bwd(cost_ctx *c) {
    double N = c->n[0], C = c->n[1];
    if (c->baseline) {
        ln_backward(c, N, C, 0, 0);
        dropout_backward(c, N * C, c->rec->flag_a);
        return;
    }
    ln_backward(c, N, C, 1, c->rec->flag_a);
}
static void cost_bgelu_fwd(cost_ctx *c) {
    double N = c->n[0], C = c->n[1], A = c->A;
    // The baseline added the bias in the GEMM's epilogue; now the GELU pass reads it.
    emit(c, c->baseline ? "gelu_forward" : "bias_gelu_forward", 0.0,
         2 * N * C * A + (!c->baseline && c->rec->flag_a ? C * A : 0.0), 0.0);
}
static void cost_bgelu_bwd(cost_ctx *c) {
    double N = c->n[0], C = c->n[1], A = c->A;
    int dbias = c->rec->flag_b;
    if (c->baseline) {
        emit(c, "gelu_backward", 0.0, 3 * N * C * A, 0.0);
        if (dbias) column_sums(c, "column_partials", N, C);  // the next GEMM's bias gradient
        return;
    }
    // Instructions: the derivative with one exponential (exp(-x^2/2) for the density and
    // erfc), 214 SASS per warp and loop iteration of 8 elements per lane (FP16, counted by
    // tools/kernel_budgets.py, not measured): 26.75 per element; below the bytes' time.
    double chunks = column_chunks(N);
    emit(c, dbias ? "bias_gelu_backward" : "bias_gelu_dinp", 0.0, 3 * N * C * A + C * A + (dbias ? chunks * C * 4 : 0),
         dbias ? N * C * 214.0 / 8.0 : 0.0);
    if (dbias) emit(c, "add_partials", 0.0, chunks * C * 4 + 2 * C * 4, 0.0);
}
static void cost_mm_fwd(cost_ctx *c) {
    double N = c->n[0], IC = c->n[1], OC = c->n[2], A = c->A;
    gemm(c, "gemm (forward)", N, OC, IC, 1, N * IC * A, OC * IC * A, N * OC * A + (c->rec->flag_a ? OC * A : 0));
}
static void cost_mm_bwd(cost_ctx *c) {
    double N = c->n[0], IC = c->n[1], OC = c->n[2], A = c->A;
    int add = c->rec->flag_a;  // 0 none, 1 in place (beta = 1), 2 another buffer
    // The baseline copied a separate dinp_add into dinp first; now it is the GEMM's C input.
    if (add == 2 && c->baseline) emit(c, "copy (dinp_add)", 0.0, 2 * N * IC * A, 0.0);
    gemm(c, "gemm (dinp)", N, IC, OC, 1, OC * IC * A, N * OC * A, N * IC * A * (add ? 2 : 1));
    gemm(c, "gemm (dweight)", IC, OC, N, 1, N * IC * A, N * OC * A, 2 * OC * IC * 4);
    if (c->rec->flag_b) column_sums(c, "column_partials", N, OC);
}

// The tanh GELU in the FFN GEMMs' epilogues (matmul.cu; the model takes it for a tanh
// hidden_act): the forward GEMM writes the aux (pre-activation) beside its output, the
// dinp GEMM of the backward reads the aux and writes the bias gradient (one row, added by
// column sums). The baseline: the GEMM without a bias and the streaming bias + GELU passes.
static void cost_mm_gelu_fwd(cost_ctx *c) {
    double N = c->n[0], IC = c->n[1], OC = c->n[2], A = c->A;
    if (c->baseline) {
        gemm(c, "gemm (forward)", N, OC, IC, 1, N * IC * A, OC * IC * A, N * OC * A);
        emit(c, "gelu_forward", 0.0, 2 * N * OC * A, 0.0);
        return;
    }
    gemm(c, "gemm (forward, GELU_AUX_BIAS)", N, OC, IC, 1, N * IC * A, OC * IC * A, 2 * N * OC * A + OC * A);
}
static void cost_mm_dgelu_bwd(cost_ctx *c) {
    double N = c->n[0], IC = c->n[1], OC = c->n[2], A = c->A;
    if (c->baseline) {
        gemm(c, "gemm (dinp)", N, IC, OC, 1, OC * IC * A, N * OC * A, N * IC * A);
        emit(c, "gelu_backward", 0.0, 3 * N * IC * A, 0.0);
        column_sums(c, "column_partials", N, IC);
    } else {
        gemm(c, "gemm (dinp, DGELU_BGRAD)", N, IC, OC, 1, OC * IC * A, N * OC * A, 2 * N * IC * A + IC * A);
        column_sums(c, "column_partials (bias gradient)", 1, IC);
    }
    gemm(c, "gemm (dweight)", IC, OC, N, 1, N * IC * A, N * OC * A, 2 * OC * IC * 4);
    if (c->rec->flag_b) column_sums(c, "column_partials", N, OC);
}

// The fused tensor-core attention (flash_attention.cu) takes FP16/BF16 with head sizes 32,
// 64 and 128 and T <= 512; the rest (and the baseline) the GEMM path of attention.cu.
static int flash_attention(const cost_ctx *c) {
    long T = c->rec->n[1], HS = c->rec->n[2] / c->rec->n[3];
    return !c->baseline && c->A == 2 && (HS == 32 || HS == 64 || HS == 128) && T <= 512;
}
// The fused attention's draws for n scores: one Philox call per eight keys of a row (a
// lane's four calls per 16 x 64 tile) when every row starts on a group of eight (T % 8 ==
// 0), else one per pair of keys a lane holds.
static double flash_philox(const cost_ctx *c, double n, long T) { return philox_per(c, n, T % 8 == 0 ? 8.0 : 2.0); }

// Warp instructions of the fused attention kernels, counted in their sm_90 SASS (nvcc
// 13.0.88, FP16, `tools/kernel_budgets.py loops flash_`; docs/PERFORMANCE.md states them):
// counted, not measured on a GPU. Per warp and tile: the forward's 16 queries x 64 keys
// (dropout on and T % 8 == 0 as compiled alone for the training path: a tile without
// padding keys, a sequence's last tile with the padding select; dropout off likewise); the
// split backward's dq kernel (16 queries x 64 keys) and dk/dv kernel (16 keys x 64 queries:
// its outer loop with one half inside it, plus the second half); the one-kernel backward's
// loop body (16 queries x 64 keys, then 16 keys x 64 queries, both dropout branches) with
// one pass of its dq sum inside it, and that sum's body alone (per float4 column). Outside
// the tile loop, per warp: the forward's about 450 (an estimate); the backward kernels'
// whole-kernel SASS (their budgets) less the loop body (static counts: at most what runs). The
// forward's per-tile counts at head sizes 32 and 128 are head size 64's scaled by the
// static loop bodies (1,091 and 1,412 against 1,236): estimates.
typedef struct {
    int hs;
    double fwd_tile, fwd_last, fwd_nodrop_tile, fwd_nodrop_last, fwd_outside;
    double bwd_q, bwd_kv_outer, bwd_kv_half, fused, fused_dq_sum;  // loop bodies, counted by `loops`
    double bwd_q_outside, bwd_kv, bwd_kv_outside, fused_outside;   // with the kernels' totals (below)
} flash_counts;
static const flash_counts flash_sass[] = {
    {32, 842 * 1091 / 1236.0, 908 * 1091 / 1236.0, 447 * 1091 / 1236.0, 512 * 1091 / 1236.0, 450, 745, 812, 621, 1341,
     141, 0, 0, 0, 0},
    {64, 842, 908, 447, 512, 450, 874, 911, 688, 1520, 151, 0, 0, 0, 0},
    {128, 842 * 1412 / 1236.0, 908 * 1412 / 1236.0, 447 * 1412 / 1236.0, 512 * 1412 / 1236.0, 450, 1139, 1152, 811,
     1946, 162, 0, 0, 0, 0},
};

// A kernel's whole SASS count: its budget in kernels/cuda/budgets.tsv (made into sass_budgets.h
// by the build), so that a kernel whose count changes changes the model with it.
static double budget_sass(const char *kernel) {
    for (size_t i = 0; i < sizeof sass_budgets / sizeof sass_budgets[0]; i++)
        if (!strcmp(sass_budgets[i].kernel, kernel)) return sass_budgets[i].sass;
    CHECK(0, "kernel %s has no row in kernels/cuda/budgets.tsv", kernel);
    return 0.0;
}

// The counts at head size HS (64's for another): the loop bodies above, and outside the loops
// the kernel's total less them (FP16: the training path's kernels).
static flash_counts flash_count(double HS) {
    flash_counts k = flash_sass[1];
    for (size_t i = 0; i < sizeof flash_sass / sizeof flash_sass[0]; i++)
        if (flash_sass[i].hs == (int)HS) k = flash_sass[i];
    char name[96];
    snprintf(name, sizeof name, "flash_backward_q_kernel<__half, %d>", k.hs);
    k.bwd_q_outside = budget_sass(name) - k.bwd_q;
    snprintf(name, sizeof name, "flash_backward_kv_kernel<__half, %d>", k.hs);
    k.bwd_kv = k.bwd_kv_outer + k.bwd_kv_half;
    k.bwd_kv_outside = budget_sass(name) - k.bwd_kv_outer;
    snprintf(name, sizeof name, "flash_backward_fused_kernel<__half, %d>", k.hs);
    k.fused_outside = budget_sass(name) - k.fused;
    CHECK(k.bwd_q_outside > 0 && k.bwd_kv_outside > 0 && k.fused_outside > 0,
          "the flash kernels' loop bodies at head size %d exceed their budgeted totals: count them again "
          "(tools/kernel_budgets.py loops flash_)", k.hs);
    return k;
}
// The warp-tiles and the warps of BH heads at length T (4 warps per 64 rows, each over T / 64
// tiles; a launch's thread instructions are 32 per warp instruction), fractions of a tile
// included: the model's assumption that the kernels waste nothing on tiles a sequence fills
// only partly.
static double flash_warp_tiles(double BH, double T) { return BH * (T / 16) * (T / 64); }
static double flash_warps(double BH, double T) { return BH * (T / 16); }

// Per element: four 64-bit divisions and the rest of the index arithmetic.
static double permute_instructions(void) { return INSTR_DIV64 * 4 + 16; }

static void cost_att_fwd(cost_ctx *c) {
    double B = c->n[0], T = c->n[1], C = c->n[2], NH = c->n[3], A = c->A;
    double HS = C / NH, NC = B * T * C, BH = B * NH, TT = T * T, drop = c->rec->flag_a;
    if (flash_attention(c)) {
        // Q K^T and P V on tensor cores from the QKV GEMM's layout, online softmax in FP32,
        // dropout drawn in the kernel and its decisions written as bits for the backward, a
        // per-row FP32 log-sum-exp. Instructions: the SASS counts above, each warp's last key
        // tile with the padding select; where T % 8 != 0, the extra Philox calls of drawing
        // per pair of keys.
        const flash_counts kc = flash_count(HS), *k = &kc;
        double keep_bits = drop ? BH * T * attention_keep_words((int)T) * 4 : 0.0;
        double tiles = T / 64, last = fmin(tiles, 1.0);
        double per_warp = k->fwd_outside + (drop ? (tiles - last) * k->fwd_tile + last * k->fwd_last
                                                 : (tiles - last) * k->fwd_nodrop_tile + last * k->fwd_nodrop_last);
        double extra_draws = drop && c->rec->n[1] % 8 ? flash_philox(c, BH * TT, c->rec->n[1]) - philox_per(c, BH * TT, 8.0) : 0.0;
        emit(c, "flash_forward", 4.0 * BH * TT * HS, 3 * NC * A + NC * A + BH * T * 4 + B * T * 4 + keep_bits,
             32 * flash_warps(BH, T) * per_warp + extra_draws);
        return;
    }
    emit(c, "permute qkv", 0.0, 2 * 3 * NC * A, 3 * NC * permute_instructions());
    gemm(c, "gemm Q K^T", T, T, HS, BH, NC * A, NC * A, BH * TT * 4);
    // Baseline: writes P and P'; now P' and the log-sum-exp.
    emit(c, "softmax_forward", 0.0, BH * TT * 4 + B * T * 4 + (c->baseline ? 2 * BH * TT * A : BH * TT * A + BH * T * 4),
         BH * TT * 8 + (drop ? philox_per(c, BH * TT, 8.0) : 0.0));
    gemm(c, "gemm P V", HS, T, T, BH, BH * TT * A, NC * A, NC * A);
    emit(c, "permute context", 0.0, 2 * NC * A, NC * permute_instructions());
}
static void cost_att_bwd(cost_ctx *c) {
    double B = c->n[0], T = c->n[1], C = c->n[2], NH = c->n[3], A = c->A;
    double HS = C / NH, NC = B * T * C, BH = B * NH, TT = T * T, drop = c->rec->flag_a;
    if (flash_attention(c)) {
        const flash_counts kc = flash_count(HS), *k = &kc;
        double keep_bits = drop ? BH * T * attention_keep_words((int)T) * 4 : 0.0;
        if (c->clusters) {
            // One kernel (GPUs with thread-block clusters): a cluster of T / 64 blocks per
            // (sequence, head), block j its 64 keys; delta in the prologue (dout and out read
            // once), then per query tile S, dP, dS and the dq partial (16 queries x 64 keys
            // per warp), dv and dk in registers (16 keys x 64 queries per warp): five
            // products; dq summed across the cluster through distributed shared memory, 16 HS
            // float4 columns per query tile: HS / 2 passes of the sum's body per query tile in
            // all, one of which the loop body's count holds per warp and tile. Reads q, k, v,
            // out, dout, the log-sum-exp and the keep bits; writes dq, dk, dv (delta stays on
            // chip).
            double n = T / 64;
            double warp_instr = flash_warp_tiles(BH, T) * (k->fused - k->fused_dq_sum) +
                                BH * n * (HS / 2) * k->fused_dq_sum + flash_warps(BH, T) * k->fused_outside;
            emit(c, "flash_backward_fused", 10.0 * BH * TT * HS,
                 5 * NC * A + BH * T * 4 + B * T * 4 + keep_bits + 3 * NC * A, 32 * warp_instr);
            return;
        }
        // Split (no clusters): delta = rowsum(dout . out); then one kernel per query tile
        // (recomputes S and P; dP and dQ: three products) and one per key tile (S, dP, dV, dK:
        // four products); both read the forward's keep bits and draw nothing.
        emit(c, "flash_delta", 0.0, 2 * NC * A + BH * T * 4, 0.0);
        emit(c, "flash_backward_q", 6.0 * BH * TT * HS, 4 * NC * A + 2 * BH * T * 4 + B * T * 4 + NC * A + keep_bits,
             32 * (flash_warp_tiles(BH, T) * k->bwd_q + flash_warps(BH, T) * k->bwd_q_outside));
        emit(c, "flash_backward_kv", 8.0 * BH * TT * HS, 4 * NC * A + 2 * BH * T * 4 + B * T * 4 + 2 * NC * A + keep_bits,
             32 * (flash_warp_tiles(BH, T) * k->bwd_kv + flash_warps(BH, T) * k->bwd_kv_outside));
        return;
    }
    emit(c, "permute qkv", 0.0, 2 * 3 * NC * A, 3 * NC * permute_instructions());
    emit(c, "permute dcontext", 0.0, 2 * NC * A, NC * permute_instructions());
    if (c->baseline) {
        emit(c, "dropout_probs", 0.0, 2 * BH * TT * A, drop ? philox_per(c, BH * TT, 8.0) : 0.0);
    } else {
        // S again, then P = exp(S - lse) and P' (two 64-bit divisions per element for its row).
        gemm(c, "gemm Q K^T", T, T, HS, BH, NC * A, NC * A, BH * TT * 4);
        emit(c, "probs_from_lse", 0.0, BH * TT * 4 + BH * T * 4 + 2 * BH * TT * A,
             BH * TT * (2 * INSTR_DIV64 + 8) + (drop ? philox_per(c, BH * TT, 8.0) : 0.0));
    }
    gemm(c, "gemm dP = dO V^T", T, T, HS, BH, NC * A, NC * A, BH * TT * 4);
    gemm(c, "gemm dV = P'^T dO", HS, T, T, BH, NC * A, BH * TT * A, NC * A);
    // Two passes over the row (rowsum, then dS); the baseline drew the mask in each, now the
    // keep decisions come from P'.
    emit(c, "softmax_backward", 0.0, BH * TT * 4 + (c->baseline ? 2 : 3) * BH * TT * A,
         BH * TT * 10 + (drop && c->baseline ? 2 * philox_per(c, BH * TT, 8.0) : 0.0));
    gemm(c, "gemm dQ = dS K", HS, T, T, BH, NC * A, BH * TT * A, NC * A);
    gemm(c, "gemm dK = dS^T Q", HS, T, T, BH, NC * A, BH * TT * A, NC * A);
    emit(c, "permute dqkv", 0.0, 2 * 3 * NC * A, 3 * NC * permute_instructions());
}
static void cost_pointwise(cost_ctx *c) {
    double n = c->n[0], A = c->A;
    switch (c->rec->op) {
    case R_gelu_forward: emit(c, "gelu_forward", 0.0, 2 * n * A, 0.0); break;
    case R_gelu_backward: emit(c, "gelu_backward", 0.0, 3 * n * A, 0.0); break;
    case R_tanh_forward: emit(c, "tanh_forward", 0.0, 2 * n * A, 0.0); break;
    case R_tanh_backward: emit(c, "tanh_backward", 0.0, 3 * n * A, 0.0); break;
    default: break;
    }
}
static void cost_dropres_fwd(cost_ctx *c) { dropout_residual(c, c->n[0], c->rec->flag_a, c->rec->flag_b); }
static void cost_drop_bwd(cost_ctx *c) { dropout_backward(c, c->n[0], c->rec->flag_a); }
static void cost_gather_fwd(cost_ctx *c) {
    double N = c->n[0], C = c->n[1];
    emit(c, "gather_rows", 0.0, 2 * N * C * c->A + N * 4, 0.0);
}
static void cost_gather_bwd(cost_ctx *c) {
    double N = c->n[0], M = c->n[1], C = c->n[2];
    emit(c, "zero dinp", 0.0, M * C * c->A, 0.0);
    if (c->baseline) emit_sync(c, "download gather index", 1);  // now the host's own index
    scatter(c, c->baseline ? "scatter_rows (gather)" : "scatter_pieces (gather)", N, C, N, c->A);
}
static void cost_ce_fwd(cost_ctx *c) {
    double N = c->n[0], V = c->n[1];
    emit(c, "crossentropy_forward", 0.0, N * V * c->A + N * 4 * 3, 0.0);
}
static void cost_ce_bwd(cost_ctx *c) {
    double N = c->n[0], V = c->n[1], Vp = c->n[2];
    emit(c, "crossentropy_backward", 0.0, N * V * c->A + N * Vp * c->A + N * 4, 0.0);
}
// LARS (optim.cu): gradient squares, norm, per-chunk |w|^2 and |g|^2, trust ratio per
// tensor, then momentum and update in one pass (read params, grads, momentum; write
// momentum, params).
static void cost_lars(cost_ctx *c) {
    double n = c->n[0];
    emit(c, "lars_grad_sq", 0.0, 4 * n, 0.0);
    emit(c, "lars_norm", 0.0, 0.0, 0.0);
    emit_sync(c, "download gradient norm", 1);
    emit(c, "lars_norms", 0.0, 2 * n * 4, 0.0);  // read params, grads
    emit(c, "lars_trust", 0.0, 0.0, 0.0);
    emit(c, "lars_apply", 0.0, 3 * n * 4 + 2 * n * 4, 0.0);
}
// AdamW (optim.cu): gradient squares, norm, then moments and update in one pass (read params,
// m, v, grads; write m, v, params).
static void cost_adamw(cost_ctx *c) {
    double n = c->n[0];
    emit(c, "adamw_grad_sq", 0.0, 4 * n, 0.0);
    emit(c, "adamw_norm", 0.0, 0.0, 0.0);
    emit_sync(c, "download gradient norm", 1);
    emit(c, "adamw_apply", 0.0, 4 * n * 4 + 3 * n * 4, 0.0);
}
static void cost_lamb(cost_ctx *c) {
    double n = c->n[0];
    emit(c, "lamb_grad_sq", 0.0, 4 * n, 0.0);
    emit(c, "lamb_norm", 0.0, 0.0, 0.0);
    emit_sync(c, "download gradient norm", 1);
    emit(c, "lamb_moments", 0.0, 4 * n * 4 + 2 * n * 4, 0.0);  // read params, m, v, grads; write m, v
    emit(c, "lamb_trust", 0.0, 0.0, 0.0);
    emit(c, "lamb_apply", 0.0, 3 * n * 4 + n * 4, 0.0);  // read params, m, v; write params
}
static void cost_to_compute(cost_ctx *c) {
    double n = c->n[0];
    emit(c, "convert (master -> compute)", 0.0, 4 * n + n * c->A, 0.0);
}
static void cost_zero(cost_ctx *c) { emit(c, "memset", 0.0, (double)c->n[0], 0.0); }
static void cost_transfer(cost_ctx *c) {
    emit_sync(c, c->rec->op == R_upload ? "upload (synchronous)" : "download (synchronous)", 1);
}

// One entry per recorded op: its phase and its cost function (cost_records checks that every
// op of BACKEND_OPS has one); the names come from the same list.
#define R_NAME(name) #name,
static const char *const op_names[R_COUNT] = {BACKEND_OPS(R_NAME)};
#undef R_NAME
static const struct {
    int phase;
    void (*cost)(cost_ctx *);
} cost_table[R_COUNT] = {
    [R_embeddings_forward] = {ROOF_FORWARD, cost_emb_fwd},
    [R_embeddings_backward] = {ROOF_BACKWARD, cost_emb_bwd},
    [R_layernorm_forward] = {ROOF_FORWARD, cost_ln_fwd},
    [R_layernorm_backward] = {ROOF_BACKWARD, cost_ln_bwd},
    [R_matmul_forward] = {ROOF_FORWARD, cost_mm_fwd},
    [R_matmul_backward] = {ROOF_BACKWARD, cost_mm_bwd},
    [R_attention_forward] = {ROOF_FORWARD, cost_att_fwd},
    [R_attention_backward] = {ROOF_BACKWARD, cost_att_bwd},
    [R_gelu_forward] = {ROOF_FORWARD, cost_pointwise},
    [R_gelu_backward] = {ROOF_BACKWARD, cost_pointwise},
    [R_tanh_forward] = {ROOF_FORWARD, cost_pointwise},
    [R_tanh_backward] = {ROOF_BACKWARD, cost_pointwise},
    [R_dropout_residual_forward] = {ROOF_FORWARD, cost_dropres_fwd},
    [R_dropout_backward] = {ROOF_BACKWARD, cost_drop_bwd},
    [R_gather_rows_forward] = {ROOF_FORWARD, cost_gather_fwd},
    [R_gather_rows_backward] = {ROOF_BACKWARD, cost_gather_bwd},
    [R_crossentropy_forward] = {ROOF_FORWARD, cost_ce_fwd},
    [R_crossentropy_backward] = {ROOF_BACKWARD, cost_ce_bwd},
    [R_lamb_step] = {ROOF_OPTIMIZER, cost_lamb},
    [R_lars_step] = {ROOF_OPTIMIZER, cost_lars},
    [R_adamw_step] = {ROOF_OPTIMIZER, cost_adamw},
    [R_params_to_compute] = {ROOF_OPTIMIZER, cost_to_compute},
    [R_zero] = {ROOF_OPTIMIZER, cost_zero},
    [R_upload] = {-1, cost_transfer},
    [R_download] = {-1, cost_transfer},
    [R_residual_dropout_layernorm_forward] = {ROOF_FORWARD, cost_rdln_fwd},
    [R_layernorm_dropout_backward] = {ROOF_BACKWARD, cost_lndrop_bwd},
    [R_bias_gelu_forward] = {ROOF_FORWARD, cost_bgelu_fwd},
    [R_bias_gelu_backward] = {ROOF_BACKWARD, cost_bgelu_bwd},
    [R_matmul_bias_gelu_forward] = {ROOF_FORWARD, cost_mm_gelu_fwd},
    [R_matmul_dgelu_backward] = {ROOF_BACKWARD, cost_mm_dgelu_bwd},
};

static void time_launch(roofline_launch *l, const gpu_spec *gpu, const roofline_options *o) {
    double t_flops = l->flops / (gpu->tflops * 1e12 * o->gemm_eff);
    double t_bytes = l->bytes / (gpu->dram_gbs * 1e9 * o->dram_eff);
    double t_instr = l->instructions / ((double)gpu->sms * INSTR_PER_SM_CLOCK * gpu->clock_mhz * 1e6);
    double t_host = l->host_syncs * o->sync_us * 1e-6;
    l->time_s = fmax(fmax(t_flops, t_bytes), fmax(t_instr, t_host));
    l->bound = t_host > 0 ? BOUND_HOST : l->time_s == t_flops && t_flops > 0 ? BOUND_COMPUTE
             : l->time_s == t_instr && t_instr > 0 ? BOUND_INSTRUCTIONS : BOUND_MEMORY;
}

// Drives one training step (forward, backward, optimizer) of a B x T micro-batch with every
// token real and all P masked positions present through the recording backend; returns its
// records (allocation excluded) in a new array of *n.
static record *record_step(const bert_config *cfg, int B, int T, int P, roofline_options opt, int *n) {
    memset(&rec, 0, sizeof rec);
    rec.next_address = (uintptr_t)1 << 32;
    backend_t be = recording_backend(opt.act_size);
    batch_t batch = {.B = B, .T = T, .P = P};
    batch.input_ids = xcalloc((size_t)B * T, sizeof(int));
    batch.input_mask = xcalloc((size_t)B * T, sizeof(int));
    batch.segment_ids = xcalloc((size_t)B * T, sizeof(int));
    batch.masked_lm_positions = xcalloc((size_t)B * P, sizeof(int));
    batch.masked_lm_ids = xcalloc((size_t)B * P, sizeof(int));
    batch.next_sentence_labels = xcalloc((size_t)B, sizeof(int));
    for (int i = 0; i < B * T; i++) batch.input_mask[i] = 1;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < P; p++) batch.masked_lm_positions[b * P + p] = 1 + p;

    bert_model m;
    bert_init(&m, cfg, &be, B, T, P);
    optim_state opt_state;
    optim_init(&opt_state, opt.optimizer, &be, m.n_params);
    loss_scaler scaler;
    loss_scaler_init(&scaler, 0, 1.0, 2000, 1.0, 1);
    int first = rec.n;  // allocation is not part of a step
    train_step(&m, &opt_state, &scaler, &batch, 1, 1e-3, 1, 1, 0);
    optim_free(&opt_state);
    bert_free(&m);
    free(batch.input_ids), free(batch.input_mask), free(batch.segment_ids);
    free(batch.masked_lm_positions), free(batch.masked_lm_ids), free(batch.next_sentence_labels);
    *n = rec.n - first;
    record *out = xcalloc((size_t)(*n > 0 ? *n : 1), sizeof(record));
    memcpy(out, rec.list + first, (size_t)*n * sizeof(record));
    free(rec.list);
    memset(&rec, 0, sizeof rec);
    return out;
}

// What the unpadded costing needs: per record, which arguments count tokens (they grow with
// T), the real-token fraction and the length distribution.
typedef struct {
    const unsigned char *token_args;  // per record, bit k: argument k counts tokens
    double fraction;                  // mean length / T
    const roofline_lengths *h;
    int B;
} unpad_ctx;

// Attention over each sequence's own length: the launches of one sequence of length L,
// weighted by the micro-batch's expected count of such sequences (B x share of L), summed
// into one launch per kernel (a varlen kernel is one launch over the whole micro-batch).
static void cost_attention_unpadded(cost_ctx *c, const unpad_ctx *u) {
    roofline_result *r = c->r;
    int before = r->n_launches;
    for (int L = 1; L <= u->h->T; L++) {
        if (!u->h->count[L]) continue;
        c->n[0] = 1, c->n[1] = L;
        c->weight = (double)u->B * (double)u->h->count[L] / (double)u->h->rows;
        cost_table[c->rec->op].cost(c);
    }
    int kept = before;
    for (int i = before; i < r->n_launches; i++) {
        int k = before;
        while (k < kept && strcmp(r->launches[k].kernel, r->launches[i].kernel)) k++;
        if (k == kept) {
            r->launches[kept++] = r->launches[i];
            snprintf(r->launches[k].shape, sizeof r->launches[k].shape, "B=%d T<=%d C=%ld NH=%ld", u->B, u->h->T,
                     c->rec->n[2], c->rec->n[3]);
            continue;
        }
        r->launches[k].flops += r->launches[i].flops;
        r->launches[k].bytes += r->launches[i].bytes;
        r->launches[k].instructions += r->launches[i].instructions;
        r->launches[k].host_syncs += r->launches[i].host_syncs;
    }
    r->n_launches = kept;
}

// Costs the recorded step: the micro-batch (forward, backward and their transfers), then the
// optimizer step. With u, as the unpadded micro-batch (see roofline_run_unpadded).
static void cost_records(roofline_result *r, const record *list, int n, const unpad_ctx *u) {
    for (int i = 0; i < R_COUNT; i++)
        CHECK(cost_table[i].cost, "roofline: backend op %s has no entry in cost_table", op_names[i]);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) r->n_micro = r->n_launches;
        for (int i = 0; i < n; i++) {
            const record *x = &list[i];
            // An upload belongs to the op after it (the forward's inputs), a download to the op
            // before it (the forward's losses).
            int phase = cost_table[x->op].phase, step = x->op == R_download ? -1 : 1;
            for (int k = i; phase < 0 && k >= 0 && k < n; k += step) phase = cost_table[list[k].op].phase;
            if (phase < 0) phase = ROOF_OPTIMIZER;
            if ((pass == 0) != (phase != ROOF_OPTIMIZER)) continue;
            cost_ctx c = {.r = r, .rec = x, .weight = 1.0, .A = (double)r->opt.act_size,
                          .baseline = r->opt.baseline, .clusters = r->gpu->clusters, .phase = phase};
            for (int k = 0; k < 6; k++)
                c.n[k] = (double)x->n[k] * (u && (u->token_args[i] >> k & 1) ? u->fraction : 1.0);
            int before = r->n_launches;
            if (u && (x->op == R_attention_forward || x->op == R_attention_backward)) cost_attention_unpadded(&c, u);
            else cost_table[x->op].cost(&c);
            for (int k = before; k < r->n_launches; k++) {
                r->launches[k].op = op_names[x->op];
                time_launch(&r->launches[k], r->gpu, &r->opt);
            }
        }
    }
}

static void result_init(roofline_result *r, int B, int T, int P, int accumulation, const gpu_spec *gpu,
                        roofline_options opt) {
    memset(r, 0, sizeof *r);
    r->gpu = gpu;
    r->opt = opt;
    r->B = B, r->T = T, r->P = P, r->R = B * P;
    r->accumulation = accumulation;
    r->layout = "padded";
}

void roofline_run(roofline_result *r, const bert_config *cfg, int B, int T, int P, int accumulation,
                  const gpu_spec *gpu, roofline_options opt) {
    result_init(r, B, T, P, accumulation, gpu, opt);
    int n;
    record *list = record_step(cfg, B, T, P, opt, &n);
    cost_records(r, list, n, NULL);
    free(list);
    r->model_flops = model_flops(cfg, B, T, (long)B * P);
    r->real_tokens = (double)B * T;
    r->real_model_flops = r->model_flops;
}

double roofline_lengths_mean(const roofline_lengths *h, int power) {
    double sum = 0.0;
    for (int L = 0; L <= h->T; L++) sum += (double)h->count[L] * (power == 2 ? (double)L * L : (double)L);
    return sum / (double)h->rows;
}

// Model FLOPs of a micro-batch of B sequences with the lengths of h (the same formula per
// sequence, at its own length) and all B x P masked positions.
static double real_model_flops(const bert_config *cfg, int B, int P, const roofline_lengths *h) {
    double f = model_flops(cfg, 0, h->T, (long)B * P);
    for (int L = 1; L <= h->T; L++)
        if (h->count[L]) f += (double)B * (double)h->count[L] / (double)h->rows * model_flops(cfg, 1, L, 0);
    return f;
}

void roofline_run_unpadded(roofline_result *r, const bert_config *cfg, int B, int T, int P, int accumulation,
                           const gpu_spec *gpu, roofline_options opt, const roofline_lengths *h) {
    CHECK(h->T == T && h->rows > 0, "roofline: a length distribution for T = %d with %ld rows, for seq %d", h->T,
          h->rows, T);
    result_init(r, B, T, P, accumulation, gpu, opt);
    r->layout = "unpadded";
    // Which arguments count tokens: those that change when the step is recorded at T + 1
    // (each must scale with T exactly); the rest (masked positions, the pooler's B rows, the
    // weights, the optimizer) do not shrink.
    int n, n1;
    record *list = record_step(cfg, B, T, P, opt, &n), *grown = record_step(cfg, B, T + 1, P, opt, &n1);
    CHECK(n == n1, "roofline: %d ops recorded at seq %d, %d at seq %d", n, T, n1, T + 1);
    unsigned char *token_args = xcalloc((size_t)(n > 0 ? n : 1), 1);
    for (int i = 0; i < n; i++) {
        CHECK(list[i].op == grown[i].op, "roofline: op %d differs between seq %d and %d", i, T, T + 1);
        for (int k = 0; k < 6; k++) {
            if (list[i].n[k] == grown[i].n[k]) continue;
            CHECK(list[i].n[k] * (T + 1) == grown[i].n[k] * T,
                  "roofline: argument %d of %s is %ld at seq %d and %ld at seq %d: not a token count", k,
                  op_names[list[i].op], list[i].n[k], T, grown[i].n[k], T + 1);
            token_args[i] |= (unsigned char)(1u << k);
        }
    }
    double mean = roofline_lengths_mean(h, 1);
    unpad_ctx u = {.token_args = token_args, .fraction = mean / T, .h = h, .B = B};
    cost_records(r, list, n, &u);
    free(token_args), free(list), free(grown);
    r->model_flops = model_flops(cfg, B, T, (long)B * P);
    r->real_tokens = B * mean;
    r->real_model_flops = real_model_flops(cfg, B, P, h);
}

void roofline_free(roofline_result *r) {
    free(r->launches);
    memset(r, 0, sizeof *r);
}

roofline_totals roofline_sum(const roofline_result *r, int first, int last) {
    roofline_totals t = {0};
    for (int i = first; i < last; i++) {
        const roofline_launch *l = &r->launches[i];
        t.flops += l->flops;
        t.bytes += l->bytes;
        t.time_s += l->time_s;
        t.host_syncs += l->host_syncs;
        if (l->gemm) {
            t.gemm_flops += l->flops;
            t.gemm_bytes += l->bytes;
            t.gemm_time_s += l->time_s;
        }
        if (!l->host_syncs) t.launches++;
    }
    return t;
}

static const char *phase_name(int phase) {
    return phase == ROOF_FORWARD ? "fwd" : phase == ROOF_BACKWARD ? "bwd" : "opt";
}

static void print_launch(const roofline_launch *l, int count, int tsv, const char *layout, FILE *out) {
    if (tsv) {
        fprintf(out, "%s\t%s\t%s\t%d\t%s\t%.17g\t%.17g\t%.17g\t%d\t%.17g\t%c\t%s\n", phase_name(l->phase), l->op,
                l->kernel, count, l->shape, l->flops, l->bytes, l->instructions, l->host_syncs, l->time_s, l->bound,
                layout);
        return;
    }
    char instr[32] = "-";
    if (l->instructions > 0) snprintf(instr, sizeof instr, "%.3f", l->instructions * 1e-9);
    fprintf(out, "%-4s %-26s %-34s %5d %-30s %11.3f %11.3f %9s %11.1f   %c\n", phase_name(l->phase), l->op,
            l->kernel, count, l->shape, l->flops * 1e-9, l->bytes * 1e-6, instr, l->time_s * 1e6, l->bound);
}

void roofline_print(const roofline_result *r, int by_kernel, int tsv, FILE *out) {
    const gpu_spec *g = r->gpu;
    const roofline_options *o = &r->opt;
    roofline_totals mb = roofline_sum(r, 0, r->n_micro), op = roofline_sum(r, r->n_micro, r->n_launches);
    double step = r->accumulation * mb.time_s + op.time_s;
    double seqs = (double)r->accumulation * r->B;
    double mfu = r->accumulation * r->model_flops / step / (g->tflops * 1e12);
    if (tsv) {
        fprintf(out, "phase\top\tlaunch\tcount\tshape\tflops\tbytes\tinstructions\thost_syncs\ttime_s\tbound\t"
                     "layout\n");
        for (int i = 0; i < r->n_launches; i++) print_launch(&r->launches[i], 1, 1, r->layout, out);
        fprintf(out, "# gpu\t%s\t%.17g\t%.17g\n", g->key, g->tflops * 1e12, g->dram_gbs * 1e9);
        fprintf(out, "# micro_batch\t%d\t%d\t%d\t%d\n", r->B, r->T, r->P, r->accumulation);
        fprintf(out, "# model_flops\t%.17g\n", r->model_flops);
        fprintf(out, "# micro_batch_time_s\t%.17g\n# optimizer_time_s\t%.17g\n# step_time_s\t%.17g\n", mb.time_s,
                op.time_s, step);
        fprintf(out, "# sequences_per_s\t%.17g\n# mfu\t%.17g\n", seqs / step, mfu);
        return;
    }
    fprintf(out, "roofline model: %s (dense FP16 %.1f TFLOP/s, HBM %.0f GB/s, %d SMs at %.0f MHz)\n", g->name,
            g->tflops, g->dram_gbs, g->sms, g->clock_mhz);
    fprintf(out, "efficiencies: GEMMs %.0f%% of the tensor peak, streaming kernels %.0f%% of DRAM bandwidth; "
                 "host round trip %.1f us; kernels: %s\n",
            o->gemm_eff * 100, o->dram_eff * 100, o->sync_us, o->baseline ? "baseline (the unfused kernels the fused ones replaced)" : "current");
    fprintf(out, "micro-batch %d x seq %d, %d masked positions (all %d per sequence), activations %zu bytes\n", r->B,
            r->T, r->R, r->P, o->act_size);
    fprintf(out, "bound: C compute (tensor cores), M memory (DRAM bytes), I instructions, H host round trip\n\n");
    fprintf(out, "%-4s %-26s %-34s %5s %-30s %11s %11s %9s %11s   %s\n", "", "op", "launch", "count", "shape",
            "GFLOP", "MB", "Ginstr", "time (us)", "bound");
    if (!by_kernel) {
        for (int i = 0; i < r->n_launches; i++) print_launch(&r->launches[i], 1, 0, r->layout, out);
    } else {
        // One line per (phase, op, launch, shape), in order of first appearance.
        int *done = xcalloc(r->n_launches, sizeof(int));
        for (int i = 0; i < r->n_launches; i++) {
            if (done[i]) continue;
            roofline_launch sum = r->launches[i];
            int count = 1;
            for (int j = i + 1; j < r->n_launches; j++) {
                const roofline_launch *l = &r->launches[j];
                if (done[j] || l->phase != sum.phase || strcmp(l->op, sum.op) || strcmp(l->kernel, sum.kernel) ||
                    strcmp(l->shape, sum.shape))
                    continue;
                done[j] = 1;
                count++;
                sum.flops += l->flops, sum.bytes += l->bytes, sum.instructions += l->instructions;
                sum.time_s += l->time_s;
            }
            print_launch(&sum, count, 0, r->layout, out);
        }
        free(done);
    }
    fprintf(out, "\nmicro-batch: %d launches, %d host round trips, %.1f GFLOP on tensor cores (model %.1f), %.1f MB "
                 "DRAM (%.1f MB in tensor-core launches, %.1f MB in the rest), %.3f ms (tensor-core launches %.3f ms, "
                 "%.0f%%)\n",
            mb.launches, mb.host_syncs, mb.gemm_flops * 1e-9, r->model_flops * 1e-9, mb.bytes * 1e-6,
            mb.gemm_bytes * 1e-6, (mb.bytes - mb.gemm_bytes) * 1e-6, mb.time_s * 1e3, mb.gemm_time_s * 1e3,
            mb.time_s > 0 ? 100 * mb.gemm_time_s / mb.time_s : 0.0);
    fprintf(out, "optimizer step: %d launches, %d host round trips, %.1f MB DRAM, %.3f ms\n", op.launches,
            op.host_syncs, op.bytes * 1e-6, op.time_s * 1e3);
    fprintf(out, "step (%d accumulated micro-batches + optimizer): %.3f ms predicted, %.1f sequences/s, MFU %.1f%%\n",
            r->accumulation, step * 1e3, seqs / step, 100 * mfu);
}

// Predicted step of r: accumulation micro-batches and the optimizer.
static double step_time(const roofline_result *r) {
    return r->accumulation * roofline_sum(r, 0, r->n_micro).time_s + roofline_sum(r, r->n_micro, r->n_launches).time_s;
}

void roofline_print_gelu_forms(const roofline_result *r, const char *act, const roofline_result *other,
                               const char *other_act, int tsv, FILE *out) {
    const roofline_result *both[2] = {r, other};
    const char *names[2] = {act, other_act};
    if (!tsv) fprintf(out, "\nGELU forms (the exact one on the streaming kernels, the tanh one in the FFN GEMMs' epilogues):\n");
    for (int i = 0; i < 2; i++) {
        const roofline_result *x = both[i];
        roofline_totals mb = roofline_sum(x, 0, x->n_micro);
        double step = step_time(x), seqs = (double)x->accumulation * x->B;
        double mfu = x->accumulation * x->model_flops / step / (x->gpu->tflops * 1e12);
        if (tsv)
            fprintf(out, "# gelu_form\t%s\t%.17g\t%.17g\t%.17g\t%.17g\n", names[i], mb.bytes, step, seqs / step, mfu);
        else
            fprintf(out, "  hidden_act %-18s micro-batch %.1f MB DRAM, step %.3f ms predicted, %.1f sequences/s, MFU %.1f%%\n",
                    names[i], mb.bytes * 1e-6, step * 1e3, seqs / step, 100 * mfu);
    }
}

void roofline_print_unpadded(const roofline_result *p, const roofline_result *u, const roofline_lengths *h, int tsv,
                             FILE *out) {
    double mean = roofline_lengths_mean(h, 1), mean_sq = roofline_lengths_mean(h, 2), T = h->T;
    const double peak = p->gpu->tflops * 1e12;
    const roofline_result *both[2] = {p, u};
    double step[2], seqs = (double)p->accumulation * p->B;
    for (int k = 0; k < 2; k++) step[k] = step_time(both[k]);
    if (tsv) {
        for (int i = 0; i < u->n_launches; i++) print_launch(&u->launches[i], 1, 1, u->layout, out);
        roofline_totals mb = roofline_sum(u, 0, u->n_micro), op = roofline_sum(u, u->n_micro, u->n_launches);
        fprintf(out, "# lengths\t%ld\t%.17g\t%.17g\n", h->rows, mean, mean_sq);
        fprintf(out, "# unpadded_real_tokens\t%.17g\n# unpadded_real_model_flops\t%.17g\n", u->real_tokens,
                u->real_model_flops);
        fprintf(out, "# unpadded_micro_batch_time_s\t%.17g\n# unpadded_optimizer_time_s\t%.17g\n"
                     "# unpadded_step_time_s\t%.17g\n", mb.time_s, op.time_s, step[1]);
        fprintf(out, "# unpadded_sequences_per_s\t%.17g\n# unpadded_real_mfu\t%.17g\n# padded_real_mfu\t%.17g\n",
                seqs / step[1], p->accumulation * u->real_model_flops / step[1] / peak,
                p->accumulation * u->real_model_flops / step[0] / peak);
        return;
    }
    fprintf(out, "\nlengths: %ld rows, mean %.2f of %d (real-token fraction %.4f: token-wise ops scale by it), "
                 "mean square %.1f (attention scales by %.4f)\n",
            h->rows, mean, h->T, mean / T, mean_sq, mean_sq / (T * T));
    fprintf(out, "unpadded micro-batch: %.1f real tokens of %d x %d; the MLM head (%d masked positions), the "
                 "pooler, the transfers and the optimizer do not shrink\n\n",
            u->real_tokens, p->B, p->T, p->R);
    fprintf(out, "%-4s %-36s %12s %12s %7s\n", "", "op", "padded (ms)", "unpadded (ms)", "ratio");
    // Per (phase, op) in order of first appearance; both layouts cost the same ops in the same order.
    for (int i = 0; i < p->n_micro; i++) {
        const roofline_launch *l = &p->launches[i];
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = p->launches[j].phase == l->phase && !strcmp(p->launches[j].op, l->op);
        if (seen) continue;
        double t[2] = {0.0, 0.0};
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < both[k]->n_micro; j++)
                if (both[k]->launches[j].phase == l->phase && !strcmp(both[k]->launches[j].op, l->op))
                    t[k] += both[k]->launches[j].time_s;
        fprintf(out, "%-4s %-36s %12.3f %12.3f %7.3f\n", phase_name(l->phase), l->op, t[0] * 1e3, t[1] * 1e3,
                t[0] > 0 ? t[1] / t[0] : 1.0);
    }
    fprintf(out, "\n%-44s %14s %14s\n", "", "padded", "unpadded");
    roofline_totals m[2], o[2];
    for (int k = 0; k < 2; k++) {
        m[k] = roofline_sum(both[k], 0, both[k]->n_micro);
        o[k] = roofline_sum(both[k], both[k]->n_micro, both[k]->n_launches);
    }
    fprintf(out, "%-44s %14.1f %14.1f\n", "tokens computed per micro-batch", (double)p->B * p->T, u->real_tokens);
    fprintf(out, "%-44s %14.1f %14.1f\n", "tensor-core GFLOP per micro-batch", m[0].gemm_flops * 1e-9,
            m[1].gemm_flops * 1e-9);
    fprintf(out, "%-44s %14.1f %14.1f\n", "DRAM MB per micro-batch", m[0].bytes * 1e-6, m[1].bytes * 1e-6);
    fprintf(out, "%-44s %14.3f %14.3f\n", "micro-batch (ms)", m[0].time_s * 1e3, m[1].time_s * 1e3);
    fprintf(out, "%-44s %14.3f %14.3f\n", "optimizer step (ms)", o[0].time_s * 1e3, o[1].time_s * 1e3);
    char label[64];
    snprintf(label, sizeof label, "step of %d micro-batches + optimizer (ms)", p->accumulation);
    fprintf(out, "%-44s %14.3f %14.3f\n", label, step[0] * 1e3, step[1] * 1e3);
    fprintf(out, "%-44s %14.1f %14.1f\n", "sequences/s", seqs / step[0], seqs / step[1]);
    fprintf(out, "%-44s %14.0f %14.0f\n", "real tokens/s", p->accumulation * u->real_tokens / step[0],
            p->accumulation * u->real_tokens / step[1]);
    fprintf(out, "%-44s %13.1f%% %13.1f%%\n", "MFU on real tokens", 100 * p->accumulation * u->real_model_flops / step[0] / peak,
            100 * p->accumulation * u->real_model_flops / step[1] / peak);
    fprintf(out, "unpadded: %.3fx the padded sequences/s predicted (1 / real-token fraction = %.3fx)\n",
            step[0] / step[1], T / mean);
}
