// LAMB (You et al. 2019) with the semantics of NVIDIA apex's FusedLAMB as its BERT examples
// use it: global gradient-norm clipping, bias-corrected Adam moments, decoupled weight decay
// added to the update, per-tensor trust ratio ||w|| / ||update|| (1 when either norm is 0,
// and not applied to tensors without weight decay). FP32 host reference over the flat buffer.
#pragma once
#include <stddef.h>
#include "model.h"

typedef struct {
    double beta1, beta2, eps, weight_decay, max_grad_norm;
    float *m, *v;  // moments, same layout as the parameters
    long step;     // number of updates applied
} lamb_state;

void lamb_init(lamb_state *s, size_t n_params);
void lamb_free(lamb_state *s);
// One update of params from grads (both FP32 host, flat layout of `table`). grad_scale
// divides the gradients first (loss scale times accumulation count). Returns the global
// gradient norm before clipping.
double lamb_step(lamb_state *s, float *params, const float *grads, const param_info *table, int n_tensors,
                 double lr, double grad_scale);
