// Multi-head self-attention core (the part between the QKV projection and the output
// projection), as BertSelfAttention computes it.
// qkv: per token, q in columns [0,C), k in [C,2C), v in [2C,3C); head h owns columns
// [h*HS, (h+1)*HS) of each, HS = C / NH. Sequence b has L_b = seq_offsets[b+1] -
// seq_offsets[b] real tokens, which come first. Token i of sequence b is row b*T + i
// (padded: qkv[B*T,3C], out[B*T,C], every row a query) or row seq_offsets[b] + i (packed:
// qkv[N_real,3C], out[N_real,C], only real tokens exist).
//   S[b,h,i,j] = q_i . k_j / sqrt(HS)           for keys j < L_b
//   P = softmax_j(S) (padding keys get probability exactly 0)
//   P' = dropout(P), element index ((b*NH + h)*T + i)*T + j
//   out[b,i,h*HS:(h+1)*HS] = sum_j P'[i,j] v_j
// Forward saves lse[b,h,i] = log sum_j exp(S_ij) over real keys (+inf when there is none;
// in the packed layout only rows i < L_b are written);
// the backward recomputes P_ij = exp(S_ij - lse_i), and P' from the counter-based generator.
// Backward (=): dP' = dout . v_j;  dv_j = sum_i P'_ij dout_i;  dP = dropout_backward(dP');
//   dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik);  dq_i = sum_j dS_ij k_j / sqrt(HS);
//   dk_j = sum_i dS_ij q_i / sqrt(HS)
// (The reference sums P dP itself; `out` is part of the interface for backends that take
// sum_k P_ik dP_ik = dout_i . out_i instead.)
#include <stdlib.h>
#include <string.h>
#include "kernels/common/check.h"
#include "kernels/cpu/real.h"

// keep[j] / (1 - p) for the first L keys of the row whose first element is `base` (0 where
// dropped): one Philox call per group of eight elements.
static void keep_scales(double *scale, dropout_t d, uint64_t base, int L) {
    dropout_walk w = dropout_walk_start();
    for (int j = 0; j < L; j++) scale[j] = dropout_walk_keep(&w, d, base + j) ? 1.0 / (1.0 - d.p) : 0.0;
}

// Columns [col, col + HS) of the sequence's L rows (row stride 3C), transposed into
// t[e * L + j] as doubles: the dot products below then run over j, whose sums are
// independent (vectorizable), each still summed over e in order, as in a plain dot product.
static void transpose_head(double *t, const real *x, size_t col, int L, int C, int HS) {
    for (int j = 0; j < L; j++)
        for (int e = 0; e < HS; e++) t[(size_t)e * L + j] = x[(size_t)j * 3 * C + col + e];
}

// dot[j] = sum_e a[e] * t[e * L + j] for j < L, each summed over e = 0, 1, ... in order.
static void dot_rows(double *dot, const real *a, const double *t, int L, int HS) {
    for (int j = 0; j < L; j++) dot[j] = 0.0;
    for (int e = 0; e < HS; e++) {
        double ae = a[e];
        const double *te = t + (size_t)e * L;
        for (int j = 0; j < L; j++) dot[j] += ae * te[j];
    }
}

// Row i of head h in sequence b, whose rows start at qkv (row stride 3C), with the head's
// keys transposed in kt (transpose_head): the probabilities over its L real keys. With
// lse == NULL it computes them by a softmax and returns the log-sum-exp; else it recomputes
// them from the saved value.
static double softmax_row(double *p, const real *qkv, const double *kt, int h, int i, int L, int C, int HS,
                          const real *lse) {
    double scale = 1.0 / sqrt((double)HS), maxval = -INFINITY;
    dot_rows(p, qkv + (size_t)i * 3 * C + h * HS, kt, L, HS);
    for (int j = 0; j < L; j++) {
        p[j] *= scale;
        if (p[j] > maxval) maxval = p[j];
    }
    double sum = 0.0, row_lse = lse ? (double)*lse : 0.0;
    for (int j = 0; j < L; j++) {
        p[j] = lse ? exp(p[j] - row_lse) : exp(p[j] - maxval);
        sum += p[j];
    }
    if (lse) return row_lse;
    if (sum == 0.0) return INFINITY;
    for (int j = 0; j < L; j++) p[j] /= sum;
    return maxval + log(sum);
}

// Sequence b: its first row, its real length, and how many query rows it has.
static size_t sequence_rows(const int *seq_offsets, int packed, int b, int T, int *L, int *rows) {
    *L = seq_offsets[b + 1] - seq_offsets[b];
    *rows = packed ? *L : T;
    return packed ? (size_t)seq_offsets[b] : (size_t)b * T;
}

void CPU_OP(attention_forward)(void *out_, void *lse_, uint32_t *keep, const void *qkv_, const int *seq_offsets,
                               int packed, int B, int T, int C, int NH, dropout_t dropout) {
    (void)keep;  // the backward draws the mask again
    real *out = out_, *lse = lse_;
    const real *qkv = qkv_;
    int HS = C / NH;
    // The (sequence, head) pairs are independent: spread over the cores (OpenMP, where the
    // build has it), each pair summed by one thread in the same order as alone. No size
    // threshold, so that the parity tests' small shapes run this path too.
#pragma omp parallel
    {
        // Each thread's rows of probabilities, keep scales and output sums, and the pair's
        // keys transposed, for all its pairs.
        size_t bytes = (2 * (size_t)T + HS + (size_t)HS * T) * sizeof(double);
        double *p = malloc(bytes);
        check_alloc(p, bytes);
        double *keep = p + T, *acc = keep + T, *kt = acc + HS;
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                int L, rows;
                size_t row0 = sequence_rows(seq_offsets, packed, b, T, &L, &rows);
                const real *x = qkv + row0 * 3 * C;
                transpose_head(kt, x, (size_t)C + h * HS, L, C, HS);
                for (int i = 0; i < rows; i++) {
                    lse[((size_t)b * NH + h) * T + i] = (real)softmax_row(p, x, kt, h, i, L, C, HS, NULL);
                    keep_scales(keep, dropout, (((uint64_t)b * NH + h) * T + i) * T, L);
                    // Each output element summed over the keys in order (j outer for unit-stride rows).
                    for (int e = 0; e < HS; e++) acc[e] = 0.0;
                    for (int j = 0; j < L; j++) {
                        const real *v = x + (size_t)j * 3 * C + 2 * C + h * HS;
                        for (int e = 0; e < HS; e++) acc[e] += p[j] * keep[j] * v[e];
                    }
                    real *o = out + (row0 + i) * C + h * HS;
                    for (int e = 0; e < HS; e++) o[e] = (real)acc[e];
                }
            }
        free(p);
    }
}

void CPU_OP(attention_backward)(void *dqkv_, const void *dout_, const void *qkv_, const void *out_,
                                const void *lse_, const uint32_t *keep, const int *seq_offsets, int packed, int B,
                                int T, int C, int NH, dropout_t dropout) {
    (void)out_, (void)keep;
    real *dqkv = dqkv_;
    const real *dout = dout_, *qkv = qkv_, *lse = lse_;
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    size_t n_rows = packed ? (size_t)seq_offsets[B] : (size_t)B * T;
    memset(dqkv, 0, sizeof(real) * n_rows * 3 * C);
    // (sequence, head) pairs write disjoint columns of dqkv: spread over the cores as in the
    // forward, each pair in the same order as alone.
#pragma omp parallel
    {
        size_t bytes = (3 + 2 * (size_t)HS) * T * sizeof(double);
        double *p = malloc(bytes);
        check_alloc(p, bytes);
        double *dp = p + T, *keep = dp + T, *kt = keep + T, *vt = kt + (size_t)HS * T;
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                int L, rows;
                size_t row0 = sequence_rows(seq_offsets, packed, b, T, &L, &rows);
                const real *x = qkv + row0 * 3 * C;
                real *dx = dqkv + row0 * 3 * C;
                transpose_head(kt, x, (size_t)C + h * HS, L, C, HS);
                transpose_head(vt, x, (size_t)2 * C + h * HS, L, C, HS);
                for (int i = 0; i < rows; i++) {
                    softmax_row(p, x, kt, h, i, L, C, HS, lse + ((size_t)b * NH + h) * T + i);
                    const real *d = dout + (row0 + i) * C + h * HS;
                    const real *q = x + (size_t)i * 3 * C + h * HS;
                    real *dq = dx + (size_t)i * 3 * C + h * HS;
                    keep_scales(keep, dropout, (((uint64_t)b * NH + h) * T + i) * T, L);
                    dot_rows(dp, d, vt, L, HS);  // dout . v_j
                    double dot_pdp = 0.0;
                    for (int j = 0; j < L; j++) {
                        real *dv = dx + (size_t)j * 3 * C + 2 * C + h * HS;
                        double pd = p[j] * keep[j];
                        for (int e = 0; e < HS; e++) dv[e] += (real)(pd * d[e]);
                        dp[j] *= keep[j];
                        dot_pdp += p[j] * dp[j];
                    }
                    for (int j = 0; j < L; j++) {
                        double ds = p[j] * (dp[j] - dot_pdp) * scale;
                        if (ds == 0.0) continue;
                        const real *k = x + (size_t)j * 3 * C + C + h * HS;
                        real *dk = dx + (size_t)j * 3 * C + C + h * HS;
                        for (int e = 0; e < HS; e++) {
                            dq[e] += (real)(ds * k[e]);
                            dk[e] += (real)(ds * q[e]);
                        }
                    }
                }
            }
        free(p);
    }
}
