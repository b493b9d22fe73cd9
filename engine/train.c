#include "train.h"
#include <math.h>

step_stats train_step(bert_model *m, lamb_state *opt, loss_scaler *scaler, const batch_t *micro, int accum,
                      double lr, int dropout, uint64_t seed, uint32_t step) {
    step_stats s = {0};
    for (int k = 0; k < accum; k++) {
        for (int b = 0; b < micro[k].B; b++) s.n_pred += batch_masked_count(&micro[k], b);
        s.sequences += micro[k].B;
    }
    s.loss_scale = scaler->scale;
    float scale = (float)scaler->scale;
    bert_zero_grads(m);
    double mlm = 0.0, nsp = 0.0;
    for (int k = 0; k < accum; k++) {
        // The dropout counter is step * accum + k: every micro-batch of a step draws fresh masks.
        bert_losses l = bert_forward(m, &micro[k], dropout, seed, step * (uint32_t)accum + (uint32_t)k);
        bert_backward_weighted(m, s.n_pred ? scale / (float)s.n_pred : 0.0f, scale / (float)s.sequences);
        mlm += l.mlm_sum;
        nsp += l.nsp_sum;
        s.mlm_correct += l.mlm_correct;
        s.nsp_correct += l.nsp_correct;
    }
    s.mlm_loss = s.n_pred ? mlm / s.n_pred : 0.0;
    s.nsp_loss = nsp / s.sequences;
    s.grad_norm = lamb_step(opt, m->params, m->grads, m->table, m->n_tensors, lr, scaler->scale);
    s.overflow = !isfinite(s.grad_norm);
    if (!s.overflow) bert_sync_compute(m);
    loss_scaler_update(scaler, s.overflow);
    s.skipped = scaler->skipped;
    return s;
}
