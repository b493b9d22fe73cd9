// Unpadded equals padded: the whole BertForPreTraining, forward and backward with dropout
// on, once over all B x T rows (train.unpad off) and once over the real tokens only
// (unpad on: one [N_real, C] activation, attention over the sequence offsets, dropout keyed
// by the padded element index), on the same backend, weights and batch. The padded run is
// the reference: its padding rows are computed but, masked as keys and never gathered,
// reach no loss, so both runs compute the same function; what may differ is rounding that
// depends on a row's place in the layout (below).
// One batch holds lengths 2 ([CLS][SEP]) to T with at least one full row; masked positions
// in every sequence. Compared: the loss, its MLM and NSP parts, and every tensor's gradient.
// Tolerances (relative, per tensor): FP64 (cpu64) 1e-12: the same function, ~2e-15 seen.
// FP32 5e-6, not 1e-6: OpenBLAS's sgemm rounds a row by where it sits in the call (0.3.21's
// Zen kernel takes rows in groups of 12 and rounds positions 0-5, 6-11 and the tail rows
// each in their own way; with two threads the split moves them too), and a token is row
// b*T + t padded but seq_offsets[b] + t unpadded. The loss moves by ~1e-7, the gradients by
// up to 1.3e-6 (cpu, 1 or 2 BLAS threads) and 1.7e-6 (cuda_emu_fp32, whose matmuls go to
// the same GEMM), in layer 0's query and key, the embeddings' LayerNorm and the positions.
// With the plain-loop GEMM (CPU_GEMM_LOOPS) in the forward GEMMs only, 4.2e-7 of cpu's
// 1.05e-6 (one BLAS thread) remain; in the forward and input-gradient GEMMs 6.8e-8; in all
// of them nothing: cpu agrees to the last bit, cuda_emu_fp32 to 1.8e-7. But the loops take
// 2.2x the CPU time of a training step of tools/bench_unpad.sh's model at seq 128 (2.3 s ->
// 5.0 s over 10 steps, one thread), so the BLAS stays the default and the tolerance with it;
// under BERTPRE_CPU_GEMM=loops (tests unpad_cpu_loops, unpad_cuda_emu_fp32_loops) the
// tolerance is the 1e-6.
// FP16 5e-3 and BF16 4e-2, the op tests' tolerances (tests/test_ops.cpp): there the
// loss is the same to the last bit and the gradients differ by up to 8.4e-5 (FP16, in the
// embeddings' tensors) and 1.3e-7 (BF16). A wrong row, offset or dropout mask gives ~1.
//
// The same on a GPU (test_unpad_gpu, the GPU suite's model part): cuda_fp32, cuda_fp16 and
// cuda_bf16 with the emulated backends' tolerances (cuBLASLt's sums are in another order
// than the CPU's in both runs alike; ~1e-6 FP32 expected from the emulated runs).
//
// usage: test_unpad cpu|cpu64|cuda_emu_fp32|cuda_emu_fp16|cuda_emu_bf16
//        test_unpad_gpu cuda_fp32|cuda_fp16|cuda_bf16
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/backend.h"
#include "engine/model.h"
#include "data/synthetic.h"
#include "tests/test_util.h"
#ifdef TEST_UNPAD_CUDA_GPU
#include "tests/gpu_required.h"
#endif

static const backend_t *backend_named(const char *name, double *tol) {
    // FP32 with BERTPRE_CPU_GEMM=loops: the 1e-6 (cpu: 0 seen, cuda_emu_fp32: 1.8e-7).
    const char *gemm = getenv("BERTPRE_CPU_GEMM");
    double fp32 = gemm && !strcmp(gemm, "loops") ? 1e-6 : 5e-6;
    *tol = fp32;
    if (!strcmp(name, "cpu")) return &backend_cpu;
    *tol = 1e-12;
    if (!strcmp(name, "cpu64")) return &backend_cpu64;
    *tol = fp32;
#ifdef TEST_UNPAD_CUDA_EMU
    if (!strcmp(name, "cuda_emu_fp32")) return &backend_cuda_emu_fp32;
    *tol = !strcmp(name, "cuda_emu_fp16") ? 5e-3 : 4e-2;
    if (!strcmp(name, "cuda_emu_fp16")) return &backend_cuda_emu_fp16;
    if (!strcmp(name, "cuda_emu_bf16")) return &backend_cuda_emu_bf16;
#elif defined(TEST_UNPAD_CUDA_GPU)
    int missing = gpu_missing_exit_status();
    if (missing) exit(missing);
    if (!strcmp(name, "cuda_fp32")) return &backend_cuda_fp32;
    *tol = !strcmp(name, "cuda_fp16") ? 5e-3 : 4e-2;
    if (!strcmp(name, "cuda_fp16")) return &backend_cuda_fp16;
    if (!strcmp(name, "cuda_bf16")) return &backend_cuda_bf16;
#else
    if (!strncmp(name, "cuda_emu", 8)) {
        printf("SKIP: the CUDA emulation is not built (no CUDA headers)\n");
        exit(77);
    }
#endif
    fprintf(stderr, "usage: test_unpad cpu|cpu64|cuda_emu_fp32|cuda_emu_fp16|cuda_emu_bf16|cuda_fp32|cuda_fp16|cuda_bf16 "
            "(not '%s'; cuda_* only in test_unpad_gpu)\n", name);
    exit(2);
}

// Gradients as doubles, whatever the backend's accumulator type.
static double *download_grads(const bert_model *m) {
    size_t n = m->n_params, S = m->be->acc_size;
    char *raw = malloc(n * S);
    double *g = malloc(n * sizeof(double));
    m->be->download(raw, m->grads, n * S);
    for (size_t i = 0; i < n; i++) g[i] = S == sizeof(double) ? ((double *)raw)[i] : ((float *)raw)[i];
    free(raw);
    return g;
}

static bert_losses run(bert_model *m, const batch_t *batch, int unpad, double **grads) {
    m->unpad = unpad;
    bert_zero_grads(m);
    bert_losses l = bert_forward(m, batch, 1, 1234, 7);
    bert_backward(m, 1.0f);
    *grads = download_grads(m);
    return l;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_unpad cpu|cpu64|cuda_emu_fp32|cuda_emu_fp16|cuda_emu_bf16\n");
        return 2;
    }
    double tol;
    const backend_t *be = backend_named(argv[1], &tol);
    // Head size 32 and T = 40: the fused CUDA attention kernels in FP16/BF16 (one full key
    // tile and one partial); hidden 64 is a whole number of dropout groups of eight.
    bert_config cfg = {.vocab_size = 50, .hidden_size = 64, .num_hidden_layers = 2, .num_attention_heads = 2,
                       .intermediate_size = 96, .max_position_embeddings = 64, .type_vocab_size = 2,
                       .pad_token_id = 0, .hidden_dropout_prob = 0.1, .attention_probs_dropout_prob = 0.1,
                       .initializer_range = 0.2, .layer_norm_eps = 1e-12};
    int B = 6, T = 40, P = 4;
    int lengths[6] = {23, 2, 40, 9, 31, 3};  // [CLS][SEP] alone, a full row, ragged rest
    bert_model m;
    bert_init(&m, &cfg, be, B, T, P);
    bert_init_weights(&m, 3);

    batch_t batch;
    batch_alloc(&batch, B, T, P);
    synthetic_batch(&batch, cfg.vocab_size, 5, 0);
    int n_real = 0;
    for (int b = 0; b < B; b++) {
        int L = lengths[b];
        n_real += L;
        for (int t = 0; t < T; t++) {
            int *id = &batch.input_ids[b * T + t];
            if (t >= L) *id = SYNTH_PAD, batch.segment_ids[b * T + t] = 0;
            else if (t == 0) *id = SYNTH_CLS;
            else if (t == L - 1) *id = SYNTH_SEP;
            else if (*id < SYNTH_FIRST_WORD) *id = SYNTH_FIRST_WORD + (b + t) % 40;
            batch.input_mask[b * T + t] = t < L;
        }
        // Masked positions inside the real tokens (none for [CLS][SEP] alone).
        for (int p = 0; p < P; p++) {
            int pos = L > 2 && p < L - 2 ? 1 + (p * 7 + b) % (L - 2) : 0;
            for (int q = 0; q < p; q++)
                if (batch.masked_lm_positions[b * P + q] == pos) pos = 0;
            batch.masked_lm_positions[b * P + p] = pos;
            batch.masked_lm_ids[b * P + p] = pos ? SYNTH_FIRST_WORD + (b * 5 + p) % 40 : 0;
        }
        // batch_masked_count stops at the first 0: keep the valid positions first.
        int k = 0;
        for (int p = 0; p < P; p++)
            if (batch.masked_lm_positions[b * P + p]) {
                batch.masked_lm_positions[b * P + k] = batch.masked_lm_positions[b * P + p];
                batch.masked_lm_ids[b * P + k++] = batch.masked_lm_ids[b * P + p];
            }
        for (; k < P; k++) batch.masked_lm_positions[b * P + k] = batch.masked_lm_ids[b * P + k] = 0;
    }
    printf("%s: B=%d T=%d, %d real tokens of %d (%.0f%% padding)\n", be->name, B, T, n_real, B * T,
           100.0 * (B * T - n_real) / (B * T));

    double *g_pad, *g_unpad;
    bert_losses pad = run(&m, &batch, UNPAD_OFF, &g_pad);
    expect_true("padded run: all B x T rows", m.cur_rows == B * T && !m.cur_packed);
    bert_losses unpad = run(&m, &batch, UNPAD_ON, &g_unpad);
    expect_true("unpadded run: the real tokens' rows only", m.cur_rows == n_real && m.cur_packed);
    printf("loss padded %.9f unpadded %.9f (mlm %.9f / %.9f over %d / %d positions, nsp %.9f / %.9f)\n", pad.loss,
           unpad.loss, pad.mlm_loss, unpad.mlm_loss, pad.n_pred, unpad.n_pred, pad.nsp_loss, unpad.nsp_loss);
    expect_true("same masked positions", pad.n_pred == unpad.n_pred && pad.n_pred > 10);
    expect_close("MLM loss", fabs(unpad.mlm_loss - pad.mlm_loss) / fabs(pad.mlm_loss), tol);
    expect_close("NSP loss", fabs(unpad.nsp_loss - pad.nsp_loss) / fabs(pad.nsp_loss), tol);
    double worst = 0.0;
    for (int i = 0; i < m.n_tensors; i++) {
        const param_info *p = &m.table[i];
        double ref = 0.0, err = 0.0;
        for (size_t k = 0; k < p->numel; k++) {
            double a = g_pad[p->offset + k], d = g_unpad[p->offset + k] - a;
            ref += a * a, err += d * d;
        }
        // The attention key bias: zero in exact arithmetic (softmax is shift invariant), so
        // both are rounding noise; compared against the value bias's gradient instead.
        if (strstr(p->name, "attention.self.key.bias")) {
            const param_info *v = &m.table[i + 1];
            double vref = 0.0;
            for (size_t k = 0; k < v->numel; k++) vref += g_pad[v->offset + k] * g_pad[v->offset + k];
            ref = vref;
        }
        double rel = ref > 0.0 ? sqrt(err / ref) : sqrt(err);
        if (rel > worst) worst = rel;
        expect_close(p->name, rel, tol);
    }
    printf("all %d gradients: largest relative difference %.3e (tolerance %.0e)\n", m.n_tensors, worst, tol);

    // Dropout is on in both runs (they would agree trivially without it).
    double eval_loss = bert_forward(&m, &batch, 0, 1234, 7).loss;
    expect_true("dropout changes the loss (train != eval)", fabs(eval_loss - pad.loss) > 1e-4);
    // auto: unpadded exactly when the micro-batch has padding.
    m.unpad = UNPAD_AUTO;
    bert_forward(&m, &batch, 0, 1234, 7);
    expect_true("auto unpads a micro-batch with padding", m.cur_packed);
    batch_t full = batch_slice(&batch, 2, 1);
    bert_forward(&m, &full, 0, 1234, 7);
    expect_true("auto keeps a micro-batch without padding padded", !m.cur_packed && m.cur_rows == T);

    free(g_pad), free(g_unpad);
    batch_free(&batch);
    bert_free(&m);
    printf("%s\n", test_failures ? "FAILED" : "unpadded training computes the padded model's loss and gradients");
    return test_failures ? 1 : 0;
}
