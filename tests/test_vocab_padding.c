// The padded vocabulary (V = 37 -> 40 inside the model) on the FP32 CPU backend:
//   - the table (what checkpoints, exports and LAMB see) keeps the real size, with the three
//     padding rows of the word embeddings and the MLM bias reserved after them, zero after
//     initialization;
//   - a padding logit of 1e6 (the MLM bias's padding entries set to it, far above every real
//     logit) changes nothing: MLM/NSP losses, the real logits and every gradient are bitwise
//     those of the run with zero padding, the padding gets gradient 0, and with each target
//     set to the row's argmax over the real classes (found here from the logits) every masked
//     position is an argmax hit in both runs — so no padding column wins an argmax.
#include <string.h>
#include "data/synthetic.h"
#include "engine/model.h"
#include "kernels/backend.h"
#include "tests/test_util.h"

static const param_info *find(const bert_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->table[i].name, name)) return &m->table[i];
    return NULL;
}

int main(void) {
    bert_config cfg = {.vocab_size = 37, .hidden_size = 16, .num_hidden_layers = 2, .num_attention_heads = 2,
                       .intermediate_size = 32, .max_position_embeddings = 32, .type_vocab_size = 2,
                       .pad_token_id = 0, .hidden_dropout_prob = 0.1, .attention_probs_dropout_prob = 0.1,
                       .initializer_range = 0.02, .layer_norm_eps = 1e-12};
    enum { B = 4, T = 16, P = 3, V = 37, VP = 40, C = 16 };
    expect_true("bert_padded_vocab(37) = 40", bert_padded_vocab(&cfg) == VP);
    bert_model m;
    bert_init(&m, &cfg, &backend_cpu, B, T, P);
    bert_init_weights(&m, 5);
    const param_info *wte = find(&m, "bert.embeddings.word_embeddings.weight");
    const param_info *wpe = find(&m, "bert.embeddings.position_embeddings.weight");
    const param_info *bias = find(&m, "cls.predictions.bias");
    const param_info *after_bias = find(&m, "cls.predictions.transform.dense.weight");
    expect_true("table: word embeddings [37, 16], MLM bias [37] (the real size)",
                wte && bias && wte->shape[0] == V && wte->numel == (size_t)V * C && bias->numel == V);
    expect_true("flat buffer: 3 padding rows reserved after each",
                wpe->offset >= wte->offset + (size_t)VP * C && after_bias->offset >= bias->offset + VP);
    int zero = 1;
    for (size_t i = (size_t)V * C; i < (size_t)VP * C; i++) zero &= m.params[wte->offset + i] == 0.0f;
    for (int i = V; i < VP; i++) zero &= m.params[bias->offset + i] == 0.0f;
    expect_true("padding rows are zero after initialization", zero);

    batch_t batch;
    batch_alloc(&batch, B, T, P);
    synthetic_batch(&batch, V, 9, 0);
    // Targets = each masked row's argmax over the real classes (targets do not change logits).
    bert_losses first = bert_forward(&m, &batch, 1, 9, 0);  // the same dropout as the runs below
    int R = first.n_pred, r = 0;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < batch_masked_count(&batch, b); p++, r++) {
            const float *row = (const float *)m.mlm_logits + (size_t)r * VP;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (row[v] > row[best]) best = v;
            batch.masked_lm_ids[b * P + p] = best;
        }

    float *logits[2], *grads[2];
    bert_losses l[2];
    for (int run = 0; run < 2; run++) {
        if (run == 1)
            for (int i = V; i < VP; i++) m.params[bias->offset + i] = 1e6f;  // CPU: the compute copy itself
        bert_zero_grads(&m);
        l[run] = bert_forward(&m, &batch, 1, 9, 0);
        logits[run] = malloc((size_t)R * VP * sizeof(float));
        memcpy(logits[run], m.mlm_logits, (size_t)R * VP * sizeof(float));
        bert_backward(&m, 1.0f);
        grads[run] = malloc(m.n_params * sizeof(float));
        memcpy(grads[run], m.grads, m.n_params * sizeof(float));
    }
    printf("mlm loss %.6f / %.6f, nsp loss %.6f / %.6f, hits %d / %d of %d\n", l[0].mlm_loss, l[1].mlm_loss,
           l[0].nsp_loss, l[1].nsp_loss, l[0].mlm_correct, l[1].mlm_correct, R);
    expect_true("the padding logits carry the 1e6", logits[1][V] == 1e6f && logits[0][V] == 0.0f);
    expect_true("MLM and NSP losses bitwise equal with a 1e6 padding logit",
                l[0].mlm_loss == l[1].mlm_loss && l[0].nsp_loss == l[1].nsp_loss && R > 0);
    expect_true("every masked position is an argmax hit in both runs (no padding column wins)",
                l[0].mlm_correct == R && l[1].mlm_correct == R);
    int same = 1;
    for (int i = 0; i < R; i++)
        for (int v = 0; v < V; v++) same &= logits[0][(size_t)i * VP + v] == logits[1][(size_t)i * VP + v];
    expect_true("real logits bitwise equal", same);
    expect_true("every gradient bitwise equal (padding gradients 0)",
                memcmp(grads[0], grads[1], m.n_params * sizeof(float)) == 0);
    int pad_grad_zero = 1;
    for (int i = V; i < VP; i++) pad_grad_zero &= ((float *)m.grads)[bias->offset + i] == 0.0f;
    for (size_t i = (size_t)V * C; i < (size_t)VP * C; i++) pad_grad_zero &= ((float *)m.grads)[wte->offset + i] == 0.0f;
    expect_true("padding rows of the word-embedding and MLM-bias gradients are 0", pad_grad_zero);
    for (int run = 0; run < 2; run++) free(logits[run]), free(grads[run]);
    batch_free(&batch);
    bert_free(&m);
    return test_failures ? 1 : 0;
}
