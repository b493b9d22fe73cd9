// The whole BertForPreTraining on the CUDA backend (emulated in CI, real in the GPU suite)
// against the FP32 CPU reference, with dropout on: both draw the same masks from the
// counter-based generator. Both models get the same weights, already rounded to the CUDA
// activation type, so what differs is the arithmetic only. Compared: MLM and NSP losses,
// MLM logits at the masked positions, NSP logits, and the gradient of every tensor; and the
// same for the MLM-only model (train.objective mlm: no pooler, no NSP head, no NSP loss).
// The same for a ModernBERT (model_type modernbert: RoPE, GeGLU, bias-free pre-LN, a sliding
// window in its local layers, dropout at its three sites), tiny, at 2 x 600 tokens (past the
// fused backward's 512: the attention dropout drawn again in the backward) and (--base) at
// ModernBERT-base's widths.
// Then: dynamic loss scaling with a forced overflow (skip, backoff, recovery, growth), and
// the memory plan of BERT-large at NVIDIA's A100-80GB micro-batches, MLM-only's without the
// NSP head's bytes.
//
// Tolerances (relative error per tensor): fp32 1e-4 (FP32 on both sides, different
// summation orders through two layers: ~1e-6 seen); fp16 3e-2 and bf16 2e-1: every
// activation is stored rounded (u = 2^-11, 2^-8) at about ten places per layer and the
// backward goes through LayerNorm and softmax, whose gradients cancel; errors seen are
// given in the output. A wrong kernel or a wrong dropout mask gives errors near 1.
// The attention key bias has an analytically zero gradient (softmax is shift invariant),
// so it is checked as tiny against the value bias instead of by relative error.
//
// usage: test_cuda_model_{emu,gpu} fp32|fp16|bf16 [--base]   (--base: the parity check at
// BERT-base widths, 2 layers, batch 4 x 128, as the GPU suite runs it)
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <string>
#include <vector>
extern "C" {
#include "engine/optim.h"
#include "engine/model.h"
#include "data/synthetic.h"
#include "engine/train.h"
}
#include "tests/test_util.h"
#ifdef TEST_REAL_GPU
#include <cuda_runtime_api.h>
#include "tests/gpu_required.h"
#endif

static int failures = 0;
static std::string prec;

static void expect(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (!ok) failures++;
}

static float round_act(float x) {
    if (prec == "fp16") return __half2float(__float2half_rn(x));
    if (prec == "bf16") return __bfloat162float(__float2bfloat16_rn(x));
    return x;
}

static std::vector<float> download_act(const backend_t *be, const void *src, size_t n) {
    std::vector<char> raw(n * be->act_size);
    be->download(raw.data(), src, raw.size());
    std::vector<float> out(n);
    for (size_t i = 0; i < n; i++) {
        if (be->act_size == 4) out[i] = ((float *)raw.data())[i];
        else if (prec == "fp16") out[i] = __half2float(((__half *)raw.data())[i]);
        else out[i] = __bfloat162float(((__nv_bfloat16 *)raw.data())[i]);
    }
    return out;
}
static std::vector<float> download_f32(const backend_t *be, const void *src, size_t n) {
    std::vector<float> out(n);
    be->download(out.data(), src, n * sizeof(float));
    return out;
}

static double norm2(const float *a, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * a[i];
    return sqrt(s);
}

static bert_config tiny_config() {
    bert_config cfg = {};
    cfg.vocab_size = 101;
    cfg.hidden_size = 96;  // head size 32: the fused attention under FP16/BF16
    cfg.num_hidden_layers = 2;
    cfg.num_attention_heads = 3;
    cfg.intermediate_size = 144;
    cfg.max_position_embeddings = 32;
    cfg.type_vocab_size = 2;
    cfg.pad_token_id = 0;
    cfg.hidden_dropout_prob = 0.1;
    cfg.attention_probs_dropout_prob = 0.1;
    cfg.initializer_range = 0.2;
    cfg.layer_norm_eps = 1e-12;
    return cfg;
}

// A ModernBERT: 3 layers, the first global, then two local ones with a window of 4 each side
// in rows of 16; head size 32 (the fused attention under FP16/BF16); dropout at each site.
static bert_config modern_config(bool base) {
    bert_config cfg = {};
    cfg.arch = MODEL_MODERNBERT;
    cfg.mlm_only = 1;
    cfg.vocab_size = base ? 50368 : 101;
    cfg.hidden_size = base ? 768 : 96;
    cfg.num_hidden_layers = base ? 2 : 3;
    cfg.num_attention_heads = base ? 12 : 3;
    cfg.intermediate_size = base ? 1152 : 72;
    cfg.max_position_embeddings = base ? 8192 : 32;
    cfg.pad_token_id = 0;
    cfg.embedding_dropout = cfg.attention_probs_dropout_prob = cfg.mlp_dropout = 0.1;
    cfg.initializer_range = base ? 0.02 : 0.2;
    cfg.initializer_cutoff_factor = 2.0;
    cfg.layer_norm_eps = 1e-5;
    cfg.local_attention = base ? 128 : 8;
    cfg.global_rope_theta = 160000.0, cfg.local_rope_theta = 10000.0;
    cfg.decoder_bias = 1;
    snprintf(cfg.classifier_activation, sizeof cfg.classifier_activation, "gelu");
    for (int l = 0; l < cfg.num_hidden_layers; l++) cfg.layer_global[l] = l % 3 == 0;
    return cfg;
}

static void make_batch(batch_t *batch, int V, uint32_t step) {
    synthetic_batch(batch, V, 21, step);
    int T = batch->T;
    // padding at the end of sequence 1
    for (int t = T - 4; t < T; t++) batch->input_ids[T + t] = 0, batch->input_mask[T + t] = 0, batch->segment_ids[T + t] = 0;
    for (int p = 0; p < batch->P; p++)
        if (batch->masked_lm_positions[batch->P + p] >= T - 4) batch->masked_lm_positions[batch->P + p] = 0;
    // keep the zero-terminated list well-formed after cutting
    for (int p = 1; p < batch->P; p++)
        if (batch->masked_lm_positions[batch->P + p - 1] == 0) batch->masked_lm_positions[batch->P + p] = 0;
}

static bert_config base_width_config() {
    // BERT-base's widths (C = 768, NH = 12, I = 3072, V = 30528) with 2 of its 12 layers.
    bert_config cfg = tiny_config();
    cfg.vocab_size = 30528;
    cfg.hidden_size = 768;
    cfg.num_attention_heads = 12;
    cfg.intermediate_size = 3072;
    cfg.max_position_embeddings = 512;
    cfg.initializer_range = 0.02;
    return cfg;
}

// hidden_act: "" (the exact GELU), or a tanh GELU, which the CUDA backend runs in the FFN
// GEMMs' epilogues and the CPU reference on its GELU ops.
// long_T (a ModernBERT): rows of that many tokens, past the 512 of the fused backward's
// clusters (the forward keeps no dropout record; the backward draws it again), with
// ModernBERT's window of 64 keys each side.
// docs: every row is packed documents (batch_t.document_starts at 0, T/3, T/3 + 1 and 2T/3:
// one of a single token), so attention stays inside each and positions restart.
static void test_parity(const backend_t *gpu, double tol, bool base, const char *hidden_act = "",
                        bool mlm_only = false, bool modern = false, int long_T = 0, bool docs = false) {
    bert_config cfg = modern ? modern_config(base) : base ? base_width_config() : tiny_config();
    if (long_T) cfg.max_position_embeddings = 1024, cfg.local_attention = 128;
    snprintf(cfg.hidden_act, sizeof cfg.hidden_act, "%s", hidden_act);
    cfg.mlm_only = mlm_only || modern;
    mlm_only = cfg.mlm_only;
    // ModernBERT-base at seq 512: its local layers' window (64 each side) cuts every row.
    int B = base ? 4 : 3, T = base ? (modern ? 512 : 128) : 16, P = base ? 20 : 4;
    if (long_T) B = 2, T = long_T;
    printf("model: %s L=%d C=%d NH=%d I=%d V=%d, hidden_act %s, %s, batch %d x %d, %d predictions per sequence\n",
           modern ? "ModernBERT" : "BERT", cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
           cfg.intermediate_size, cfg.vocab_size, hidden_act[0] ? hidden_act : "gelu",
           mlm_only ? "MLM only" : "MLM + NSP", B, T, P);
    if (docs) printf("documents packed in every row, from 0, %d, %d and %d\n", T / 3, T / 3 + 1, 2 * T / 3);
    bert_model g, c;
    bert_init(&g, &cfg, gpu, B, T, P);
    bert_init(&c, &cfg, &backend_cpu, B, T, P);
    bert_init_weights(&c, 3);
    // Same weights on both: the CPU's, rounded to the activation type, with non-trivial
    // LayerNorm and bias values.
    std::vector<float> w(c.n_params);
    c.be->download(w.data(), c.params, w.size() * sizeof(float));
    for (int i = 0; i < c.n_tensors; i++)
        if (c.table[i].ndim == 1)
            for (size_t k = 0; k < c.table[i].numel; k++)
                w[c.table[i].offset + k] += 0.2f * (float)((philox_draw(8, 0, i, k) >> 8) / 16777216.0 - 0.5);
    for (float &x : w) x = round_act(x);
    c.be->upload(c.params, w.data(), w.size() * sizeof(float));
    g.be->upload(g.params, w.data(), w.size() * sizeof(float));
    bert_sync_compute(&c);
    bert_sync_compute(&g);

    batch_t batch;
    batch_alloc(&batch, B, T, P);
    make_batch(&batch, cfg.vocab_size, 0);
    for (int b = 0; b < B && docs; b++) {
        int *starts = batch.document_starts + (size_t)b * T;
        starts[1] = T / 3, starts[2] = T / 3 + 1, starts[3] = 2 * T / 3;
    }
    bert_zero_grads(&g);
    bert_zero_grads(&c);
    bert_losses lg = bert_forward(&g, &batch, 1, 77, 5), lc = bert_forward(&c, &batch, 1, 77, 5);
    printf("losses: %s mlm %.6f nsp %.6f | cpu mlm %.6f nsp %.6f (%d masked positions)\n", gpu->name, lg.mlm_loss,
           lg.nsp_loss, lc.mlm_loss, lc.nsp_loss, lc.n_pred);
    expect(fabs(lg.mlm_loss - lc.mlm_loss) <= tol * fabs(lc.mlm_loss), "mlm loss rel error %.3e (tolerance %.0e)",
           fabs(lg.mlm_loss - lc.mlm_loss) / fabs(lc.mlm_loss), tol);
    if (modern)  // ModernBertForMaskedLM's tensors: embeddings and norm, 5 per layer and layer 0's 4, final
                 // norm, head dense and norm, decoder bias
        expect(lg.nsp_loss == 0.0 && lc.nsp_loss == 0.0 && !g.nsp_logits &&
                   c.n_tensors == 2 + 6 * cfg.num_hidden_layers - 1 + 1 + 3,
               "ModernBERT: no NSP loss, no NSP buffers, %d tensors (ModernBertForMaskedLM's)", c.n_tensors);
    else if (mlm_only)
        expect(lg.nsp_loss == 0.0 && lc.nsp_loss == 0.0 && lg.loss == lg.mlm_loss && !g.nsp_logits &&
                   c.n_tensors == 5 + 16 * cfg.num_hidden_layers + 5,
               "MLM only: no NSP loss, no NSP buffers, %d tensors (BertForMaskedLM's)", c.n_tensors);
    else
        expect(fabs(lg.nsp_loss - lc.nsp_loss) <= tol * fabs(lc.nsp_loss),
               "nsp loss rel error %.3e (tolerance %.0e)", fabs(lg.nsp_loss - lc.nsp_loss) / fabs(lc.nsp_loss), tol);
    size_t R = (size_t)lc.n_pred, V = (size_t)bert_padded_vocab(&cfg);  // padding columns: 0 on both
    std::vector<float> mg = download_act(g.be, g.mlm_logits, R * V), mc = download_f32(c.be, c.mlm_logits, R * V);
    double e = rel_error_f(mg.data(), mc.data(), R * V);
    expect(e <= tol, "mlm logits [%zu,%zu] rel error %.3e (tolerance %.0e)", R, V, e, tol);
    if (!mlm_only) {
        std::vector<float> ng = download_act(g.be, g.nsp_logits, B * 2), nc = download_f32(c.be, c.nsp_logits, B * 2);
        e = rel_error_f(ng.data(), nc.data(), B * 2);
        expect(e <= tol, "nsp logits rel error %.3e (tolerance %.0e)", e, tol);
    }

    // FP16 runs with a loss scale, as in training: without it the small gradients of the
    // attention scores fall into FP16's subnormals (seen: 8% error on query/key weights at
    // BERT-base widths with scale 1). 4096 stays far from overflow here.
    float scale = prec == "fp16" ? 4096.0f : 1.0f;
    bert_backward(&g, scale);
    bert_backward(&c, 1.0f);
    std::vector<float> gg = download_f32(g.be, g.grads, g.n_params), gc = download_f32(c.be, c.grads, c.n_params);
    for (float &x : gg) x /= scale;
    double worst = 0.0;
    std::string worst_name;
    int bad = 0;
    for (int i = 0; i < c.n_tensors; i++) {
        const param_info *p = &c.table[i];
        if (strstr(p->name, "attention.self.key.bias")) {
            // Zero up to rounding: tiny against the value bias's gradient norm.
            const param_info *vb = p + 1;
            double kb = norm2(&gg[p->offset], p->numel), vbn = norm2(&gc[vb->offset], vb->numel);
            expect(kb <= tol * vbn, "%s: |grad| %.2e <= %.0e x |value bias grad| %.2e (analytically zero)", p->name,
                   kb, tol, vbn);
            continue;
        }
        double err = rel_error_f(&gg[p->offset], &gc[p->offset], p->numel);
        if (err > worst) worst = err, worst_name = p->name;
        if (err > tol) {
            bad++;
            printf("FAIL grad %s rel error %.3e (tolerance %.0e)\n", p->name, err, tol);
        }
    }
    expect(bad == 0, "gradients of all %d tensors: worst rel error %.3e (%s), tolerance %.0e", c.n_tensors, worst,
           worst_name.c_str(), tol);
    batch_free(&batch);
    bert_free(&g);
    bert_free(&c);
}

// Forces FP16 overflow with a huge initial scale: the first steps must be skipped without
// touching the weights, the scale must halve each time, training must then resume, and the
// scale must double after growth_interval clean steps.
static void test_loss_scaling(const backend_t *gpu) {
    bert_config cfg = tiny_config();
    int B = 3, T = 16, P = 4;
    bert_model m;
    bert_init(&m, &cfg, gpu, B, T, P);
    bert_init_weights(&m, 4);
    optim_state opt;
    optim_init(&opt, OPTIM_LAMB, gpu, m.n_params);
    loss_scaler scaler;
    const int growth = 3;
    loss_scaler_init(&scaler, 1, 1099511627776.0 /* 2^40 */, growth, 1.0, 64);
    batch_t batch;
    batch_alloc(&batch, B, T, P);
    std::vector<float> before(m.n_params), after(m.n_params);
    int skipped = 0, first_clean = -1;
    bool unchanged_when_skipped = true, changed_when_clean = true, halved = true;
    for (int step = 0; step < 40 && first_clean < 0; step++) {
        make_batch(&batch, cfg.vocab_size, step);
        gpu->download(before.data(), m.params, before.size() * sizeof(float));
        double scale = scaler.scale;
        step_stats s = train_step(&m, &opt, &scaler, &batch, 1, 1e-3, 1, 9, step);
        gpu->download(after.data(), m.params, after.size() * sizeof(float));
        bool same = memcmp(before.data(), after.data(), before.size() * sizeof(float)) == 0;
        if (s.skipped) {
            skipped++;
            unchanged_when_skipped &= same;
            halved &= scaler.scale == scale / 2;
        } else {
            first_clean = step;
            changed_when_clean &= !same;
        }
    }
    if (prec == "fp16") {
        expect(skipped > 0 && first_clean > 0, "fp16 with scale 2^40: %d steps skipped, first clean step %d", skipped,
               first_clean);
    } else {
        // fp32 and bf16 have FP32's exponent range: 2^40 overflows nothing here.
        expect(first_clean == 0, "%s with scale 2^40: no overflow (first clean step %d)", prec.c_str(), first_clean);
    }
    expect(unchanged_when_skipped, "skipped steps leave the weights bitwise unchanged");
    expect(halved, "each overflow halves the scale");
    expect(changed_when_clean && opt.step == 1, "the first clean step updates the weights (LAMB step count %ld)",
           opt.step);
    expect(scaler.skipped == skipped, "skipped steps counted: %ld", scaler.skipped);
    // Growth, from a scale far from overflow: growth_interval clean steps double it.
    loss_scaler_init(&scaler, 1, 256.0, growth, 1.0, 64);
    bool all_clean = true;
    for (int k = 0; k < growth; k++) {
        make_batch(&batch, cfg.vocab_size, 100 + k);
        all_clean &= !train_step(&m, &opt, &scaler, &batch, 1, 1e-3, 1, 9, 100 + k).skipped;
    }
    expect(all_clean && scaler.scale == 512.0, "the scale doubles after %d clean steps in a row (256 -> %.0f)", growth,
           scaler.scale);
    batch_free(&batch);
    optim_free(&opt);
    bert_free(&m);
}

static void test_memory_plan(const backend_t *gpu) {
    bert_config large = tiny_config();
    large.vocab_size = 30528;
    large.hidden_size = 1024;
    large.num_hidden_layers = 24;
    large.num_attention_heads = 16;
    large.intermediate_size = 4096;
    large.max_position_embeddings = 512;
    // NVIDIA's A100-80GB settings for BERT-large; 2 GiB left for the CUDA context and cuBLAS.
    const double budget = 78.0 * 1024 * 1024 * 1024;
    struct { int B, T, P; } shapes[] = {{256, 128, 20}, {32, 512, 80}};
    for (auto s : shapes) {
        memory_plan plan = bert_memory_plan(&large, gpu, s.B, s.T, s.P);
        double total = memory_plan_total(&plan);
        expect(total < budget, "BERT-large %s micro-batch %d at seq %d: plan %.1f GiB < 78 GiB", gpu->name, s.B, s.T,
               total / 1073741824.0);
    }
    // The advice when a plan does not fit: the largest micro-batch whose plan does.
    memory_plan p200 = bert_memory_plan(&large, gpu, 200, 128, 20), p201 = bert_memory_plan(&large, gpu, 201, 128, 20);
    double room = memory_plan_total(&p200) + 1.0;
    int fits = bert_max_micro_batch(&large, gpu, 256, 128, 20, room);
    expect(fits == 200 && memory_plan_total(&p201) > room, "largest micro-batch that fits %.1f GiB: %d (expected 200)",
           room / 1073741824.0, fits);
    expect(bert_max_micro_batch(&large, gpu, 256, 128, 20, 1e6) == 0, "nothing fits in 1 MB: 0");
    // MLM only: the pooler [C,C]+[C] and the NSP classifier [2,C]+[2] are neither stored nor
    // trained: their FP32 master, compute copy, gradient and two moments are gone, and so are
    // the pooler's and the classifier's activations and the B [CLS] rows of the gather.
    bert_config mlm = large;
    mlm.mlm_only = 1;
    memory_plan both = bert_memory_plan(&large, gpu, 256, 128, 20), only = bert_memory_plan(&mlm, gpu, 256, 128, 20);
    double C = large.hidden_size, head = C * C + C + 2 * C + 2;
    double per_param = 4.0 + gpu->act_size + gpu->acc_size;  // master, compute copy, gradient
    double saved_params = (double)both.bytes[MEM_PARAMS] + both.bytes[MEM_GRADS] - only.bytes[MEM_PARAMS] -
                          only.bytes[MEM_GRADS];
    double saved_moments = (double)both.bytes[MEM_OPTIMIZER] - only.bytes[MEM_OPTIMIZER];
    // Alignment: each tensor starts on 8 elements, so up to 4 x 7 elements move.
    expect(fabs(saved_params - head * per_param) <= 28 * per_param && fabs(saved_moments - 8 * head) <= 28 * 8 &&
               only.bytes[MEM_ACTIVATIONS] < both.bytes[MEM_ACTIVATIONS],
           "MLM only: %.0f bytes of parameters and gradients and %.0f of moments fewer (the NSP head's %.0f "
           "parameters), %.1f MiB fewer activations", saved_params, saved_moments, head,
           (both.bytes[MEM_ACTIVATIONS] - only.bytes[MEM_ACTIVATIONS]) / 1048576.0);
}

// The backend used again after its shutdown (a command that trains, shuts the device down and
// then evaluates or trains again in one process): the optimizer's chunk layout lives in a
// workspace that the shutdown frees, so the second life must lay it out again. Two LAMB steps
// from the same start, one before the shutdown and one after, must give the same parameters
// bitwise (with the layout of the freed workspace the second would read zeroed or freed chunks).
static std::vector<float> lamb_once(const backend_t *gpu) {
    std::vector<optim_tensor> tensors = {{0, 15, 1}, {16, 7, 0}, {24, 9000, 1}};
    size_t n = 9024;
    std::vector<float> w(n), g(n);
    for (size_t k = 0; k < n; k++) {
        w[k] = 0.2f * (float)((philox_draw(11, 0, 0, k) >> 8) / 16777216.0 - 0.5);
        g[k] = (float)((philox_draw(12, 0, 0, k) >> 8) / 16777216.0 - 0.5);
    }
    float *params = (float *)gpu->alloc(n * 4), *m = (float *)gpu->alloc(n * 4), *v = (float *)gpu->alloc(n * 4);
    void *grads = gpu->alloc(n * 4);
    gpu->upload(params, w.data(), n * 4);
    gpu->zero(m, n * 4);
    gpu->zero(v, n * 4);
    expect(gpu->acc_size == 4, "the gradient accumulators are FP32 (acc_size %zu)", gpu->acc_size);
    gpu->upload(grads, g.data(), n * 4);
    adam_hyper h = {1e-2, 0.9, 0.999, 1e-6, 0.01, 1.0, 1.0, 1, nullptr, 0.0};
    gpu->lamb_step(params, m, v, grads, tensors.data(), (int)tensors.size(), h);
    std::vector<float> out = download_f32(gpu, params, n);
    gpu->release(params);
    gpu->release(m);
    gpu->release(v);
    gpu->release(grads);
    return out;
}

static void test_optimizer_after_shutdown(const backend_t *gpu) {
    std::vector<float> first = lamb_once(gpu);
    size_t live_bytes = 0;
    gpu->shutdown(&live_bytes);
    std::vector<float> second = lamb_once(gpu);
    size_t moved = 0;
    for (size_t k = 0; k < first.size(); k++) moved += first[k] != second[k];
    expect(moved == 0, "a LAMB step after the backend's shutdown and reuse: %zu of %zu parameters differ from the "
                       "same step before it (bitwise)", moved, first.size());
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s fp32|fp16|bf16\n", argv[0]);
        return 2;
    }
    prec = argv[1];
#ifdef TEST_REAL_GPU
    if (int status = gpu_missing_exit_status()) return status;
    const backend_t *gpu = prec == "fp32" ? &backend_cuda_fp32 : prec == "fp16" ? &backend_cuda_fp16 : &backend_cuda_bf16;
#else
    const backend_t *gpu = prec == "fp32"   ? &backend_cuda_emu_fp32
                           : prec == "fp16" ? &backend_cuda_emu_fp16
                                            : &backend_cuda_emu_bf16;
#endif
    double tol = prec == "fp32" ? 1e-4 : prec == "fp16" ? 3e-2 : 2e-1;
    bool base = argc > 2 && !strcmp(argv[2], "--base");
    test_parity(gpu, tol, false);
    test_parity(gpu, tol, false, "gelu_new");
    test_parity(gpu, tol, false, "", true);
    test_parity(gpu, tol, false, "", true, true);
    test_parity(gpu, tol, false, "gelu_pytorch_tanh", true, true);
    test_parity(gpu, tol, false, "", true, true, 600);
    test_parity(gpu, tol, false, "", true, false, 0, true);
    test_parity(gpu, tol, false, "", true, true, 0, true);
    if (base) test_parity(gpu, tol, true);
    if (base) test_parity(gpu, tol, true, "", true, true);
    if (base) test_parity(gpu, tol, true, "gelu_pytorch_tanh");
    test_loss_scaling(gpu);
    test_memory_plan(gpu);
    test_optimizer_after_shutdown(gpu);
    // Every model, optimizer state and batch above was freed; the backend's shutdown frees
    // its workspaces (and on a GPU cuBLASLt, streams, staging): no device memory may remain.
    size_t live_bytes = 0, live = gpu->shutdown(&live_bytes);
    expect(live == 0, "device memory after the backend's shutdown: %zu allocation%s live, %zu bytes", live,
           live == 1 ? "" : "s", live_bytes);
    printf("%s\n", failures ? "FAIL" : "all checks passed");
    return failures ? 1 : 0;
}
