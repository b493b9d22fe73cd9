// The test driver: each subcommand runs one part of bertpre (on the FP32 CPU backend where
// it computes) on inputs a Python test wrote, and writes or prints what the test compares
// with an independent implementation (h5py, transformers, timm, torch, hashlib).
//
//   dump sha256 FILE...                    the SHA-256 of each file, and of its bytes fed in
//                                          pieces of 1, 7, 64 and 1000 (test_sha256)
//   dump schedule BASE_LR WARMUP STEPS [SCHEDULE]
//                                          the rate of updates 1..STEPS, 17 digits (test_schedule)
//   dump ce IN OUT SMOOTHING               cross-entropy with label smoothing (test_label_smoothing)
//   dump optim IN OUT OPTIMIZER [NAME=VALUE ...]
//                                          steps of lamb, lars, adamw or stableadamw (test_optim)
//   dump model CONFIG WEIGHTS BATCH OUT [mlm] [unpad=MODE]
//                                          forward and backward of a model (test_hf_parity,
//                                          test_modernbert_parity)
//   dump forward CHECKPOINT BATCH OUT      the forward of a checkpoint (test_interop)
//   dump train CONFIG OUT                  bertpre train's steps (test_train_parity)
//   dump loader SPEC BATCH_SIZE VOCAB BATCHES SHUFFLE [RANK WORLD]
//                                          what the loader delivers (the data tests)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bertpre_config.h"
#include "data/batch.h"
#include "data/synthetic.h"
#include "engine/checkpoint.h"
#include "engine/config.h"
#include "engine/model.h"
#include "engine/optim.h"
#include "engine/safetensors.h"
#include "engine/schedule.h"
#include "engine/sha256.h"
#include "engine/train.h"
#include "kernels/backend.h"
#include "kernels/common/check.h"
#if BERTPRE_HAVE_HDF5
#include "data/loader.h"
#include "tokenizer/tokenizer.h"
#endif

// ---- shared helpers ---------------------------------------------------------------------
// A tensor of integers (any integer dtype) from a file a Python test wrote.
static int *read_ints(const st_file *f, const char *name, int ndim, int *dims) {
    const st_tensor *t = st_find(f, name);
    if (!t) fatal("%s: missing tensor '%s'", f->path, name);
    if (t->ndim != ndim) fatal("%s: tensor '%s' has %d dimensions, expected %d", f->path, name, t->ndim, ndim);
    for (int d = 0; d < ndim; d++) dims[d] = (int)t->shape[d];
    int *out = xmalloc(t->numel * sizeof(int));
    st_read_int(f, t, out);
    return out;
}

// The six tensors of a batch (named as the HDF5 datasets); B, T and P from their shapes; and
// document_starts [B, D <= T] when the file has it (zeros otherwise: one document per row).
static void read_batch(const st_file *f, batch_t *batch) {
    int dims[2];
    batch->input_ids = read_ints(f, "input_ids", 2, dims);
    batch->B = dims[0], batch->T = dims[1];
    batch->input_mask = read_ints(f, "input_mask", 2, dims);
    batch->segment_ids = read_ints(f, "segment_ids", 2, dims);
    batch->masked_lm_positions = read_ints(f, "masked_lm_positions", 2, dims);
    batch->P = dims[1];
    batch->masked_lm_ids = read_ints(f, "masked_lm_ids", 2, dims);
    batch->next_sentence_labels = read_ints(f, "next_sentence_labels", 1, dims);
    batch->document_starts = xcalloc((size_t)batch->B * batch->T, sizeof(int));
    if (st_find(f, "document_starts")) {
        int *starts = read_ints(f, "document_starts", 2, dims);
        if (dims[0] != batch->B || dims[1] > batch->T)
            fatal("%s: document_starts is [%d, %d], expected [%d, at most %d]", f->path, dims[0], dims[1], batch->B,
                  batch->T);
        for (int b = 0; b < batch->B; b++)
            memcpy(batch->document_starts + (size_t)b * batch->T, starts + (size_t)b * dims[1], dims[1] * sizeof(int));
        free(starts);
    }
}

// Entries "PREFIX.NAME" for the tensors of a parameter table laid out in `base`, written
// into out[0..n); the names live in *names (the caller frees both).
static void param_entries(st_entry *out, char (**names)[160], const char *prefix, const param_info *table, int n,
                          const float *base) {
    *names = xcalloc(n, 160);
    for (int i = 0; i < n; i++) {
        snprintf((*names)[i], 160, "%s.%s", prefix, table[i].name);
        out[i] = (st_entry){(*names)[i], "F32", table[i].ndim, {table[i].shape[0], table[i].shape[1]},
                            (float *)base + table[i].offset};
    }
}

// ---- sha256 -----------------------------------------------------------------------------
static int dump_sha256(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char hex[65];
        if (sha256_file(argv[i], hex) != 0) {
            fprintf(stderr, "cannot read %s\n", argv[i]);
            return 1;
        }
        printf("%s", hex);
        FILE *fp = fopen(argv[i], "rb");
        fseek(fp, 0, SEEK_END);
        long n = ftell(fp);
        rewind(fp);
        unsigned char *data = malloc(n ? n : 1);
        if (fread(data, 1, n, fp) != (size_t)n) return 1;
        fclose(fp);
        static const long pieces[] = {1, 7, 64, 1000};
        for (int k = 0; k < 4; k++) {
            sha256_ctx c;
            sha256_init(&c);
            for (long at = 0; at < n; at += pieces[k]) sha256_update(&c, data + at, at + pieces[k] <= n ? pieces[k] : n - at);
            sha256_final_hex(&c, hex);
            printf(" %s", hex);
        }
        printf("\n");
        free(data);
    }
    return 0;
}

// ---- schedule ---------------------------------------------------------------------------
// The learning-rate schedules (poly, cosine, linear, constant, wsd with its decay share;
// default poly).
static int dump_schedule(int argc, char **argv) {
    if (argc < 4 || argc > 6) fatal("usage: dump schedule BASE_LR WARMUP_PROPORTION STEPS [SCHEDULE [DECAY]]");
    double base = atof(argv[1]), warmup = atof(argv[2]);
    long steps = atol(argv[3]);
    int kind = schedule_kind_of(argc >= 5 ? argv[4] : "poly");
    double decay = argc == 6 ? atof(argv[5]) : 0.0;
    if (kind < 0) fatal("dump schedule: unknown schedule '%s'", argv[4]);
    for (long n = 1; n <= steps; n++)
        printf("%.17g\n", schedule_rate((schedule_kind)kind, base, warmup, steps, n, decay));
    return 0;
}

// ---- ce ---------------------------------------------------------------------------------
// Reads "logits" [N,V] (F32) and "targets" [N] (I32, -1 = ignored), runs the cross-entropy
// with label smoothing, writes "losses" [N] and "dlogits" [N,V] (the gradient of the sum of
// the losses: dloss = 1).
static int dump_ce(int argc, char **argv) {
    if (argc != 4) fatal("usage: dump ce IN OUT SMOOTHING");
    st_file in;
    st_open(&in, argv[1]);
    const st_tensor *lt = st_find(&in, "logits"), *tt = st_find(&in, "targets");
    if (!lt || !tt || lt->ndim != 2 || tt->numel != (size_t)lt->shape[0])
        fatal("%s: expected 'logits' [N,V] and 'targets' [N]", in.path);
    int N = (int)lt->shape[0], V = (int)lt->shape[1];
    float *logits = xmalloc(lt->numel * sizeof(float));
    float *losses = xmalloc(N * sizeof(float)), *dlogits = xmalloc(lt->numel * sizeof(float));
    int *targets = xmalloc(N * sizeof(int));
    st_read_float(&in, lt, logits);
    st_read_int(&in, tt, targets);
    float smoothing = (float)atof(argv[3]);
    backend_cpu.crossentropy_forward(losses, NULL, logits, targets, N, V, V, smoothing);
    backend_cpu.crossentropy_backward(dlogits, logits, targets, N, V, V, 1.0f, smoothing);
    st_entry out[] = {{"losses", "F32", 1, {N}, losses}, {"dlogits", "F32", 2, {N, V}, dlogits}};
    st_write(argv[2], out, 2, NULL);
    st_close(&in);
    free(logits), free(losses), free(dlogits), free(targets);
    return 0;
}

// ---- optim ------------------------------------------------------------------------------
// Reads initial tensors "param.NAME", per-step gradients "grad.STEP.NAME" and learning rates
// "lr" [steps], lays the tensors out in one flat buffer (in file order, weight decay by
// NVIDIA's name rule), applies optim_step of OPTIMIZER (hyper-parameters NAME=VALUE override
// its defaults) once per step, and writes the final tensors as "param.NAME".
static int dump_optim(int argc, char **argv) {
    if (argc < 4 || optim_kind_of(argv[3]) < 0)
        fatal("usage: dump optim IN OUT lamb|lars|adamw|stableadamw [NAME=VALUE ...]");
    st_file in;
    st_open(&in, argv[1]);
    param_info *table = xcalloc(in.n_tensors, sizeof(param_info));
    int n = 0;
    size_t total = 0;
    for (int i = 0; i < in.n_tensors; i++) {
        const st_tensor *t = &in.tensors[i];
        if (strncmp(t->name, "param.", 6) != 0) continue;
        param_info *p = &table[n++];
        snprintf(p->name, sizeof p->name, "%s", t->name + 6);
        p->ndim = t->ndim;
        for (int d = 0; d < t->ndim && d < 2; d++) p->shape[d] = (int)t->shape[d];
        p->numel = t->numel;
        p->offset = total;
        p->weight_decay = param_has_weight_decay(p->name);
        total += t->numel;
    }
    const st_tensor *lr = st_find(&in, "lr");
    if (!lr) fatal("%s: missing tensor 'lr'", in.path);
    float *lrs = xmalloc(lr->numel * sizeof(float));
    st_read_float(&in, lr, lrs);
    float *params = xmalloc(total * sizeof(float)), *grads = xmalloc(total * sizeof(float));
    char name[160];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "param.%s", table[i].name);
        st_read_float(&in, st_find(&in, name), params + table[i].offset);
    }
    optim_state opt;
    optim_init(&opt, (optim_kind)optim_kind_of(argv[3]), &backend_cpu, total);
    struct { const char *name; double *field; } fields[] = {
        {"weight_decay", &opt.weight_decay}, {"max_grad_norm", &opt.max_grad_norm}, {"beta1", &opt.beta1},
        {"beta2", &opt.beta2}, {"eps", &opt.eps}, {"momentum", &opt.momentum},
        {"trust_coefficient", &opt.trust_coefficient}, {"decay_lr_ref", &opt.decay_lr_ref}};
    for (int a = 4; a < argc; a++) {
        const char *eq = strchr(argv[a], '=');
        size_t f = 0;
        while (f < sizeof fields / sizeof fields[0] &&
               (!eq || strncmp(fields[f].name, argv[a], (size_t)(eq - argv[a])) || fields[f].name[eq - argv[a]]))
            f++;
        if (f == sizeof fields / sizeof fields[0]) fatal("dump optim: unknown hyper-parameter '%s'", argv[a]);
        *fields[f].field = atof(eq + 1);
    }
    for (size_t step = 0; step < lr->numel; step++) {
        for (int i = 0; i < n; i++) {
            snprintf(name, sizeof name, "grad.%zu.%s", step, table[i].name);
            const st_tensor *g = st_find(&in, name);
            if (!g) fatal("%s: missing tensor '%s'", in.path, name);
            st_read_float(&in, g, grads + table[i].offset);
        }
        double norm = optim_step(&opt, params, grads, table, n, lrs[step], 1.0);
        printf("step %zu: lr %.4g, gradient norm %.4g%s\n", step, lrs[step], norm, norm > opt.max_grad_norm ? " (clipped)" : "");
    }
    st_entry *out = xcalloc(n, sizeof(st_entry));
    char (*names)[160];
    param_entries(out, &names, "param", table, n, params);
    st_write(argv[2], out, n, NULL);
    optim_free(&opt);
    st_close(&in);
    free(table), free(lrs), free(params), free(grads), free(out), free(names);
    return 0;
}

// ---- model ------------------------------------------------------------------------------
// Loads a BertConfig JSON, weights and a batch, runs forward and backward with dropout off,
// and writes the loss, the MLM logits at the masked positions, the NSP logits and the
// gradient of every parameter ("grad." + name). With `mlm`, the MLM-only model
// (train.objective mlm: no pooler, no NSP head, no NSP logits written).
// A ModernBERT config (model_type modernbert) is MLM-only by itself. unpad=off|on|auto sets
// train.unpad (auto by default).
static int dump_model(int argc, char **argv) {
    int mlm = 0;
    unpad_mode unpad = UNPAD_AUTO;
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "mlm")) mlm = 1;
        else if (!strncmp(argv[i], "unpad=", 6)) unpad = unpad_mode_of(argv[i] + 6);
        else argc = 0;
    }
    if (argc < 5) fatal("usage: dump model CONFIG WEIGHTS BATCH OUT [mlm] [unpad=off|on|auto]");
    bert_config cfg;
    bert_config_load(&cfg, argv[1]);
    cfg.mlm_only = cfg.arch == MODEL_MODERNBERT || mlm;
    st_file weights, inputs;
    st_open(&weights, argv[2]);
    st_open(&inputs, argv[3]);
    batch_t batch;
    read_batch(&inputs, &batch);

    bert_model m;
    bert_init(&m, &cfg, &backend_cpu, batch.B, batch.T, batch.P);
    m.unpad = unpad;
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
    if (batch.B > 64) fatal("dump model: at most 64 sequences");
    for (int r = 0; r < R; r++)  // the real vocabulary's columns of the padded rows
        memcpy(mlm_logits + (size_t)r * V, (const float *)m.mlm_logits + (size_t)r * Vp, (size_t)V * sizeof(float));
    if (!cfg.mlm_only) memcpy(nsp_logits, m.nsp_logits, (size_t)batch.B * 2 * sizeof(float));
    bert_backward(&m, 1.0f);

    float losses[3] = {(float)l.loss, (float)l.mlm_loss, (float)l.nsp_loss};
    int heads = cfg.mlm_only ? 2 : 3, n = heads + m.n_tensors;
    st_entry *entries = xcalloc(n, sizeof(st_entry));
    entries[0] = (st_entry){"loss", "F32", 1, {3}, losses};
    entries[1] = (st_entry){"mlm_logits", "F32", 2, {R, V}, mlm_logits};
    entries[2] = (st_entry){"nsp_logits", "F32", 2, {batch.B, 2}, nsp_logits};
    char (*names)[160];
    param_entries(entries + heads, &names, "grad", m.table, m.n_tensors, m.grads);
    st_write(argv[4], entries, n, NULL);
    printf("dump model: loss %.6f (mlm %.6f, nsp %.6f), %d masked positions\n", l.loss, l.mlm_loss, l.nsp_loss, R);
    free(entries), free(names), free(mlm_logits);
    bert_free(&m);
    st_close(&weights);
    st_close(&inputs);
    return 0;
}

// ---- forward ----------------------------------------------------------------------------
// Loads a bertpre checkpoint (training or imported weights) and a batch, runs the forward
// with dropout off, and writes the encoder's last hidden states [B,T,C], the MLM logits at
// the masked positions [R,V] and the NSP logits [B,2] (none for an MLM-only model).
static float *download(const bert_model *m, const void *src, size_t n) {
    float *host = xmalloc(n * sizeof(float));
    m->be->download(host, src, n * sizeof(float));
    return host;
}

static int dump_forward(int argc, char **argv) {
    if (argc != 4) fatal("usage: dump forward CHECKPOINT BATCH OUT");
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
    // The encoder's last hidden states: BERT's last layer output, ModernBERT's final norm's.
    const void *last = c.model.arch == MODEL_MODERNBERT ? m.final : m.acts[c.model.num_hidden_layers - 1].out;
    float *hidden = download(&m, last, (size_t)B * T * C);
    int Vp = bert_padded_vocab(&c.model);
    float *mlm = download(&m, m.mlm_logits, (size_t)R * Vp);
    for (int r = 0; r < R; r++) memmove(mlm + (size_t)r * V, mlm + (size_t)r * Vp, (size_t)V * sizeof(float));
    float *nsp = c.model.mlm_only ? NULL : download(&m, m.nsp_logits, (size_t)B * 2);
    st_entry entries[] = {{"hidden_states", "F32", 3, {B, T, C}, hidden},
                          {"mlm_logits", "F32", 2, {R, V}, mlm},
                          {"nsp_logits", "F32", 2, {B, 2}, nsp}};
    st_write(argv[3], entries, nsp ? 3 : 2, NULL);
    printf("dump forward: %d sequences of %d tokens, %d masked positions, mlm loss %.6f, nsp loss %.6f\n", B, T, R,
           l.mlm_loss, l.nsp_loss);
    free(hidden), free(mlm), free(nsp);
    bert_free(&m);
    st_close(&inputs);
    checkpoint_close(&c);
    return 0;
}

// ---- train ------------------------------------------------------------------------------
// Runs the steps of `bertpre train` (synthetic micro-batches numbered from
// schedule_first_micro_batch, as many as schedule_accumulation gives the step (train.
// batch_warmup_*), then train_iteration, as cmd_train.c's loop calls it) with dropout off, and writes what an independent run
// needs to repeat them: the initial weights (Hugging Face names), every micro-batch (stacked
// in order, in the shard schema), and per step the MLM and NSP losses, the learning rate and
// the sequences of the global batch.
// The micro-batches are made padding-heavy (cut_lengths), so the comparison covers how
// padding is computed.
//
// cut_lengths: cuts synthetic_batch's rows (they fill T tokens, 10% fewer) to padding-heavy
// lengths in NVIDIA's layout: one full row is kept, the first from row micro % B on; of the
// B - 1 others, dealt in an order that turns with micro, B / 2 + 1 are cut to lengths spread
// evenly from 2 ([CLS][SEP]) to T - 1 and the rest are left as drawn. At B = 8, T = 32:
// lengths 2, 9, 16, 23, 31, the full row and two as drawn, a third of the tokens padding
// (cutting all seven, 45% padding, left test_train_parity's LARS run too few masked tokens:
// its loss fell 0.048 in 80 steps, under the test's 0.05). A cut row ends with [SEP], its
// input_mask stays a prefix of ones, and its masked positions from the last real token on
// are dropped (positions ascend, so the list still ends at its first zero).
static void cut_lengths(batch_t *batch, uint32_t micro) {
    int B = batch->B, T = batch->T, P = batch->P, full = -1;
    if (B < 3) fatal("dump train: padding-heavy micro-batches need micro_batch_size >= 3, got %d", B);
    for (int i = 0; i < B && full < 0; i++) {
        int b = (int)((micro + (uint32_t)i) % (uint32_t)B);
        if (batch->input_mask[(size_t)b * T + T - 1]) full = b;
    }
    if (full < 0) fatal("dump train: synthetic micro-batch %u has no full row", micro);
    for (int b = 0, j = 0; b < B; b++) {
        if (b == full) continue;
        int slot = (int)(((uint32_t)j++ + micro) % (uint32_t)(B - 1)), cut = B / 2 + 1;
        if (slot >= cut) continue;
        int len = 2 + (T - 3) * slot / (cut - 1);
        int *ids = batch->input_ids + (size_t)b * T, *seg = batch->segment_ids + (size_t)b * T;
        int *mask = batch->input_mask + (size_t)b * T, *pos = batch->masked_lm_positions + (size_t)b * P;
        if (!mask[len]) continue;  // already this short
        ids[len - 1] = SYNTH_SEP;
        for (int i = len; i < T; i++) ids[i] = SYNTH_PAD, seg[i] = 0, mask[i] = 0;
        for (int p = 0; p < P; p++)
            if (pos[p] >= len - 1) pos[p] = 0, batch->masked_lm_ids[(size_t)b * P + p] = 0;
    }
}

static int dump_train(int argc, char **argv) {
    if (argc != 3) fatal("usage: dump train CONFIG OUT");
    run_config cfg;
    run_config_load(&cfg, argv[1], 0, NULL, 1);
    const train_config *t = &cfg.train;
    int B = t->micro_batch_size, T = t->seq_length, P = t->max_predictions_per_seq;
    long n_micro = schedule_micro_batches_before(t, t->steps);

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
    int *sequences = xmalloc(t->steps * sizeof(int));
    batch_t *micro = xcalloc(t->accumulation_steps, sizeof(batch_t));
    for (int step = 0; step < t->steps; step++) {
        uint32_t first = schedule_first_micro_batch(t, step, 0);
        for (int k = 0; k < schedule_accumulation(t, step); k++) {
            micro[k] = batch_slice(&all, (int)((long)(first + k) * B), B);
            synthetic_batch(&micro[k], cfg.model.vocab_size, (uint64_t)t->seed, first + (uint32_t)k);
            cut_lengths(&micro[k], first + (uint32_t)k);
        }
        double lr;
        step_stats s = train_iteration(&m, &opt, &scaler, t, micro, opt.step, 0, (uint32_t)step, &lr);
        mlm[step] = (float)s.mlm_loss, nsp[step] = (float)s.nsp_loss, lrs[step] = (float)lr;
        sequences[step] = (int)s.sequences;
        printf("step %d: lr %.4e, mlm loss %.6f, nsp loss %.6f, gradient norm %.4g\n", step + 1, lr, s.mlm_loss,
               s.nsp_loss, s.grad_norm);
    }

    int n = m.n_tensors + 10;
    st_entry *out = xcalloc(n, sizeof(st_entry));
    char (*names)[160];
    param_entries(out, &names, "init", m.table, m.n_tensors, init);
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
    out[k++] = (st_entry){"sequences", "I32", 1, {t->steps}, sequences};
    st_write(argv[2], out, n, NULL);

    free(out), free(names), free(micro), free(mlm), free(nsp), free(lrs), free(sequences), free(init);
    batch_free(&all);
    optim_free(&opt);
    bert_free(&m);
    return 0;
}

// ---- loader -----------------------------------------------------------------------------
// One line per sequence: input_ids | input_mask | segment_ids | masked_lm_positions |
// masked_lm_ids | next_sentence_label. Without HDF5 support it exits 77 (skip). With
// LOADER_DUMP_MASKING=TOKENIZER:PROB:P[:wwm] in the environment, the loader masks
// dynamically (train.dynamic_masking) at rate PROB into P columns with TOKENIZER's special
// ids (and whole words with wwm: train.whole_word_mask), as `bertpre train` does; the stored
// masks are undone first.
#if !BERTPRE_HAVE_HDF5
static int dump_loader(int argc, char **argv) {
    (void)argc, (void)argv;
    printf("SKIP: bertpre was built without HDF5 (libhdf5-dev not found)\n");
    return 77;
}
#else
static void print_ints(const int *v, int n, const char *end) {
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", v[i]);
    fputs(end, stdout);
}

static int dump_loader(int argc, char **argv) {
    if (argc != 6 && argc != 8) {
        fprintf(stderr, "usage: dump loader SPEC BATCH_SIZE VOCAB BATCHES SHUFFLE [RANK WORLD]\n");
        return 2;
    }
    loader_options o = {.batch_size = atoi(argv[2]), .rank = argc == 8 ? atoi(argv[6]) : 0,
                        .world_size = argc == 8 ? atoi(argv[7]) : 1, .seed = 11, .vocab_size = atoi(argv[3]),
                        .shuffle = atoi(argv[5]), .prefetch = 2, .check_on_open = 1};
    const char *masking = getenv("LOADER_DUMP_MASKING");
    if (masking) {
        char path[1024];
        double prob = 0.0;
        const char *colon = strchr(masking, ':');
        if (!colon || sscanf(colon + 1, "%lf:%d", &prob, &o.max_predictions) != 2)
            fatal("LOADER_DUMP_MASKING = '%s': expected TOKENIZER:PROB:P[:wwm]", masking);
        size_t n = strlen(masking);
        int whole_words = n > 4 && !strcmp(masking + n - 4, ":wwm");
        snprintf(path, sizeof path, "%.*s", (int)(colon - masking), masking);
        tokenizer *tok;
        tokenizer_status s = tokenizer_load(&tok, path);
        if (!s.ok) fatal("%s", s.message);
        o.dynamic_masking = 1;
        o.masking = masking_for_tokenizer(tokenizer_specials(tok), tokenizer_vocab_size(tok), prob, o.max_predictions);
        if (whole_words) masking_whole_words(&o.masking, tok);
        tokenizer_free(tok);
    }
    loader *l = loader_open(argv[1], &o);
    int S = loader_seq_length(l), P = loader_max_predictions(l), batches = atoi(argv[4]);
    batch_t b;
    batch_alloc(&b, o.batch_size, S, P);
    for (int k = 0; k < batches; k++) {
        loader_next_batch(l, &b);
        for (int i = 0; i < b.B; i++) {
            print_ints(b.input_ids + i * S, S, " | ");
            print_ints(b.input_mask + i * S, S, " | ");
            print_ints(b.segment_ids + i * S, S, " | ");
            print_ints(b.masked_lm_positions + i * P, P, " | ");
            print_ints(b.masked_lm_ids + i * P, P, " | ");
            print_ints(b.next_sentence_labels + i, 1, "\n");
        }
    }
    batch_free(&b);
    loader_close(l);
    masking_free(&o.masking);
    return 0;
}
#endif

// ---- the subcommands --------------------------------------------------------------------
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} subcommands[] = {{"sha256", dump_sha256}, {"schedule", dump_schedule}, {"ce", dump_ce},
                   {"optim", dump_optim},   {"model", dump_model},       {"forward", dump_forward},
                   {"train", dump_train},   {"loader", dump_loader}};

int main(int argc, char **argv) {
    for (size_t i = 0; argc > 1 && i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (!strcmp(argv[1], subcommands[i].name)) return subcommands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "usage: dump sha256|schedule|ce|optim|model|forward|train|loader ARGS... (tests/dump.c)\n");
    return 2;
}
