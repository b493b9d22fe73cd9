// Softmax cross-entropy with label smoothing s and an ignore rule, row by row over
// logits[N,Vp] whose first V columns are the classes (the rest: vocabulary padding, ignored;
// gradient 0). The target distribution is (1 - s) onehot(target) + s / V over the V classes,
// as PyTorch's cross_entropy(label_smoothing=s):
//   losses[n] = logsumexp(logits[n,:V]) - (1 - s) logits[n,target[n]] - s mean(logits[n,:V]);
//               0 where target[n] < 0
//   correct[n] = (argmax == target)   (first maximum wins)
// Forward saves nothing (the backward recomputes the softmax from the logits).
// Backward (=): dlogits[n,:] = (softmax(logits[n,:]) - (1 - s) onehot(target[n]) - s / V) * dloss,
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
                                  int V, int Vp, float smoothing) {
    real *losses = losses_;
    const real *logits = logits_;
    // Rows are independent: spread over the cores (OpenMP, where the build has it).
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real *x = logits + (size_t)n * Vp;
        int best;
        double lse = row_logsumexp(x, V, &best);
        double mean = 0.0;
        if (smoothing != 0.0f && targets[n] >= 0) {
            for (int v = 0; v < V; v++) mean += x[v];
            mean /= V;
        }
        losses[n] = targets[n] < 0 ? (real)0
                                   : (real)(lse - (1.0 - smoothing) * x[targets[n]] - (double)smoothing * mean);
        if (correct) correct[n] = targets[n] >= 0 && best == targets[n];
    }
}

void CPU_OP(crossentropy_backward)(void *dlogits_, const void *logits_, const int *targets, int N, int V,
                                   int Vp, float dloss, float smoothing) {
    real *dlogits = dlogits_;
    const real *logits = logits_;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const real *x = logits + (size_t)n * Vp;
        real *d = dlogits + (size_t)n * Vp;
        for (int v = V; v < Vp; v++) d[v] = 0;
        if (targets[n] < 0) {
            for (int v = 0; v < V; v++) d[v] = 0;
            continue;
        }
        double lse = row_logsumexp(x, V, NULL), on = 1.0 - smoothing, off = (double)smoothing / V;
        for (int v = 0; v < V; v++) {
            double p = exp(x[v] - lse);
            d[v] = (real)((p - on * (v == targets[n]) - off) * dloss);
        }
    }
}
