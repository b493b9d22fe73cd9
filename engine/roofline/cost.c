// The cost of each backend op (roofline_parts.h): the launches the CUDA backend makes for it,
// or with opt.baseline those of the unfused kernels the fused ones replaced, each with its
// FLOPs, DRAM bytes, instructions and host round trips.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "engine/roofline/roofline_parts.h"
#include "kernels/common/check.h"
#include "sass_budgets.h"

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
    case R_adamw_step:
    case R_stableadamw_step: snprintf(l->shape, sizeof l->shape, "n=%s tensors=%s", v[0], v[1]); break;
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
// add: dinp_add read beside dout (a residual's other gradient summed in the same pass).
static void ln_backward(cost_ctx *c, double N, double C, int fused_dropout, int dropout, int add) {
    double A = c->A, chunks = column_chunks(N);
    double dinp_bytes = (fused_dropout ? 4 : 3) * N * C * A + C * A + 2 * N * 4 + (add ? N * C * A : 0.0);
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

// flag_b: BERT's position and token-type tables (ModernBERT has the word table alone).
static void cost_emb_fwd(cost_ctx *c) {
    double N = c->n[0], T = c->n[1], C = c->n[2], A = c->A;
    emit(c, "embeddings_forward", 0.0, N * C * A * 2 + (c->rec->flag_b ? T * C * A + 2 * C * A + 2 * N * 4 : N * 4),
         0.0);
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
    // dout seen as [B, T*C] (padded) or scattered too (unpadded rows); without those tables
    // the word rows alone.
    scatter(c, "scatter_pieces (word)", N, C, N, 4);
    if (!c->rec->flag_b) return;
    if (c->rec->flag_a)
        scatter(c, "scatter_pieces (position)", N, C, T, 4);
    else
        column_sums(c, "column_partials (position)", B, T * C);
    scatter(c, "scatter_pieces (token type)", N, C, 2, 4);
}
static void cost_ln_fwd(cost_ctx *c) { ln_forward(c, c->n[0], c->n[1]); }
static void cost_ln_bwd(cost_ctx *c) { ln_backward(c, c->n[0], c->n[1], 0, 0, c->rec->flag_a); }
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
        ln_backward(c, N, C, 0, 0, 0);
        dropout_backward(c, N * C, c->rec->flag_a);
        return;
    }
    ln_backward(c, N, C, 1, c->rec->flag_a, 0);
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
// The weight gradient's GEMM, and the bias gradient: the column sums' own pass over dout, or
// (bias_grad_epilogue) the GEMM's BGRADB epilogue summing dout as it reads it, which writes
// an FP32 vector that one small launch adds (no bytes of dout again; the epilogue's own
// cost inside the GEMM is unknown here: priced as nothing).
static void weight_grads(cost_ctx *c, double N, double IC, double OC) {
    double A = c->A;
    if (c->rec->flag_b && c->bias_grad_epilogue) {
        gemm(c, "gemm (dweight, BGRADB)", IC, OC, N, 1, N * IC * A, N * OC * A, 2 * OC * IC * 4 + OC * 4);
        emit(c, "column_partials (bias gradient)", 0.0, OC * 4 + OC * 4, 0.0);
        emit(c, "add_partials", 0.0, OC * 4 + 2 * OC * 4, 0.0);
        return;
    }
    gemm(c, "gemm (dweight)", IC, OC, N, 1, N * IC * A, N * OC * A, 2 * OC * IC * 4);
    if (c->rec->flag_b) column_sums(c, "column_partials", N, OC);
}
static void cost_mm_bwd(cost_ctx *c) {
    double N = c->n[0], IC = c->n[1], OC = c->n[2], A = c->A;
    int add = c->rec->flag_a;  // 0 none, 1 in place (beta = 1), 2 another buffer
    // The baseline copied a separate dinp_add into dinp first; now it is the GEMM's C input.
    if (add == 2 && c->baseline) emit(c, "copy (dinp_add)", 0.0, 2 * N * IC * A, 0.0);
    gemm(c, "gemm (dinp)", N, IC, OC, 1, OC * IC * A, N * OC * A, N * IC * A * (add ? 2 : 1));
    weight_grads(c, N, IC, OC);
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
    weight_grads(c, N, IC, OC);
}

// The fused tensor-core attention (flash_attention.cu) takes FP16/BF16 with head sizes 32,
// 64 and 128 at any T; the rest (and the baseline) the GEMM path of attention.cu. Up to T =
// 512 (a cluster of 8 blocks of 64 keys, the launch's padded T) its forward records the
// dropout decisions for the backward, which is one kernel where the GPU launches clusters;
// past that the split kernels run and draw the decisions again.
static int flash_attention(const cost_ctx *c) {
    long HS = c->rec->n[2] / c->rec->n[3];
    return !c->baseline && c->A == 2 && (HS == 32 || HS == 64 || HS == 128);
}
static int flash_short(const cost_ctx *c) { return c->rec->n[1] <= 512; }
// The (query, key) pairs the fused kernels compute for a sequence of L tokens: those of the
// key tiles each block of 64 queries takes, L^2 without a window; with one (window > 0), the
// tiles fa_window_tiles picks (a tile partly outside the window is computed whole and masked).
static double flash_pairs(double L, long window) {
    if (window <= 0) return L * L;
    double pairs = 0.0;
    long n = (long)ceil(L);
    for (long a0 = 0; a0 < n; a0 += 64) {
        long lo = a0 - window > 0 ? a0 - window : 0, hi = a0 + 63 + window < n - 1 ? a0 + 63 + window : n - 1;
        double first = (double)(lo / 64 * 64), end = (double)((hi / 64 + 1) * 64);
        pairs += fmin(L - (double)a0, 64.0) * (fmin(L, end) - first);
    }
    return pairs;
}
// The fused attention's draws for n scores: one Philox call per eight keys of a row (a
// lane's four calls per 16 x 64 tile) when every row starts on a group of eight (T % 8 ==
// 0), else one per pair of keys a lane holds.
static double flash_philox(const cost_ctx *c, double n, long T) { return philox_per(c, n, T % 8 == 0 ? 8.0 : 2.0); }

// Warp instructions of the fused attention kernels per warp, from their sm_90 SASS (counted,
// not measured; docs/PERFORMANCE.md tabulates them and says how they were counted). Loop
// bodies per 16 x 64 tile: the forward's four, dropout on / off and a tile without padding
// keys / a sequence's last, counted at head size 64 against a loop body of 1,236 and scaled
// by the forward kernel's largest loop body in budgets.tsv; the split backward's dq loop and
// dk/dv outer loop + second half; the one-kernel backward's loop with one pass of its dq sum,
// and that sum's body alone. Outside the loops: the backward kernels' totals less their loop
// bodies, and the forward's fixed estimate of 450. Every other figure is a budget of
// kernels/cuda/budgets.tsv (sass_budgets.h), so a kernel whose count changes moves the model.
typedef struct {
    double fwd_tile, fwd_last, fwd_nodrop_tile, fwd_nodrop_last, fwd_outside;
    double bwd_q, bwd_kv_outer, bwd_kv_half, fused, fused_dq_sum;  // loop bodies
    double bwd_q_outside, bwd_kv, bwd_kv_outside, fused_outside;   // with the kernels' totals
} flash_counts;

// A kernel's budgeted SASS: what = 0 the whole kernel, 1 and 2 its largest and second-largest
// loop bodies.
static double budget_sass(const char *kernel, int what) {
    for (size_t i = 0; i < sizeof sass_budgets / sizeof sass_budgets[0]; i++)
        if (!strcmp(sass_budgets[i].kernel, kernel))
            return what == 0 ? sass_budgets[i].sass : what == 1 ? sass_budgets[i].loop1 : sass_budgets[i].loop2;
    CHECK(0, "kernel %s has no row in kernels/cuda/budgets.tsv", kernel);
    return 0.0;
}
// The FP16 instance of a kernel at head size hs, windowed or not, and for the split backward's
// kernels drawing the dropout again or not (redraw < 0: a kernel without that choice).
static double flash_budget(const char *kernel, int hs, int win, int redraw, int what) {
    char name[96];
    snprintf(name, sizeof name, "flash_%s_kernel<__half, %d, %s%s>", kernel, hs, win ? "true" : "false",
             redraw < 0 ? "" : redraw ? ", true" : ", false");
    return budget_sass(name, what);
}

// The counts at head size HS (64's for a size without fused kernels), of the windowed
// instances or not, and of the split backward that draws again or not.
static flash_counts flash_count(double HS, int win, int redraw) {
    int hs = HS == 32 || HS == 128 ? (int)HS : 64;
    double body = flash_budget("forward", hs, win, -1, 1), counted = 1236;  // head size 64's when counted
    flash_counts k = {.fwd_tile = 842 * body / counted, .fwd_last = 908 * body / counted,
                      .fwd_nodrop_tile = 447 * body / counted, .fwd_nodrop_last = 512 * body / counted,
                      .fwd_outside = 450};
    k.bwd_q = flash_budget("backward_q", hs, win, redraw, 1);
    k.bwd_kv_outer = flash_budget("backward_kv", hs, win, redraw, 1);
    k.bwd_kv_half = flash_budget("backward_kv", hs, win, redraw, 2);
    k.fused = flash_budget("backward_fused", hs, win, -1, 1);
    k.fused_dq_sum = flash_budget("backward_fused", hs, win, -1, 2);
    k.bwd_q_outside = flash_budget("backward_q", hs, win, redraw, 0) - k.bwd_q;
    k.bwd_kv = k.bwd_kv_outer + k.bwd_kv_half;
    k.bwd_kv_outside = flash_budget("backward_kv", hs, win, redraw, 0) - k.bwd_kv_outer;
    k.fused_outside = flash_budget("backward_fused", hs, win, -1, 0) - k.fused;
    CHECK(k.bwd_q > 0 && k.bwd_kv_half > 0 && k.fused_dq_sum > 0 && k.bwd_q_outside > 0 && k.bwd_kv_outside > 0 &&
              k.fused_outside > 0,
          "the flash kernels' loop bodies at head size %d in kernels/cuda/budgets.tsv are missing or exceed their "
          "kernels' totals (tools/kernel_budgets.py loops flash_ lists them)", hs);
    return k;
}
// The warp-tiles of BH heads computing `pairs` (query, key) pairs each (16 x 64 a warp's
// tile) and the warps at length T (4 warps per 64 rows; a launch's thread instructions are 32
// per warp instruction), fractions of a tile included: the model's assumption that the
// kernels waste nothing on tiles a sequence fills only partly.
static double flash_warp_tiles(double BH, double pairs) { return BH * pairs / (16.0 * 64.0); }
static double flash_warps(double BH, double T) { return BH * (T / 16); }

// Per element: four 64-bit divisions and the rest of the index arithmetic.
static double permute_instructions(void) { return INSTR_DIV64 * 4 + 16; }

static void cost_att_fwd(cost_ctx *c) {
    double B = c->n[0], T = c->n[1], C = c->n[2], NH = c->n[3], A = c->A;
    double HS = C / NH, NC = B * T * C, BH = B * NH, TT = T * T, drop = c->rec->flag_a;
    if (flash_attention(c)) {
        // Q K^T and P V on tensor cores from the QKV GEMM's layout, online softmax in FP32,
        // dropout drawn in the kernel and its decisions written as bits for the backward (T <=
        // 512), a per-row FP32 log-sum-exp. Instructions: the SASS counts above, each warp's
        // last key tile with the padding select (with a window every tile has the select, and
        // only the tiles the window reaches are taken); where T % 8 != 0, the extra Philox
        // calls of drawing per pair of keys.
        long window = c->rec->n[4];
        const flash_counts kc = flash_count(HS, window > 0, 0), *k = &kc;
        double keep_bits = drop && flash_short(c) ? BH * T * attention_keep_words((int)T) * 4 : 0.0;
        double pairs = flash_pairs(T, window), warp_tiles = flash_warp_tiles(BH, pairs), warps = flash_warps(BH, T);
        double tile = drop ? k->fwd_tile : k->fwd_nodrop_tile, last = drop ? k->fwd_last : k->fwd_nodrop_last;
        double warp_instr = warps * k->fwd_outside +
                            (window > 0 ? warp_tiles * last : warp_tiles * tile + warps * fmin(T / 64, 1.0) * (last - tile));
        double extra_draws = drop && c->rec->n[1] % 8 ? flash_philox(c, BH * pairs, c->rec->n[1]) - philox_per(c, BH * pairs, 8.0) : 0.0;
        emit(c, "flash_forward", 4.0 * BH * pairs * HS, 3 * NC * A + NC * A + BH * T * 4 + B * T * 4 + keep_bits,
             32 * warp_instr + extra_draws);
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
        long window = c->rec->n[4];
        int redraw = drop && !flash_short(c);
        const flash_counts kc = flash_count(HS, window > 0, redraw), *k = &kc;
        double keep_bits = drop && flash_short(c) ? BH * T * attention_keep_words((int)T) * 4 : 0.0;
        if (c->clusters && flash_short(c)) {
            // One kernel (GPUs with thread-block clusters): a cluster of T / 64 blocks per
            // (sequence, head), block j its 64 keys; delta in the prologue (dout and out read
            // once), then per query tile S, dP, dS and the dq partial (16 queries x 64 keys
            // per warp), dv and dk in registers (16 keys x 64 queries per warp): five
            // products; dq summed across the cluster through distributed shared memory, 16 HS
            // float4 columns per query tile: HS / 2 passes of the sum's body per query tile in
            // all, one of which the loop body's count holds per warp and tile. Reads q, k, v,
            // out, dout, the log-sum-exp and the keep bits; writes dq, dk, dv (delta stays on
            // chip). With a window a key block computes only the query tiles that reach it (the
            // pairs flash_pairs counts; the relation is symmetric), masked; every tile is still
            // loaded and every block keeps the cluster's barriers.
            double n = T / 64, pairs = flash_pairs(T, window);
            double warp_instr = flash_warp_tiles(BH, pairs) * (k->fused - k->fused_dq_sum) +
                                BH * n * (HS / 2) * k->fused_dq_sum + flash_warps(BH, T) * k->fused_outside;
            emit(c, "flash_backward_fused", 10.0 * BH * pairs * HS,
                 5 * NC * A + BH * T * 4 + B * T * 4 + keep_bits + 3 * NC * A, 32 * warp_instr);
            return;
        }
        // Split (no clusters, or T > 512): delta = rowsum(dout . out); then one kernel per
        // query tile (recomputes S and P; dP and dQ: three products) and one per key tile (S,
        // dP, dV, dK: four products), each over the tiles the window reaches. Both read the
        // forward's keep bits, or past T = 512 draw the decisions again (the REDRAW
        // instances' loop bodies hold the draws).
        double pairs = flash_pairs(T, window), warp_tiles = flash_warp_tiles(BH, pairs);
        emit(c, "flash_delta", 0.0, 2 * NC * A + BH * T * 4, 0.0);
        emit(c, "flash_backward_q", 6.0 * BH * pairs * HS, 4 * NC * A + 2 * BH * T * 4 + B * T * 4 + NC * A + keep_bits,
             32 * (warp_tiles * k->bwd_q + flash_warps(BH, T) * k->bwd_q_outside));
        emit(c, "flash_backward_kv", 8.0 * BH * pairs * HS, 4 * NC * A + 2 * BH * T * 4 + B * T * 4 + 2 * NC * A + keep_bits,
             32 * (warp_tiles * k->bwd_kv + flash_warps(BH, T) * k->bwd_kv_outside));
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
// RoPE: the queries and keys of N rows read and written in place (2C of each row's 3C), the
// positions read when unpadded; GeGLU: [N,2I] read, [N,I] written, and its backward [N,2I]
// and [N,I] read, [N,2I] written.
static void cost_rope(cost_ctx *c) {
    double N = c->n[0], C = c->n[1];
    emit(c, c->rec->op == R_rope_forward ? "rope_forward" : "rope_backward", 0.0,
         4 * N * C * c->A + (c->rec->flag_a ? 4 * N : 0.0), 0.0);
}
static void cost_geglu(cost_ctx *c) {
    double N = c->n[0], I = c->n[1], A = c->A;
    if (c->rec->op == R_geglu_forward) emit(c, "geglu_forward", 0.0, 3 * N * I * A, 0.0);
    else emit(c, "geglu_backward", 0.0, 5 * N * I * A, 0.0);
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
// LARS (lars.cu): gradient squares, norm, per-chunk |w|^2 and |g|^2, trust ratio per
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
// AdamW (adamw.cu): gradient squares, norm, then moments and update in one pass (read params,
// m, v, grads; write m, v, params).
static void cost_adamw(cost_ctx *c) {
    double n = c->n[0];
    emit(c, "adamw_grad_sq", 0.0, 4 * n, 0.0);
    emit(c, "adamw_norm", 0.0, 0.0, 0.0);
    emit_sync(c, "download gradient norm", 1);
    emit(c, "adamw_apply", 0.0, 4 * n * 4 + 3 * n * 4, 0.0);
}
// StableAdamW (stableadamw.cu): gradient squares, norm, then moments and per chunk the RMS
// sums (read m, v, grads; write m, v), the per-tensor rate, and the update (read params, m, v;
// write params).
static void cost_stableadamw(cost_ctx *c) {
    double n = c->n[0];
    emit(c, "stableadamw_grad_sq", 0.0, 4 * n, 0.0);
    emit(c, "stableadamw_norm", 0.0, 0.0, 0.0);
    emit_sync(c, "download gradient norm", 1);
    emit(c, "stableadamw_moments", 0.0, 3 * n * 4 + 2 * n * 4, 0.0);
    emit(c, "stableadamw_rate", 0.0, 0.0, 0.0);
    emit(c, "stableadamw_apply", 0.0, 3 * n * 4 + n * 4, 0.0);
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

// One entry per recorded op: its phase and its cost function (roofline_cost exits naming an
// op of BACKEND_OPS that has none); the names come from the same list.
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
    [R_stableadamw_step] = {ROOF_OPTIMIZER, cost_stableadamw},
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
    [R_rope_forward] = {ROOF_FORWARD, cost_rope},
    [R_rope_backward] = {ROOF_BACKWARD, cost_rope},
    [R_geglu_forward] = {ROOF_FORWARD, cost_geglu},
    [R_geglu_backward] = {ROOF_BACKWARD, cost_geglu},
};

void roofline_cost(cost_ctx *c) {
    CHECK(cost_table[c->rec->op].cost, "roofline: backend op %s has no entry in cost_table", op_names[c->rec->op]);
    cost_table[c->rec->op].cost(c);
}
int roofline_op_phase(rec_op op) { return cost_table[op].phase; }
const char *roofline_op_name(rec_op op) { return op_names[op]; }
