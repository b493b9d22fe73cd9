// Softmax cross-entropy with an ignore rule, row by row over logits[N,Vp] whose first V
// columns are the classes (the rest: vocabulary padding, ignored; gradient 0):
//   losses[n] = logsumexp(logits[n,:]) - logits[n,target[n]];  0 where target[n] < 0
//   correct[n] = (argmax == target)   (first maximum wins)
// Forward saves nothing (the backward recomputes the softmax from the logits).
// Backward (=): dlogits[n,:] = (softmax(logits[n,:]) - onehot(target[n])) * dloss,
//   zero rows where target < 0. dlogits may alias logits.
#include "kernels/cpu/real.h"

static double row_logsumexp(const real *x, int V, int *argmax) {
    double maxval = x[0];
    int best = 0;
    for (int v = 1; v < V; v++)
        if (x[v] > maxval) {
            maxval = x[v];
            best = v;
        }
    double sum = 0.0;
    for (int v = 0; v < V; v++) sum += exp(x[v] - maxval);
    if (argmax) *argmax = best;
    return maxval + log(sum);
}

void CPU_OP(crossentropy_forward)(void *losses_, int *correct, const void *logits_, const int *targets, int N,
                                  int V, int Vp) {
    real *losses = losses_;
    const real *logits = logits_;
    for (int n = 0; n < N; n++) {
        const real *x = logits + (size_t)n * Vp;
        int best;
        double lse = row_logsumexp(x, V, &best);
        losses[n] = targets[n] < 0 ? (real)0 : (real)(lse - x[targets[n]]);
        if (correct) correct[n] = targets[n] >= 0 && best == targets[n];
    }
}

void CPU_OP(crossentropy_backward)(void *dlogits_, const void *logits_, const int *targets, int N, int V,
                                   int Vp, float dloss) {
    real *dlogits = dlogits_;
    const real *logits = logits_;
    for (int n = 0; n < N; n++) {
        const real *x = logits + (size_t)n * Vp;
        real *d = dlogits + (size_t)n * Vp;
        for (int v = V; v < Vp; v++) d[v] = 0;
        if (targets[n] < 0) {
            for (int v = 0; v < V; v++) d[v] = 0;
            continue;
        }
        double lse = row_logsumexp(x, V, NULL);
        for (int v = 0; v < V; v++) {
            double p = exp(x[v] - lse);
            d[v] = (real)((p - (v == targets[n])) * dloss);
        }
    }
}
