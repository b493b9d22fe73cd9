// Test driver for the training-parity comparison: runs the steps of `bertpre train` (the
// same calls in the same order: synthetic micro-batches numbered iteration x accum + k,
// the config's schedule at the count of applied updates + 1, train_step) on the CPU backend with
// dropout off, and writes what an independent run needs to repeat them: the initial
// weights (Hugging Face names), every micro-batch (stacked in order, in the shard schema),
// and per step the MLM and NSP losses and the learning rate. Every other sequence of the
// synthetic micro-batches is cut to a length from 2 ([CLS][SEP]) up, so that the micro-batches
// are padding-heavy (about a quarter of the tokens) and the model, at train.unpad's default, computes
// only their real tokens.
// usage: train_dump CONFIG OUT
#include <string.h>
#include "kernels/backend.h"
#include "kernels/common/check.h"
#include "engine/config.h"
#include "engine/safetensors.h"
#include "engine/schedule.h"
#include "data/synthetic.h"
#include "engine/train.h"

// Odd rows cut to length 2 + (a draw) % (T - 2): padding after them (ids 0, segments 0, mask
// 0) and only the masked positions inside them kept (the list stays ascending, zero-ended).
static void cut_odd_rows(batch_t *batch, uint64_t seed, uint32_t index) {
    int T = batch->T, P = batch->P;
    for (int b = 1; b < batch->B; b += 2) {
        int L = 2 + (int)(philox_draw(seed, index, 901, (uint64_t)b) % (uint32_t)(T - 2));
        for (int t = L; t < T; t++) {
            batch->input_ids[b * T + t] = 0, batch->segment_ids[b * T + t] = 0, batch->input_mask[b * T + t] = 0;
        }
        for (int p = 0; p < P; p++)
            if (batch->masked_lm_positions[b * P + p] >= L - 1)
                batch->masked_lm_positions[b * P + p] = batch->masked_lm_ids[b * P + p] = 0;
        batch->input_ids[b * T + L - 1] = SYNTH_SEP;
    }
}

int main(int argc, char **argv) {
    if (argc != 3) fatal("usage: train_dump CONFIG OUT");
    run_config cfg;
    run_config_load(&cfg, argv[1], 0, NULL, 1);
    const train_config *t = &cfg.train;
    int B = t->micro_batch_size, T = t->seq_length, P = t->max_predictions_per_seq, accum = t->accumulation_steps;
    long n_micro = (long)t->steps * accum;

    bert_model m;
    bert_init(&m, &cfg.model, &backend_cpu, B, T, P);
    bert_init_weights(&m, (uint64_t)t->seed);
    m.label_smoothing = (float)t->label_smoothing;
    float *init = xmalloc(m.n_params * sizeof(float));
    memcpy(init, m.params, m.n_params * sizeof(float));
    optim_state opt;
    optim_init_config(&opt, t, m.be, m.n_params);
    loss_scaler scaler;  // FP32 on the CPU: a static scale of 1
    loss_scaler_init(&scaler, 0, 1.0, 2000, 1.0, 1);

    batch_t all;  // every micro-batch of the run, stacked
    batch_alloc(&all, (int)(n_micro * B), T, P);
    float *mlm = xmalloc(t->steps * sizeof(float)), *nsp = xmalloc(t->steps * sizeof(float));
    float *lrs = xmalloc(t->steps * sizeof(float));
    batch_t *micro = xcalloc(accum, sizeof(batch_t));
    for (int step = 0; step < t->steps; step++) {
        for (int k = 0; k < accum; k++) {
            micro[k] = batch_slice(&all, (int)((long)(step * accum + k) * B), B);
            synthetic_batch(&micro[k], cfg.model.vocab_size, (uint64_t)t->seed, (uint32_t)(step * accum + k));
            cut_odd_rows(&micro[k], (uint64_t)t->seed, (uint32_t)(step * accum + k));
        }
        double lr = schedule_config_lr(t, opt.step + 1);
        step_stats s = train_step(&m, &opt, &scaler, micro, accum, lr, 0, (uint64_t)t->seed, (uint32_t)step);
        mlm[step] = (float)s.mlm_loss, nsp[step] = (float)s.nsp_loss, lrs[step] = (float)lr;
        printf("step %d: lr %.4e, mlm loss %.6f, nsp loss %.6f, gradient norm %.4g\n", step + 1, lr, s.mlm_loss,
               s.nsp_loss, s.grad_norm);
    }

    int n = m.n_tensors + 9;
    st_entry *out = xcalloc(n, sizeof(st_entry));
    char (*names)[128] = xcalloc(m.n_tensors, 128);
    for (int i = 0; i < m.n_tensors; i++) {
        const param_info *p = &m.table[i];
        snprintf(names[i], 128, "init.%s", p->name);
        out[i] = (st_entry){names[i], "F32", p->ndim, {p->shape[0], p->shape[1]}, init + p->offset};
    }
    int k = m.n_tensors, rows = all.B;
    out[k++] = (st_entry){"input_ids", "I32", 2, {rows, T}, all.input_ids};
    out[k++] = (st_entry){"input_mask", "I32", 2, {rows, T}, all.input_mask};
    out[k++] = (st_entry){"segment_ids", "I32", 2, {rows, T}, all.segment_ids};
    out[k++] = (st_entry){"masked_lm_positions", "I32", 2, {rows, P}, all.masked_lm_positions};
    out[k++] = (st_entry){"masked_lm_ids", "I32", 2, {rows, P}, all.masked_lm_ids};
    out[k++] = (st_entry){"next_sentence_labels", "I32", 1, {rows}, all.next_sentence_labels};
    out[k++] = (st_entry){"mlm_loss", "F32", 1, {t->steps}, mlm};
    out[k++] = (st_entry){"nsp_loss", "F32", 1, {t->steps}, nsp};
    out[k++] = (st_entry){"lr", "F32", 1, {t->steps}, lrs};
    st_write(argv[2], out, n, NULL);

    free(out), free(names), free(micro), free(mlm), free(nsp), free(lrs), free(init);
    batch_free(&all);
    optim_free(&opt);
    bert_free(&m);
    return 0;
}
