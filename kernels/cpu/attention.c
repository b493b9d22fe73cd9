// Multi-head self-attention core (the part between the QKV projection and the output
// projection), as BertSelfAttention computes it.
// qkv: per token, q in columns [0,C), k in [C,2C), v in [2C,3C); head h owns columns
// [h*HS, (h+1)*HS) of each, HS = C / NH. Sequence b has L_b = seq_offsets[b+1] -
// seq_offsets[b] real tokens, which come first. Token i of sequence b is row b*T + i
// (padded: qkv[B*T,3C], out[B*T,C], every row a query) or row seq_offsets[b] + i (packed:
// qkv[N_real,3C], out[N_real,C], only real tokens exist).
//   S[b,h,i,j] = q_i . k_j / sqrt(HS)           for keys j < L_b (and |i - j| <= window when window > 0,
//                                                and lo_i <= j < hi_i with documents: doc_bounds)
//   P = softmax_j(S) (padding keys, and keys outside the window or the document, get probability exactly 0)
//   P' = dropout(P), element index ((b*NH + h)*T + i)*T + j
//   out[b,i,h*HS:(h+1)*HS] = sum_j P'[i,j] v_j
// Forward saves lse[b,h,i] = log sum_j exp(S_ij) over real keys (+inf when there is none;
// in the packed layout only rows i < L_b are written);
// the backward recomputes P_ij = exp(S_ij - lse_i), and P' from the counter-based generator.
// The products of each (sequence, head) are GEMMs over its L_b real keys (gemm.c: BLAS, or
// the plain loops): S = q k^T / sqrt(HS), out = P' v; backward dP' = dout v^T, dv = P'^T
// dout, dq = dS k, dk = dS^T q. A window sets the scores outside it to -inf before the
// softmax (probability 0, gradient 0); the reference spends the full products regardless. The row-wise parts (exponentials, softmax, dropout, the row
// sums of P dP) run in double, rows spread over the cores (OpenMP).
// Backward (=): dP' = dout . v_j;  dv_j = sum_i P'_ij dout_i;  dP = dropout_backward(dP');
//   dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik);  dq_i = sum_j dS_ij k_j / sqrt(HS);
//   dk_j = sum_i dS_ij q_i / sqrt(HS)
// (The reference sums P dP itself; `out` is part of the interface for backends that take
// sum_k P_ik dP_ik = dout_i . out_i instead.)
#include <stdlib.h>
#include <string.h>
#include "kernels/common/check.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/real.h"

// keep[j] / (1 - p) for the first L keys of the row whose first element is `base` (0 where
// dropped): one Philox call per group of eight elements.
static void keep_scales(double *scale, dropout_t d, uint64_t base, int L) {
    dropout_walk w = dropout_walk_start();
    for (int j = 0; j < L; j++) scale[j] = dropout_walk_keep(&w, d, base + j) ? 1.0 / (1.0 - d.p) : 0.0;
}

// The row loops below run on the cores only from this many scores of a (sequence, head) on:
// a parallel region per pair costs a fork and a barrier, which for small pairs (the parity
// tests' shapes) is more than the work, and much more when other processes hold the cores.
enum { PARALLEL_SCORES = 32768 };

// Row i of the scores (token row r of the layout): the keys further than `window` from i
// (window > 0) and those outside its document (doc_bounds) get -inf.
static void outside_window(real *si, int i, int L, int window, const int *doc_bounds, size_t r) {
    if (window > 0)
        for (int j = 0; j < L; j++)
            if (j < i - window || j > i + window) si[j] = (real)-INFINITY;
    if (doc_bounds)
        for (int j = 0; j < L; j++)
            if (j < doc_bounds[2 * r] || j >= doc_bounds[2 * r + 1]) si[j] = (real)-INFINITY;
}

// Sequence b: its first row, its real length, and how many query rows it has.
static size_t sequence_rows(const int *seq_offsets, int packed, int b, int T, int *L, int *rows) {
    *L = seq_offsets[b + 1] - seq_offsets[b];
    *rows = packed ? *L : T;
    return packed ? (size_t)seq_offsets[b] : (size_t)b * T;
}

// Scratch of rows x L reals, grown as needed (the largest pair is T x T).
static real *scratch(size_t n, real **buf, size_t *have) {
    if (n > *have) {
        free(*buf);
        *buf = malloc(n * sizeof(real));
        check_alloc(*buf, n * sizeof(real));
        *have = n;
    }
    return *buf;
}

void CPU_OP(attention_forward)(void *out_, void *lse_, uint32_t *keep, const void *qkv_, const int *seq_offsets,
                               const int *doc_bounds, int packed, int B, int T, int C, int NH, int window,
                               dropout_t dropout) {
    (void)keep;  // the backward draws the mask again
    real *out = out_, *lse = lse_;
    const real *qkv = qkv_;
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    real *s = NULL;
    size_t have = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int L, rows;
            size_t row0 = sequence_rows(seq_offsets, packed, b, T, &L, &rows);
            const real *q = qkv + row0 * 3 * C + h * HS, *k = q + C, *v = q + 2 * C;
            real *row_lse = lse + ((size_t)b * NH + h) * T;
            if (L == 0) {  // no key: the query rows attend to nothing
                for (int i = 0; i < rows; i++) {
                    row_lse[i] = (real)INFINITY;
                    memset(out + (row0 + i) * C + h * HS, 0, sizeof(real) * HS);
                }
                continue;
            }
            real *S = scratch((size_t)rows * L, &s, &have);
            // S = q k^T / sqrt(HS) over the real keys, then row by row P' = dropout(softmax(S)).
            CPU_OP(gemm)(0, 1, rows, L, HS, scale, q, 3 * C, k, 3 * C, 0.0, S, L);
#pragma omp parallel if ((size_t)rows * L >= PARALLEL_SCORES)
            {
                double *keep_scale = malloc(2 * sizeof(double) * (size_t)L);
                check_alloc(keep_scale, 2 * sizeof(double) * (size_t)L);
                double *e = keep_scale + L;
#pragma omp for schedule(static)
                for (int i = 0; i < rows; i++) {
                    real *si = S + (size_t)i * L;
                    outside_window(si, i, L, window, doc_bounds, row0 + i);
                    double maxval = -INFINITY, sum = 0.0;
                    for (int j = 0; j < L; j++) maxval = si[j] > maxval ? si[j] : maxval;
                    if (maxval == -INFINITY) {  // no key within the window or document (a padding query row)
                        row_lse[i] = (real)INFINITY;
                        for (int j = 0; j < L; j++) si[j] = 0;
                        continue;
                    }
                    for (int j = 0; j < L; j++) sum += e[j] = exp(si[j] - maxval);
                    row_lse[i] = (real)(maxval + log(sum));
                    keep_scales(keep_scale, dropout, (((uint64_t)b * NH + h) * T + i) * T, L);
                    for (int j = 0; j < L; j++) si[j] = (real)(e[j] / sum * keep_scale[j]);
                }
                free(keep_scale);
            }
            // out = P' v (the query rows of a padded sequence's padding included).
            CPU_OP(gemm)(0, 0, rows, HS, L, 1.0, S, L, v, 3 * C, 0.0, out + row0 * C + h * HS, C);
        }
    free(s);
}

void CPU_OP(attention_backward)(void *dqkv_, const void *dout_, const void *qkv_, const void *out_,
                                const void *lse_, const uint32_t *keep, const int *seq_offsets,
                                const int *doc_bounds, int packed, int B, int T, int C, int NH, int window,
                                dropout_t dropout) {
    (void)out_, (void)keep;
    real *dqkv = dqkv_;
    const real *dout = dout_, *qkv = qkv_, *lse = lse_;
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    size_t n_rows = packed ? (size_t)seq_offsets[B] : (size_t)B * T;
    memset(dqkv, 0, sizeof(real) * n_rows * 3 * C);  // padding keys get exactly zero
    real *s = NULL, *g = NULL;
    size_t have_s = 0, have_g = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int L, rows;
            size_t row0 = sequence_rows(seq_offsets, packed, b, T, &L, &rows);
            if (L == 0) continue;
            const real *q = qkv + row0 * 3 * C + h * HS, *k = q + C, *v = q + 2 * C;
            const real *d = dout + row0 * C + h * HS;
            real *dq = dqkv + row0 * 3 * C + h * HS, *dk = dq + C, *dv = dq + 2 * C;
            real *S = scratch((size_t)rows * L, &s, &have_s), *dP = scratch((size_t)rows * L, &g, &have_g);
            CPU_OP(gemm)(0, 1, rows, L, HS, scale, q, 3 * C, k, 3 * C, 0.0, S, L);  // S again
            CPU_OP(gemm)(0, 1, rows, L, HS, 1.0, d, C, v, 3 * C, 0.0, dP, L);       // dP' = dout v^T
            const real *row_lse = lse + ((size_t)b * NH + h) * T;
#pragma omp parallel if ((size_t)rows * L >= PARALLEL_SCORES)
            {
                double *keep_scale = malloc(3 * sizeof(double) * (size_t)L);
                check_alloc(keep_scale, 3 * sizeof(double) * (size_t)L);
                double *prob = keep_scale + L, *dprob = prob + L;
#pragma omp for schedule(static)
                for (int i = 0; i < rows; i++) {
                    real *si = S + (size_t)i * L, *gi = dP + (size_t)i * L;
                    outside_window(si, i, L, window, doc_bounds, row0 + i);
                    double m = row_lse[i], dot_pdp = 0.0;
                    keep_scales(keep_scale, dropout, (((uint64_t)b * NH + h) * T + i) * T, L);
                    // P from the saved log-sum-exp; S's row becomes P' (for dv), and
                    // dP = dropout'(dP') with its row sum against P.
                    for (int j = 0; j < L; j++) {
                        double pj = exp(si[j] - m), dp = gi[j] * keep_scale[j];
                        prob[j] = pj, dprob[j] = dp;
                        si[j] = (real)(pj * keep_scale[j]);
                        dot_pdp += pj * dp;
                    }
                    // dS = P (dP - sum_k P_ik dP_ik) / sqrt(HS), in dP's row.
                    for (int j = 0; j < L; j++) gi[j] = (real)(prob[j] * (dprob[j] - dot_pdp) * scale);
                }
                free(keep_scale);
            }
            CPU_OP(gemm)(1, 0, L, HS, rows, 1.0, S, L, d, C, 0.0, dv, 3 * C);   // dv = P'^T dout
            CPU_OP(gemm)(0, 0, rows, HS, L, 1.0, dP, L, k, 3 * C, 0.0, dq, 3 * C);  // dq = dS k
            CPU_OP(gemm)(1, 0, L, HS, rows, 1.0, dP, L, q, 3 * C, 0.0, dk, 3 * C);  // dk = dS^T q
        }
    free(s);
    free(g);
}
