// Gradient accumulation is exact: 8 micro-batches of 4 sequences give the same weights as
// one batch of 32 after 5 LAMB steps (CPU FP32, dropout off, same data). The gradients are
// normalized by the global batch's masked positions and sequences, so the split changes
// only the summation order: relative error <= 1e-5 per tensor (FP32 rounding, ~1e-7 per
// step, amplified a little by LAMB's division by sqrt(v)).
#include <string.h>
#include "kernels/backend.h"
#include "data/synthetic.h"
#include "tests/test_util.h"
#include "engine/train.h"

int main(void) {
    bert_config cfg = {.vocab_size = 40, .hidden_size = 16, .num_hidden_layers = 2, .num_attention_heads = 2,
                       .intermediate_size = 32, .max_position_embeddings = 32, .type_vocab_size = 2,
                       .pad_token_id = 0, .hidden_dropout_prob = 0.1, .attention_probs_dropout_prob = 0.1,
                       .initializer_range = 0.02, .layer_norm_eps = 1e-12};
    enum { GLOBAL = 32, MICRO = 4, ACCUM = GLOBAL / MICRO, T = 24, P = 4, STEPS = 5 };
    bert_model whole, split;
    bert_init(&whole, &cfg, &backend_cpu, GLOBAL, T, P);
    bert_init(&split, &cfg, &backend_cpu, MICRO, T, P);
    bert_init_weights(&whole, 3);
    bert_init_weights(&split, 3);
    optim_state opt_whole, opt_split;
    optim_init(&opt_whole, OPTIM_LAMB, whole.be, whole.n_params);
    optim_init(&opt_split, OPTIM_LAMB, split.be, split.n_params);
    loss_scaler scaler_whole, scaler_split;  // FP32: a static scale of 1, as train sets it up
    loss_scaler_init(&scaler_whole, 0, 1.0, 2000, 1.0, 1);
    loss_scaler_init(&scaler_split, 0, 1.0, 2000, 1.0, 1);
    batch_t batch, micro[ACCUM];
    batch_alloc(&batch, GLOBAL, T, P);
    int uneven = 0;
    for (int step = 0; step < STEPS; step++) {
        synthetic_batch(&batch, cfg.vocab_size, 9, (uint32_t)step);
        for (int k = 0; k < ACCUM; k++) micro[k] = batch_slice(&batch, k * MICRO, MICRO);
        int first = 0;
        for (int b = 0; b < MICRO; b++) first += batch_masked_count(&batch, b);
        for (int k = 1; k < ACCUM; k++) {
            int count = 0;
            for (int b = 0; b < MICRO; b++) count += batch_masked_count(&micro[k], b);
            uneven |= count != first;
        }
        step_stats a = train_step(&whole, &opt_whole, &scaler_whole, &batch, 1, 5e-3, 0, 9, (uint32_t)step);
        step_stats b = train_step(&split, &opt_split, &scaler_split, micro, ACCUM, 5e-3, 0, 9, (uint32_t)(step * ACCUM));
        printf("step %d: mlm loss %.6f vs %.6f, nsp loss %.6f vs %.6f, %ld masked positions\n", step, a.mlm_loss,
               b.mlm_loss, a.nsp_loss, b.nsp_loss, a.n_pred);
        expect_true("same masked count and sequences", a.n_pred == b.n_pred && a.sequences == b.sequences);
        expect_close("step loss (whole batch vs accumulated)",
                     fabs(a.mlm_loss + a.nsp_loss - b.mlm_loss - b.nsp_loss) / (a.mlm_loss + a.nsp_loss), 1e-5);
    }
    expect_true("micro-batches hold different numbers of masked positions (the case that matters)", uneven);
    const float *pw = whole.params, *ps = split.params;
    for (int i = 0; i < whole.n_tensors; i++) {
        const param_info *p = &whole.table[i];
        if (strstr(p->name, "attention.self.key.bias")) {
            // Its true gradient is 0 (softmax ignores q.b_k); LAMB's m / sqrt(v) turns the
            // rounding noise it receives into full-size steps, different for every summation
            // order. Not comparable, by construction of the optimizer.
            printf("     %s: not compared (zero true gradient, update is normalized rounding noise)\n", p->name);
            continue;
        }
        double *a = malloc(p->numel * sizeof(double)), *b = malloc(p->numel * sizeof(double));
        for (size_t k = 0; k < p->numel; k++) a[k] = ps[p->offset + k], b[k] = pw[p->offset + k];
        expect_close(p->name, rel_error(a, b, p->numel), 1e-5);
        free(a), free(b);
    }
    batch_free(&batch);
    optim_free(&opt_whole), optim_free(&opt_split);
    bert_free(&whole), bert_free(&split);
    return test_failures ? 1 : 0;
}
