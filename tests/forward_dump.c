// Test driver for the interop tests: loads a bertpre checkpoint (training or imported
// weights) and a batch from a safetensors file, runs the forward pass on the FP32 CPU
// backend with dropout off, and writes the encoder's last hidden states [B,T,C], the MLM
// logits at the masked positions [R,V] and the NSP logits [B,2] (none for an MLM-only model)
// to a safetensors file.
// usage: forward_dump CHECKPOINT BATCH OUT
#include <string.h>
#include "kernels/backend.h"
#include "engine/checkpoint.h"
#include "kernels/common/check.h"
#include "engine/model.h"
#include "engine/safetensors.h"
#include "tests/batch_io.h"

static float *download(const bert_model *m, const void *src, size_t n) {
    float *host = xmalloc(n * sizeof(float));
    m->be->download(host, src, n * sizeof(float));
    return host;
}

int main(int argc, char **argv) {
    if (argc != 4) fatal("usage: forward_dump CHECKPOINT BATCH OUT");
    checkpoint c;
    checkpoint_open(&c, argv[1]);
    st_file inputs;
    st_open(&inputs, argv[2]);
    batch_t batch;
    read_batch(&inputs, &batch);

    bert_model m;
    bert_init(&m, &c.model, &backend_cpu, batch.B, batch.T, batch.P);
    checkpoint_load_weights(&c, &m);
    // Padded: the hidden states of every row, padding rows included (transformers'
    // last_hidden_state has them); hf_parity checks the unpadded default against transformers.
    m.unpad = UNPAD_OFF;
    bert_losses l = bert_forward(&m, &batch, 0, 0, 0);
    int B = batch.B, T = batch.T, C = c.model.hidden_size, V = c.model.vocab_size, R = l.n_pred;
    float *hidden = download(&m, m.acts[c.model.num_hidden_layers - 1].out, (size_t)B * T * C);
    int Vp = bert_padded_vocab(&c.model);
    float *mlm = download(&m, m.mlm_logits, (size_t)R * Vp);
    for (int r = 0; r < R; r++) memmove(mlm + (size_t)r * V, mlm + (size_t)r * Vp, (size_t)V * sizeof(float));
    float *nsp = c.model.mlm_only ? NULL : download(&m, m.nsp_logits, (size_t)B * 2);
    st_entry entries[] = {{"hidden_states", "F32", 3, {B, T, C}, hidden},
                          {"mlm_logits", "F32", 2, {R, V}, mlm},
                          {"nsp_logits", "F32", 2, {B, 2}, nsp}};
    st_write(argv[3], entries, nsp ? 3 : 2, NULL);
    printf("forward_dump: %d sequences of %d tokens, %d masked positions, mlm loss %.6f, nsp loss %.6f\n", B, T, R,
           l.mlm_loss, l.nsp_loss);
    free(hidden), free(mlm), free(nsp);
    bert_free(&m);
    st_close(&inputs);
    checkpoint_close(&c);
    return 0;
}
