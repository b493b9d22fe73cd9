// Embeddings: out[n,:] = wte[ids[n],:] + wpe[t,:] + wtt[segments[n],:], t = positions[n]
// (n % T without positions: the padded layout [N/T, T]); without wpe (wtt) no position
// (segment) row is added.
// Forward saves nothing (ids, segments and positions are inputs).
// Backward: dwte/dwpe/dwtt += dout scattered to the rows used. Like torch's
// nn.Embedding(padding_idx), tokens equal to pad_id leave dwte untouched.
#include "kernels/cpu/real.h"
#include "kernels/common/check.h"

// The position of token n, checked against the table's P rows.
static int position_of(const int *positions, int n, int T, int P) {
    if (T > P)
        fatal("embeddings: sequence length %d is longer than the position table of %d rows "
              "(max_position_embeddings)", T, P);
    int t = positions ? positions[n] : n % T;
    if (t < 0 || t >= P)
        fatal("embeddings: position %d is outside the position table of %d rows (max_position_embeddings)", t, P);
    return t;
}

void CPU_OP(embeddings_forward)(void *out_, const int *input_ids, const int *segment_ids, const int *positions,
                                const void *wte_, const void *wpe_, const void *wtt_, int N, int T, int P, int C) {
    real *out = out_;
    const real *wte = wte_, *wpe = wpe_, *wtt = wtt_;
    for (int n = 0; n < N; n++) {
        const real *we = wte + (size_t)input_ids[n] * C;
        real *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = we[c];
        if (wpe) {
            const real *pe = wpe + (size_t)position_of(positions, n, T, P) * C;
            for (int c = 0; c < C; c++) o[c] += pe[c];
        }
        if (wtt) {
            const real *te = wtt + (size_t)segment_ids[n] * C;
            for (int c = 0; c < C; c++) o[c] += te[c];
        }
    }
}

void CPU_OP(embeddings_backward)(void *dwte_, void *dwpe_, void *dwtt_, const void *dout_, const int *input_ids,
                                 const int *segment_ids, const int *positions, int pad_id, int N, int T, int P,
                                 int C) {
    real *dwte = dwte_, *dwpe = dwpe_, *dwtt = dwtt_;
    const real *dout = dout_;
    for (int n = 0; n < N; n++) {
        const real *d = dout + (size_t)n * C;
        int id = input_ids[n];
        if (dwpe) {
            real *pe = dwpe + (size_t)position_of(positions, n, T, P) * C;
            for (int c = 0; c < C; c++) pe[c] += d[c];
        }
        if (dwtt) {
            real *te = dwtt + (size_t)segment_ids[n] * C;
            for (int c = 0; c < C; c++) te[c] += d[c];
        }
        if (id != pad_id) {
            real *we = dwte + (size_t)id * C;
            for (int c = 0; c < C; c++) we[c] += d[c];
        }
    }
}
