// One optimizer step over a global batch: forward and backward over this rank's
// micro-batches, sums over the ranks, one LAMB update (see train.h); and a run's config
// loaded with its optimizer's and schedule's fields resolved.
#include "engine/train.h"
#include <math.h>
#include "kernels/common/check.h"
#include "engine/comm.h"
#include "engine/dist.h"
#include "engine/schedule.h"
#include "engine/zero.h"

void run_config_load(run_config *cfg, const char *path, int n_overrides, char **overrides, int world_size) {
    run_config_read(cfg, path, n_overrides, overrides, world_size);
    char where[2400];  // as config.c names the section
    snprintf(where, sizeof where, "%s: section 'train'", path);
    optim_config_resolve(&cfg->train, where);
    schedule_config_resolve(&cfg->train, where);
}

step_stats train_iteration(bert_model *m, optim_state *opt, loss_scaler *scaler, const train_config *t,
                           const batch_t *micro, long applied, int dropout, uint32_t iteration, double *lr) {
    *lr = schedule_config_lr(t, applied + 1);
    return train_step(m, opt, scaler, micro, schedule_accumulation(t, iteration), *lr, dropout, (uint64_t)t->seed,
                      schedule_first_micro_batch(t, iteration, dist_rank()));
}

step_stats train_step(bert_model *m, optim_state *opt, loss_scaler *scaler, const batch_t *micro, int accum,
                      double lr, int dropout, uint64_t seed, uint32_t first) {
    step_stats s = {.loss_scale = scaler->scale};
    int world = dist_world_size();
    if (world > 1 && m->be->acc_size != sizeof(float))
        fatal("training on %d ranks sums FP32 gradients; the %s backend's are not FP32", world, m->be->name);
    // The normalization needs the counts of the whole global batch, on every rank.
    // (With the real tokens' counts, for the throughput on real tokens.)
    double counts[4] = {0.0, 0.0, 0.0, 0.0};
    for (int k = 0; k < accum; k++) {
        for (int b = 0; b < micro[k].B; b++) {
            double len = batch_length(&micro[k], b);
            counts[0] += batch_masked_count(&micro[k], b);
            counts[2] += len;
            counts[3] += len * len;
        }
        counts[1] += micro[k].B;
    }
    dist_sum_doubles(counts, 4);
    s.n_pred = (long)counts[0];
    s.sequences = (long)counts[1];
    s.real_tokens = counts[2];
    s.real_tokens_sq = counts[3];
    float scale = (float)scaler->scale;
    bert_zero_grads(m);
    double sums[4] = {0.0, 0.0, 0.0, 0.0};  // MLM loss, NSP loss, MLM hits, NSP hits
    // Micro-batch k of this rank is number first + k of the run (schedule_first_micro_batch),
    // so the dropout masks do not depend on how the global batch is split over ranks.
    int zero = zero_active(), on_device = comm_active() && !zero;
    for (int k = 0; k < accum; k++) {
        bert_losses l = bert_forward(m, &micro[k], dropout, seed, first + (uint32_t)k);
        // The last backward of the step hands each finished range of gradients to the sum.
        m->grads_ready = k < accum - 1 ? NULL : on_device ? comm_grads_ready : zero_grads_hook();
        bert_backward_weighted(m, s.n_pred ? scale / (float)s.n_pred : 0.0f, scale / (float)s.sequences);
        m->grads_ready = NULL;
        sums[0] += l.mlm_sum;
        sums[1] += l.nsp_sum;
        sums[2] += l.mlm_correct;
        sums[3] += l.nsp_correct;
    }
    // (Under ZeRO-1 zero_step reduce-scatters them, or waits for their per-bucket reduces.)
    if (on_device) {
        comm_wait("the gradient all-reduce (NCCL)");
    } else if (world > 1 && !zero) {
        // Summed through host memory (the CPU backends, or a CUDA build without NCCL).
        if (!m->h_grads) m->h_grads = xmalloc(m->n_params * sizeof(float));
        m->be->download(m->h_grads, m->grads, m->n_params * sizeof(float));
        dist_sum_floats(m->h_grads, m->n_params);
        m->be->upload(m->grads, m->h_grads, m->n_params * sizeof(float));
    }
    dist_sum_doubles(sums, 4);
    s.mlm_correct = (long)sums[2];
    s.nsp_correct = (long)sums[3];
    s.mlm_loss = s.n_pred ? sums[0] / s.n_pred : 0.0;
    s.nsp_loss = sums[1] / s.sequences;
    s.grad_norm = zero ? zero_step(m, opt, lr, scaler->scale)
                       : optim_step(opt, m->params, m->grads, m->table, m->n_tensors, lr, scaler->scale);
    s.skipped = !isfinite(s.grad_norm);
    if (!s.skipped && !zero) bert_sync_compute(m);
    loss_scaler_update(scaler, s.skipped);
    return s;
}
