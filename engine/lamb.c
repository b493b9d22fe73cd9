#include "engine/lamb.h"
#include <math.h>
#include <stdlib.h>
#include "kernels/common/check.h"

void lamb_init(lamb_state *s, const backend_t *be, size_t n_params) {
    *s = (lamb_state){.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .weight_decay = 0.01, .max_grad_norm = 1.0};
    s->be = be;
    s->n_params = n_params;
    s->m = be->alloc(n_params * sizeof(float));
    s->v = be->alloc(n_params * sizeof(float));
}

void lamb_free(lamb_state *s) {
    s->be->release(s->m);
    s->be->release(s->v);
    free(s->tensors);
}

lamb_hyper lamb_hyper_next(const lamb_state *s, double lr, double grad_scale) {
    return (lamb_hyper){.lr = lr, .beta1 = s->beta1, .beta2 = s->beta2, .eps = s->eps,
                        .weight_decay = s->weight_decay, .max_grad_norm = s->max_grad_norm,
                        .grad_scale = grad_scale, .step = s->step + 1};
}

double lamb_step(lamb_state *s, float *params, const void *grads, const param_info *table, int n_tensors,
                 double lr, double grad_scale) {
    if (s->n_tensors != n_tensors) {
        free(s->tensors);
        s->tensors = xmalloc((size_t)n_tensors * sizeof(lamb_tensor));
        s->n_tensors = n_tensors;
    }
    for (int i = 0; i < n_tensors; i++)
        s->tensors[i] = (lamb_tensor){table[i].offset, table[i].numel, table[i].weight_decay};
    lamb_hyper h = lamb_hyper_next(s, lr, grad_scale);
    double norm = s->be->lamb_step(params, s->m, s->v, grads, s->tensors, n_tensors, h);
    if (isfinite(norm)) s->step++;
    return norm;
}
