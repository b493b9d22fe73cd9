// Embeddings: out[b,t,:] = wte[ids[b,t],:] + wpe[t,:] + wtt[segments[b,t],:]
// Forward saves nothing (ids and segments are inputs).
// Backward: dwte/dwpe/dwtt += dout scattered to the rows used. Like torch's
// nn.Embedding(padding_idx), tokens equal to pad_id leave dwte untouched.
#include "kernels/cpu/real.h"

void CPU_OP(embeddings_forward)(void *out_, const int *input_ids, const int *segment_ids, const void *wte_,
                                const void *wpe_, const void *wtt_, int B, int T, int C) {
    real *out = out_;
    const real *wte = wte_, *wpe = wpe_, *wtt = wtt_;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const real *we = wte + (size_t)input_ids[b * T + t] * C;
            const real *pe = wpe + (size_t)t * C;
            const real *te = wtt + (size_t)segment_ids[b * T + t] * C;
            real *o = out + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c] + te[c];
        }
}

void CPU_OP(embeddings_backward)(void *dwte_, void *dwpe_, void *dwtt_, const void *dout_, const int *input_ids,
                                 const int *segment_ids, int pad_id, int B, int T, int C) {
    real *dwte = dwte_, *dwpe = dwpe_, *dwtt = dwtt_;
    const real *dout = dout_;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const real *d = dout + ((size_t)b * T + t) * C;
            int id = input_ids[b * T + t];
            real *pe = dwpe + (size_t)t * C;
            real *te = dwtt + (size_t)segment_ids[b * T + t] * C;
            for (int c = 0; c < C; c++) {
                pe[c] += d[c];
                te[c] += d[c];
            }
            if (id != pad_id) {
                real *we = dwte + (size_t)id * C;
                for (int c = 0; c < C; c++) we[c] += d[c];
            }
        }
}
