// Test driver for the comparison with transformers: loads a BertConfig JSON, weights and a
// batch from safetensors files, runs forward and backward on the FP32 CPU backend with
// dropout off, and writes the loss, the MLM logits at the masked positions, the NSP logits
// and the gradient of every parameter ("grad." + name) to a safetensors file. With `mlm`, the
// MLM-only model (train.objective mlm: no pooler, no NSP head, no NSP logits written).
// usage: model_dump CONFIG WEIGHTS BATCH OUT [mlm]
#include <string.h>
#include "kernels/backend.h"
#include "kernels/common/check.h"
#include "engine/model.h"
#include "engine/safetensors.h"
#include "tests/batch_io.h"

int main(int argc, char **argv) {
    if (argc != 5 && (argc != 6 || strcmp(argv[5], "mlm") != 0))
        fatal("usage: model_dump CONFIG WEIGHTS BATCH OUT [mlm]");
    bert_config cfg;
    bert_config_load(&cfg, argv[1]);
    cfg.mlm_only = argc == 6;
    st_file weights, inputs;
    st_open(&weights, argv[2]);
    st_open(&inputs, argv[3]);
    batch_t batch;
    read_batch(&inputs, &batch);

    bert_model m;
    bert_init(&m, &cfg, &backend_cpu, batch.B, batch.T, batch.P);
    for (int i = 0; i < m.n_tensors; i++) {
        const param_info *p = &m.table[i];
        const st_tensor *t = st_find(&weights, p->name);
        if (!t) fatal("%s: missing tensor '%s'", weights.path, p->name);
        if (t->numel != p->numel) fatal("%s: tensor '%s' has %zu elements, expected %zu", weights.path, p->name,
                                        t->numel, p->numel);
        st_read_float(&weights, t, m.params + p->offset);
    }
    bert_sync_compute(&m);
    bert_zero_grads(&m);
    bert_losses l = bert_forward(&m, &batch, 0, 0, 0);
    int R = l.n_pred, V = cfg.vocab_size, Vp = bert_padded_vocab(&cfg);
    float *mlm_logits = xmalloc((size_t)R * V * sizeof(float)), nsp_logits[2 * 64];
    if (batch.B > 64) fatal("model_dump: at most 64 sequences");
    for (int r = 0; r < R; r++)  // the real vocabulary's columns of the padded rows
        memcpy(mlm_logits + (size_t)r * V, (const float *)m.mlm_logits + (size_t)r * Vp, (size_t)V * sizeof(float));
    if (!cfg.mlm_only) memcpy(nsp_logits, m.nsp_logits, (size_t)batch.B * 2 * sizeof(float));
    bert_backward(&m, 1.0f);

    float losses[3] = {(float)l.loss, (float)l.mlm_loss, (float)l.nsp_loss};
    int heads = cfg.mlm_only ? 2 : 3, n = heads + m.n_tensors;
    st_entry *entries = xcalloc(n, sizeof(st_entry));
    char (*names)[128] = xcalloc(m.n_tensors, 128);
    entries[0] = (st_entry){"loss", "F32", 1, {3}, losses};
    entries[1] = (st_entry){"mlm_logits", "F32", 2, {R, V}, mlm_logits};
    entries[2] = (st_entry){"nsp_logits", "F32", 2, {batch.B, 2}, nsp_logits};
    for (int i = 0; i < m.n_tensors; i++) {
        const param_info *p = &m.table[i];
        snprintf(names[i], 128, "grad.%s", p->name);
        entries[heads + i] = (st_entry){names[i], "F32", p->ndim, {p->shape[0], p->shape[1]},
                                    (float *)m.grads + p->offset};
    }
    st_write(argv[4], entries, n, NULL);
    printf("model_dump: loss %.6f (mlm %.6f, nsp %.6f), %d masked positions\n", l.loss, l.mlm_loss, l.nsp_loss, R);
    free(entries), free(names), free(mlm_logits);
    bert_free(&m);
    st_close(&weights);
    st_close(&inputs);
    return 0;
}
