// Finite-difference check of the whole BertForPreTraining backward, in double precision on
// the "cpu64" backend: tiny config (2 layers, 3 heads), padding inside the batch, several
// masked positions, dropout on (the counter-based generator makes the forward a fixed
// function of the weights). Every parameter of every tensor is perturbed. The model runs
// unpadded (train.unpad auto, the default: the batch has padding), so this checks the
// unpadded path; test_unpad ties the padded one to it (equal to ~1e-15 in cpu64).
// Tolerance 1e-6 relative per tensor: central differences with h = 1e-5 in double give
// errors of order 1e-9 here (see the gradient mode of test_ops.cpp); a wrong rule gives order 1.
#include <string.h>
#include "kernels/backend.h"
#include "engine/model.h"
#include "data/synthetic.h"
#include "tests/test_util.h"

int main(void) {
    bert_config cfg = {.vocab_size = 29, .hidden_size = 12, .num_hidden_layers = 2, .num_attention_heads = 3,
                       .intermediate_size = 20, .max_position_embeddings = 16, .type_vocab_size = 2,
                       .pad_token_id = 0, .hidden_dropout_prob = 0.1, .attention_probs_dropout_prob = 0.1,
                       .initializer_range = 0.5, .layer_norm_eps = 1e-12};
    int B = 3, T = 9, P = 4;
    bert_model m;
    bert_init(&m, &cfg, &backend_cpu64, B, T, P);
    bert_init_weights(&m, 5);
    m.unpad = UNPAD_AUTO;
    // Non-trivial LayerNorm and bias values, so that their gradients are exercised fully.
    double *w = m.params_compute;
    for (int i = 0; i < m.n_tensors; i++)
        if (m.table[i].ndim == 1)
            for (size_t k = 0; k < m.table[i].numel; k++)
                w[m.table[i].offset + k] += 0.3 * (rand_uniform(40 + i, k) - 0.5);

    batch_t batch;
    batch_alloc(&batch, B, T, P);
    synthetic_batch(&batch, cfg.vocab_size, 11, 0);
    // Make sure of the shape of the case: padding in sequence 1, masked positions everywhere.
    for (int t = 6; t < T; t++) batch.input_ids[T + t] = 0, batch.input_mask[T + t] = 0, batch.segment_ids[T + t] = 0;
    batch.input_ids[T + 5] = 3;
    int positions[3][4] = {{1, 3, 7, 0}, {2, 4, 0, 0}, {1, 2, 5, 6}};
    for (int b = 0; b < B; b++)
        for (int p = 0; p < P; p++) {
            batch.masked_lm_positions[b * P + p] = positions[b][p];
            batch.masked_lm_ids[b * P + p] = positions[b][p] ? 5 + (b * 7 + p * 3) % 20 : 0;
        }
    batch.next_sentence_labels[0] = 1, batch.next_sentence_labels[1] = 0, batch.next_sentence_labels[2] = 1;

    bert_zero_grads(&m);
    bert_losses l = bert_forward(&m, &batch, 1, 77, 4);
    printf("loss %.6f (mlm %.6f over %d positions, nsp %.6f)\n", l.loss, l.mlm_loss, l.n_pred, l.nsp_loss);
    expect_true("9 masked positions counted", l.n_pred == 9);
    printf("%d real tokens of %d\n", m.cur_rows, B * T);
    expect_true("unpadded: the real tokens' rows only", m.cur_packed && m.cur_rows < B * T);
    bert_backward(&m, 1.0f);
    const double *g = m.grads;
    const double h = 1e-5;
    for (int i = 0; i < m.n_tensors; i++) {
        const param_info *p = &m.table[i];
        double *numeric = malloc(p->numel * sizeof(double));
        for (size_t k = 0; k < p->numel; k++) {
            double saved = w[p->offset + k];
            w[p->offset + k] = saved + h;
            double up = bert_forward(&m, &batch, 1, 77, 4).loss;
            w[p->offset + k] = saved - h;
            double down = bert_forward(&m, &batch, 1, 77, 4).loss;
            w[p->offset + k] = saved;
            numeric[k] = (up - down) / (2 * h);
        }
        double ref = 0.0, got = 0.0;
        for (size_t k = 0; k < p->numel; k++) ref += numeric[k] * numeric[k], got += g[p->offset + k] * g[p->offset + k];
        if (sqrt(ref) < 1e-8) {
            // The key bias adds q.b to every score of a row, which softmax ignores: its true
            // gradient is 0, and both sides must be 0 up to rounding.
            printf("     %s: gradient is zero (|numeric| %.1e, |analytic| %.1e)\n", p->name, sqrt(ref), sqrt(got));
            expect_true(p->name, sqrt(got) < 1e-8);
        } else {
            expect_close(p->name, rel_error(g + p->offset, numeric, p->numel), 1e-6);
        }
        free(numeric);
    }
    // Dropout really is on: the same weights without dropout give another loss.
    double eval_loss = bert_forward(&m, &batch, 0, 77, 4).loss;
    expect_true("dropout changes the loss (train != eval)", fabs(eval_loss - l.loss) > 1e-6);
    batch_free(&batch);
    bert_free(&m);
    printf("%s\n", test_failures ? "FAILED" : "whole-model gradients agree with finite differences");
    return test_failures ? 1 : 0;
}
