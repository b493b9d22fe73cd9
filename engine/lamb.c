#include "lamb.h"
#include <math.h>
#include <stdlib.h>
#include "common/check.h"

void lamb_init(lamb_state *s, size_t n_params) {
    *s = (lamb_state){.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .weight_decay = 0.01, .max_grad_norm = 1.0};
    s->m = xcalloc(n_params, sizeof(float));
    s->v = xcalloc(n_params, sizeof(float));
}

void lamb_free(lamb_state *s) {
    free(s->m);
    free(s->v);
}

double lamb_step(lamb_state *s, float *params, const float *grads, const param_info *table, int n_tensors,
                 double lr, double grad_scale) {
    double sq = 0.0;
    for (int i = 0; i < n_tensors; i++)
        for (size_t k = 0; k < table[i].numel; k++) {
            double g = grads[table[i].offset + k] / grad_scale;
            sq += g * g;
        }
    double norm = sqrt(sq);
    double clip = norm > s->max_grad_norm ? s->max_grad_norm / norm : 1.0;
    s->step++;
    double bc1 = 1.0 - pow(s->beta1, (double)s->step), bc2 = 1.0 - pow(s->beta2, (double)s->step);
    for (int i = 0; i < n_tensors; i++) {
        const param_info *p = &table[i];
        float *w = params + p->offset, *m = s->m + p->offset, *v = s->v + p->offset;
        const float *g = grads + p->offset;
        double wd = p->weight_decay ? s->weight_decay : 0.0;
        // Two passes over the tensor: moments and norms first, then the update recomputed
        // from the new moments (cheaper than keeping a copy of it).
        double w_sq = 0.0, u_sq = 0.0;
        for (size_t k = 0; k < p->numel; k++) {
            double gk = g[k] / grad_scale * clip;
            m[k] = (float)(s->beta1 * m[k] + (1.0 - s->beta1) * gk);
            v[k] = (float)(s->beta2 * v[k] + (1.0 - s->beta2) * gk * gk);
            double u = (m[k] / bc1) / (sqrt(v[k] / bc2) + s->eps) + wd * w[k];
            w_sq += (double)w[k] * w[k];
            u_sq += u * u;
        }
        double trust = 1.0;
        if (wd != 0.0 && w_sq > 0.0 && u_sq > 0.0) trust = sqrt(w_sq) / sqrt(u_sq);
        for (size_t k = 0; k < p->numel; k++) {
            double u = (m[k] / bc1) / (sqrt(v[k] / bc2) + s->eps) + wd * w[k];
            w[k] = (float)(w[k] - lr * trust * u);
        }
    }
    return norm;
}
