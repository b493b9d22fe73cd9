// The optimizers' state, defaults and config rules, and the dispatch of one update to the
// backend's op (see optim.h for the rules of each).
#include "engine/optim.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/common/check.h"

static const char *const names[] = {"lamb", "lars", "adamw", "stableadamw"};

const char *optim_name(optim_kind kind) { return names[kind]; }

int optim_kind_of(const char *name) {
    for (int k = 0; k < 4; k++)
        if (!strcmp(name, names[k])) return k;
    return -1;
}

// Defaults: LAMB as NVIDIA's BERT recipe runs it; AdamW and LARS as torch.optim.AdamW and
// the LARS paper's momentum / timm's trust coefficient and eps; StableAdamW as torch-optimi's
// (betas 0.9 / 0.99, eps 1e-6).
static void defaults(optim_state *s, optim_kind kind) {
    s->kind = kind;
    s->weight_decay = 0.01;
    s->max_grad_norm = 1.0;
    s->beta1 = kind == OPTIM_LARS ? 0.0 : 0.9;
    s->beta2 = kind == OPTIM_LARS ? 0.0 : kind == OPTIM_STABLEADAMW ? 0.99 : 0.999;
    s->eps = kind == OPTIM_LAMB || kind == OPTIM_STABLEADAMW ? 1e-6 : 1e-8;
    s->momentum = kind == OPTIM_LARS ? 0.9 : 0.0;
    s->trust_coefficient = kind == OPTIM_LARS ? 0.001 : 0.0;
}

void optim_init(optim_state *s, optim_kind kind, const backend_t *be, size_t n_params) {
    *s = (optim_state){0};
    defaults(s, kind);
    s->be = be;
    s->n_params = n_params;
    s->m = be->alloc(n_params * sizeof(float));
    if (kind != OPTIM_LARS) s->v = be->alloc(n_params * sizeof(float));
}

void optim_init_config(optim_state *s, const train_config *t, const backend_t *be, size_t n_params) {
    optim_init(s, (optim_kind)optim_kind_of(t->optimizer), be, n_params);
    s->weight_decay = t->weight_decay;
    s->max_grad_norm = t->max_grad_norm;
    s->beta1 = t->beta1;
    s->beta2 = t->beta2;
    s->eps = t->eps;
    s->momentum = t->momentum;
    s->trust_coefficient = t->trust_coefficient;
    s->decay_lr_ref = t->decoupled_weight_decay ? t->learning_rate : 0.0;
}

void optim_free(optim_state *s) {
    s->be->release(s->m);
    if (s->v) s->be->release(s->v);
    free(s->tensors);
}

int optim_buffer_names(const optim_state *s, const char *out[2], float *buffers[2]) {
    if (s->kind == OPTIM_LARS) {
        out[0] = "momentum_buffer.";
        buffers[0] = s->m;
        return 1;
    }
    out[0] = "exp_avg.", out[1] = "exp_avg_sq.";
    buffers[0] = s->m, buffers[1] = s->v;
    return 2;
}

double optim_step(optim_state *s, float *params, const void *grads, const param_info *table, int n_tensors,
                  double lr, double grad_scale) {
    if (s->n_tensors != n_tensors) {
        free(s->tensors);
        s->tensors = xmalloc((size_t)n_tensors * sizeof(optim_tensor));
        s->n_tensors = n_tensors;
    }
    for (int i = 0; i < n_tensors; i++)
        s->tensors[i] = (optim_tensor){table[i].offset, table[i].numel, table[i].weight_decay};
    return optim_apply(s, params, grads, s->tensors, n_tensors, lr, grad_scale, NULL);
}

double optim_apply(optim_state *s, float *params, const void *grads, const optim_tensor *tensors, int n_tensors,
                   double lr, double grad_scale, void (*sum_over_ranks)(float *, int)) {
    double norm, clip_norm = s->max_grad_norm > 0.0 ? s->max_grad_norm : INFINITY;  // 0: no clipping
    if (s->kind == OPTIM_LARS) {
        lars_hyper h = {.lr = lr, .momentum = s->momentum, .trust_coefficient = s->trust_coefficient,
                        .eps = s->eps, .weight_decay = s->weight_decay, .max_grad_norm = clip_norm,
                        .grad_scale = grad_scale, .sum_over_ranks = sum_over_ranks};
        norm = s->be->lars_step(params, s->m, grads, tensors, n_tensors, h);
    } else {
        adam_hyper h = {.lr = lr, .beta1 = s->beta1, .beta2 = s->beta2, .eps = s->eps,
                        .weight_decay = s->weight_decay, .max_grad_norm = clip_norm,
                        .grad_scale = grad_scale, .step = s->step + 1, .sum_over_ranks = sum_over_ranks,
                        .decay_lr_ref = s->decay_lr_ref};
        double (*step)(float *, float *, float *, const void *, const optim_tensor *, int, adam_hyper) =
            s->kind == OPTIM_LAMB ? s->be->lamb_step
            : s->kind == OPTIM_STABLEADAMW ? s->be->stableadamw_step
                                          : s->be->adamw_step;
        if (!step) fatal("the %s backend has no %s step", s->be->name, optim_name(s->kind));
        norm = step(params, s->m, s->v, grads, tensors, n_tensors, h);
    }
    if (isfinite(norm)) s->step++;
    return norm;
}

// A field the optimizer does not use must stay unset (< 0, the config's "unset" mark); an
// unset one takes the default.
static void resolve(double *field, const char *name, int used, double fallback, const train_config *t,
                    const char *where) {
    if (*field >= 0.0 && !used)
        fatal("%s: field '%s' = %g is not used by optimizer '%s' (lamb and adamw take beta1, beta2, eps; lars "
              "takes momentum, trust_coefficient, eps; stableadamw as adamw; all take weight_decay, max_grad_norm)",
              where, name, *field, t->optimizer);
    if (*field < 0.0) *field = used ? fallback : 0.0;
}

void optim_plan(memory_plan *plan, const train_config *t) {
    int kind = optim_kind_of(t->optimizer);
    if (kind == OPTIM_LARS) plan->bytes[MEM_OPTIMIZER] /= 2;
    plan->optimizer_state = kind == OPTIM_LARS          ? "LARS momentum buffer"
                            : kind == OPTIM_ADAMW       ? "AdamW moments"
                            : kind == OPTIM_STABLEADAMW ? "StableAdamW moments"
                                                        : "LAMB moments";
}

void optim_config_resolve(train_config *t, const char *where) {
    int kind = optim_kind_of(t->optimizer);
    if (kind < 0) fatal("%s: field 'optimizer' = \"%s\" is not lamb, lars, adamw or stableadamw", where, t->optimizer);
    if (t->decoupled_weight_decay && kind != OPTIM_ADAMW && kind != OPTIM_STABLEADAMW)
        fatal("%s: field 'decoupled_weight_decay' = 1 applies to adamw and stableadamw, not to optimizer '%s'", where,
              t->optimizer);
    optim_state d;
    defaults(&d, (optim_kind)kind);
    int lars = kind == OPTIM_LARS;
    resolve(&t->beta1, "beta1", !lars, d.beta1, t, where);
    resolve(&t->beta2, "beta2", !lars, d.beta2, t, where);
    resolve(&t->eps, "eps", 1, d.eps, t, where);
    resolve(&t->momentum, "momentum", lars, d.momentum, t, where);
    resolve(&t->trust_coefficient, "trust_coefficient", lars, d.trust_coefficient, t, where);
    const struct { const char *name; double value; } below_one[] = {
        {"beta1", t->beta1}, {"beta2", t->beta2}, {"momentum", t->momentum}};
    for (int i = 0; i < 3; i++)
        if (below_one[i].value >= 1.0)
            fatal("%s: field '%s' = %g must be below 1 (a moving average that never forgets diverges)", where,
                  below_one[i].name, below_one[i].value);
    if (!lars && t->eps <= 0.0)
        fatal("%s: field 'eps' = %g must be above 0 for optimizer '%s' (it keeps m / (sqrt(v) + eps) finite)",
              where, t->eps, t->optimizer);
    if (lars && t->trust_coefficient <= 0.0)
        fatal("%s: field 'trust_coefficient' = %g must be above 0 (the step of every decayed tensor is "
              "proportional to it)", where, t->trust_coefficient);
}
