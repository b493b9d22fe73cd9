// LAMB (You et al. 2019) with the semantics of NVIDIA apex's FusedLAMB as its BERT examples
// use it: global gradient-norm clipping, bias-corrected Adam moments, decoupled weight decay
// added to the update, per-tensor trust ratio ||w|| / ||update|| (1 when either norm is 0,
// and not applied to tensors without weight decay). FP32 moments and master weights in the
// backend's memory; the update itself is the backend's lamb_step (CPU reference or CUDA).
#pragma once
#include <stddef.h>
#include "kernels/backend.h"
#include "engine/model.h"

typedef struct {
    double beta1, beta2, eps, weight_decay, max_grad_norm;
    const backend_t *be;
    float *m, *v;  // moments, same layout as the parameters, backend memory
    size_t n_params;
    lamb_tensor *tensors;  // the table's ranges, built at the first step
    int n_tensors;
    long step;     // number of updates applied (skipped steps do not count)
} lamb_state;

void lamb_init(lamb_state *s, const backend_t *be, size_t n_params);
void lamb_free(lamb_state *s);
// One update of params from grads (flat layout of `table`, backend memory). grad_scale
// divides the gradients first (the loss scale). Returns the global gradient norm before
// clipping; when it is not finite the update is skipped and nothing changes.
// The hyperparameters of the next update (engine/zero.c runs it on a shard).
lamb_hyper lamb_hyper_next(const lamb_state *s, double lr, double grad_scale);
double lamb_step(lamb_state *s, float *params, const void *grads, const param_info *table, int n_tensors,
                 double lr, double grad_scale);
