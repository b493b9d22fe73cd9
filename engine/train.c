#include "train.h"

step_stats train_step(bert_model *m, lamb_state *opt, const batch_t *micro, int accum, double lr, int dropout,
                      uint64_t seed, uint32_t step) {
    // FP32 gradients need no loss scaling and cannot overflow: scale 1, never skipped.
    step_stats s = {.loss_scale = 1.0, .skipped = 0};
    for (int k = 0; k < accum; k++) {
        for (int b = 0; b < micro[k].B; b++) s.n_pred += batch_masked_count(&micro[k], b);
        s.sequences += micro[k].B;
    }
    bert_zero_grads(m);
    double mlm = 0.0, nsp = 0.0;
    for (int k = 0; k < accum; k++) {
        // The dropout counter is step * accum + k: every micro-batch of a step draws fresh masks.
        bert_losses l = bert_forward(m, &micro[k], dropout, seed, step * (uint32_t)accum + (uint32_t)k);
        bert_backward_weighted(m, s.n_pred ? 1.0f / (float)s.n_pred : 0.0f, 1.0f / (float)s.sequences);
        mlm += l.mlm_sum;
        nsp += l.nsp_sum;
        s.mlm_correct += l.mlm_correct;
        s.nsp_correct += l.nsp_correct;
    }
    s.mlm_loss = s.n_pred ? mlm / s.n_pred : 0.0;
    s.nsp_loss = nsp / s.sequences;
    s.grad_norm = lamb_step(opt, m->params, m->grads, m->table, m->n_tensors, lr, 1.0);
    bert_sync_compute(m);
    return s;
}
