// Rotary position embedding (RoPE) on the queries and keys of qkv[N,3C], in place, as
// transformers' ModernBertRotaryEmbedding and apply_rotary_pos_emb compute it (kernels/backend.h
// has the contract). The frequencies and the angles are FP32, as transformers computes them:
//   f_d = 1 / theta^((2d) / HS) (the exponent's division and the power in FP32), angle = (float)t * f_d,
// then the rotation of each pair (d, d + HS/2) of each head in double, rounded once.
// The backward applies the transposed rotation (the angle negated) to the gradient.
#include <stdlib.h>
#include "kernels/common/check.h"
#include "kernels/cpu/real.h"

static void rope(real *qkv, const int *positions, int N, int T, int C, int NH, float theta, int sign) {
    int HS = C / NH, half = HS / 2;
    float *freq = xcalloc(half > 0 ? half : 1, sizeof(float));
    for (int d = 0; d < half; d++) freq[d] = 1.0f / powf(theta, (float)(2 * d) / (float)HS);
    double *cs = xcalloc(2 * (size_t)(half > 0 ? half : 1), sizeof(double)), *sn = cs + half;
    for (int n = 0; n < N; n++) {
        int t = positions ? positions[n] : n % T;
        for (int d = 0; d < half; d++) {
            float angle = (float)t * freq[d];
            cs[d] = cosf(angle);
            sn[d] = sign * (double)sinf(angle);
        }
        real *row = qkv + (size_t)n * 3 * C;
        for (int part = 0; part < 2; part++)  // the queries, then the keys
            for (int h = 0; h < NH; h++) {
                real *x = row + (size_t)part * C + (size_t)h * HS;
                for (int d = 0; d < half; d++) {
                    double a = x[d], b = x[d + half];
                    x[d] = (real)(a * cs[d] - b * sn[d]);
                    x[d + half] = (real)(b * cs[d] + a * sn[d]);
                }
            }
    }
    free(freq);
    free(cs);
}

void CPU_OP(rope_forward)(void *qkv, const int *positions, int N, int T, int C, int NH, float theta) {
    rope(qkv, positions, N, T, C, NH, theta, 1);
}

void CPU_OP(rope_backward)(void *dqkv, const int *positions, int N, int T, int C, int NH, float theta) {
    rope(dqkv, positions, N, T, C, NH, theta, -1);
}
