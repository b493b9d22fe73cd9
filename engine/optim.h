// The optimizers, chosen by train.optimizer; each one update over the flat FP32 master
// weights, done by the backend's op of that name (CPU reference or multi-tensor CUDA).
// Common to all three: the gradients are divided by the loss scale, then clipped to a
// global norm of max_grad_norm (over every tensor; 0: not clipped); a non-finite norm (an FP16 overflow)
// skips the update and changes nothing. Weight decay applies to tensors with the table's
// weight_decay flag (not biases, not LayerNorm: NVIDIA's rule, model.h).
//
// lamb (default): You et al. 2019 with NVIDIA apex FusedLAMB's semantics, as its BERT
//   examples use it: bias-corrected Adam moments, decoupled weight decay added to the
//   update, per-tensor trust ratio ||w|| / ||update|| (1 when either norm is 0, and not
//   applied to tensors without weight decay).
// lars: You et al. 2017, momentum SGD with the layer-wise trust ratio, as timm's Lars
//   (apex LARC's rule without ratio clipping): on decayed tensors the step is
//   trust * (g + wd w) with trust = trust_coefficient ||w|| / (||g|| + wd ||w|| + eps)
//   (1 when ||w|| or ||g|| is 0); biases and LayerNorm take the plain gradient (neither
//   decay nor adaptation); then buf = momentum buf + step, w -= lr buf.
// adamw: Loshchilov & Hutter, as torch.optim.AdamW: w *= 1 - lr wd (decayed tensors), then
//   w -= lr m̂ / (sqrt(v̂) + eps) with bias-corrected moments.
// stableadamw: Wortsman et al. 2023 as torch-optimi's StableAdamW (ModernBERT's optimizer):
//   AdamW whose moments are kept bias-corrected, each tensor's rate divided by max(1, RMS) of
//   g / sqrt(max(v, eps^2)) (kernels/backend.h states it).
// decoupled_weight_decay (adamw, stableadamw): the decay is (lr / peak lr) wd instead of
//   lr wd (Composer's DecoupledAdamW, torch-optimi's decouple_lr: MosaicBERT's and
//   ModernBERT's recipes, whose weight decay 1e-5 is meant so).
// State in backend memory, same layout as the parameters: m and v (LAMB, AdamW) or the
// momentum buffer in m (LARS, v is NULL).
#pragma once
#include <stddef.h>
#include "kernels/backend.h"
#include "engine/config.h"
#include "engine/model.h"

typedef enum { OPTIM_LAMB, OPTIM_LARS, OPTIM_ADAMW, OPTIM_STABLEADAMW } optim_kind;

typedef struct {
    optim_kind kind;
    double beta1, beta2, eps, weight_decay, max_grad_norm;  // beta1/beta2: LAMB, AdamW
    double momentum, trust_coefficient;                      // LARS
    double decay_lr_ref;  // > 0: decoupled weight decay relative to this (peak) rate (adam_hyper)
    const backend_t *be;
    float *m, *v;  // state buffers, same layout as the parameters, backend memory
    size_t n_params;
    optim_tensor *tensors;  // the table's ranges, built at the first step
    int n_tensors;
    long step;     // number of updates applied (skipped steps do not count)
} optim_state;

// The name in configs and checkpoints ("lamb", "lars", "adamw", "stableadamw"); -1 from optim_kind_of
// for another name.
const char *optim_name(optim_kind kind);
int optim_kind_of(const char *name);
// State with each optimizer's default hyper-parameters (those of train_config's defaults).
void optim_init(optim_state *s, optim_kind kind, const backend_t *be, size_t n_params);
// State with the kind and hyper-parameters of a (resolved) training config.
void optim_init_config(optim_state *s, const train_config *t, const backend_t *be, size_t n_params);
void optim_free(optim_state *s);
// The names of the state buffers in checkpoints (prefixes of the parameter names):
// "exp_avg." and "exp_avg_sq." (LAMB, AdamW, StableAdamW: its moments bias-corrected) or
// "momentum_buffer." (LARS); returns the count.
int optim_buffer_names(const optim_state *s, const char *names[2], float *buffers[2]);
// One update of params from grads (flat layout of `table`, backend memory). grad_scale
// divides the gradients first (the loss scale). Returns the global gradient norm before
// clipping; when it is not finite the update is skipped and nothing changes.
double optim_step(optim_state *s, float *params, const void *grads, const param_info *table, int n_tensors,
                  double lr, double grad_scale);
// The same update over an explicit tensor list (ranges of params, grads and the state
// buffers), with the partial sums of the norms completed by sum_over_ranks before they are
// used (NULL: the list is whole). engine/zero.c's sharded step.
double optim_apply(optim_state *s, float *params, const void *grads, const optim_tensor *tensors, int n_tensors,
                   double lr, double grad_scale, void (*sum_over_ranks)(float *, int));

// The optimizer's state in a memory plan that counts two buffers per parameter (as
// bert_memory_plan and zero_plan do): LARS keeps one; and its name ("AdamW moments").
void optim_plan(memory_plan *plan, const train_config *t);

// Config: fills the optimizer fields a config left unset with the chosen optimizer's
// defaults, and stops with an error naming the field when one is set that the optimizer
// does not use (or a value it cannot take). `where` names the config in messages.
void optim_config_resolve(train_config *t, const char *where);
