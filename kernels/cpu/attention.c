// Multi-head self-attention core (the part between the QKV projection and the output
// projection), as BertSelfAttention computes it.
// qkv[B,T,3C]: per token, q in columns [0,C), k in [C,2C), v in [2C,3C); head h owns
// columns [h*HS, (h+1)*HS) of each, HS = C / NH.
//   S[b,h,i,j] = q_i . k_j / sqrt(HS)           for keys j with mask[b,j] = 1
//   P = softmax_j(S) (padding keys get probability exactly 0)
//   P' = dropout(P), element index ((b*NH + h)*T + i)*T + j
//   out[b,i,h*HS:(h+1)*HS] = sum_j P'[i,j] v_j
// Forward saves P (before dropout); P' is redrawn from the counter-based generator.
// Backward (=): dP' = dout . v_j;  dv_j = sum_i P'_ij dout_i;  dP = dropout_backward(dP');
//   dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik);  dq_i = sum_j dS_ij k_j / sqrt(HS);
//   dk_j = sum_i dS_ij q_i / sqrt(HS)
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/real.h"

static double dropped(double p, dropout_t d, uint64_t element) {
    return dropout_keep(d, element) ? p / (1.0 - d.p) : 0.0;
}

void CPU_OP(attention_forward)(void *out_, void *probs_, const void *qkv_, const int *mask, int B, int T, int C,
                               int NH, dropout_t dropout) {
    real *out = out_, *probs = probs_;
    const real *qkv = qkv_;
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const real *q = qkv + ((size_t)b * T + i) * 3 * C + h * HS;
                real *p = probs + (((size_t)b * NH + h) * T + i) * T;
                double maxval = -INFINITY;
                double scores[T];
                for (int j = 0; j < T; j++) {
                    if (!mask[b * T + j]) continue;
                    const real *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * HS;
                    double dot = 0.0;
                    for (int e = 0; e < HS; e++) dot += (double)q[e] * k[e];
                    scores[j] = dot * scale;
                    if (scores[j] > maxval) maxval = scores[j];
                }
                double sum = 0.0;
                for (int j = 0; j < T; j++) {
                    scores[j] = mask[b * T + j] ? exp(scores[j] - maxval) : 0.0;
                    sum += scores[j];
                }
                for (int j = 0; j < T; j++) p[j] = (real)(scores[j] / sum);
                real *o = out + ((size_t)b * T + i) * C + h * HS;
                uint64_t base = (((uint64_t)b * NH + h) * T + i) * T;
                for (int e = 0; e < HS; e++) {
                    double acc = 0.0;
                    for (int j = 0; j < T; j++) {
                        const real *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * HS;
                        acc += dropped(p[j], dropout, base + j) * v[e];
                    }
                    o[e] = (real)acc;
                }
            }
}

void CPU_OP(attention_backward)(void *dqkv_, const void *dout_, const void *qkv_, const void *probs_, int B, int T,
                                int C, int NH, dropout_t dropout) {
    real *dqkv = dqkv_;
    const real *dout = dout_, *qkv = qkv_, *probs = probs_;
    int HS = C / NH;
    double scale = 1.0 / sqrt((double)HS);
    memset(dqkv, 0, sizeof(real) * (size_t)B * T * 3 * C);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const real *p = probs + (((size_t)b * NH + h) * T + i) * T;
                const real *d = dout + ((size_t)b * T + i) * C + h * HS;
                const real *q = qkv + ((size_t)b * T + i) * 3 * C + h * HS;
                real *dq = dqkv + ((size_t)b * T + i) * 3 * C + h * HS;
                uint64_t base = (((uint64_t)b * NH + h) * T + i) * T;
                double dp[T];
                double dot_pdp = 0.0;
                for (int j = 0; j < T; j++) {
                    const real *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * HS;
                    real *dv = dqkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * HS;
                    double pd = dropped(p[j], dropout, base + j);
                    double dpd = 0.0;
                    for (int e = 0; e < HS; e++) {
                        dpd += (double)d[e] * v[e];
                        dv[e] += (real)(pd * d[e]);
                    }
                    dp[j] = dropped(dpd, dropout, base + j);
                    dot_pdp += p[j] * dp[j];
                }
                for (int j = 0; j < T; j++) {
                    double ds = p[j] * (dp[j] - dot_pdp) * scale;
                    if (ds == 0.0) continue;
                    const real *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * HS;
                    real *dk = dqkv + ((size_t)b * T + j) * 3 * C + C + h * HS;
                    for (int e = 0; e < HS; e++) {
                        dq[e] += (real)(ds * k[e]);
                        dk[e] += (real)(ds * q[e]);
                    }
                }
            }
}
