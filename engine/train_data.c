// Batches for `bertpre train` (see train_data.h): the loader with the run's seed, shapes and
// vocabulary checks, or synthetic batches; and the evaluation pass after training.
#include "engine/train_data.h"
#include <stdio.h>
#include <string.h>
#include "bertpre_config.h"
#include "kernels/common/check.h"
#include "data/masking.h"
#include "data/synthetic.h"
#if BERTPRE_HAVE_HDF5
#include "data/loader.h"
#endif
#if BERTPRE_HAVE_SENTENCEPIECE
#include "tokenizer/tokenizer.h"
#endif

struct train_data {
    char description[2200];
    int rank;  // for messages
#if BERTPRE_HAVE_HDF5
    loader *train;
    loader_options options;
#endif
};

// Special ids for dynamic masking: ALBERT's convention (also the synthetic data's) unless a
// tokenizer says otherwise; its vocabulary must fit the model's embedding table.
static masking_params masking_from_config(const run_config *cfg) {
    masking_params mp = {0.15, cfg->train.max_predictions_per_seq, SYNTH_CLS, SYNTH_SEP, SYNTH_PAD, SYNTH_MASK,
                         SYNTH_FIRST_WORD, cfg->model.vocab_size};
    const char *path = cfg->train.tokenizer;
    if (!path[0]) return mp;
#if BERTPRE_HAVE_SENTENCEPIECE
    tokenizer *tok;
    tokenizer_status s = tokenizer_load(&tok, path);
    if (!s.ok) fatal("train.tokenizer: %s", s.message);
    int V = tokenizer_vocab_size(tok);
    tokenizer_special_ids sp = tokenizer_specials(tok);
    tokenizer_free(tok);
    if (V > cfg->model.vocab_size)
        fatal("train.tokenizer '%s' has %d pieces, more than the model's vocab_size = %d; raise model.vocab_size "
              "or train a smaller tokenizer", path, V, cfg->model.vocab_size);
    if (sp.cls < 0 || sp.sep < 0 || sp.mask < 0)
        fatal("train.tokenizer '%s' lacks [CLS], [SEP] or [MASK]", path);
    int specials[5] = {sp.pad, sp.unk, sp.cls, sp.sep, sp.mask}, lo = 0;
    for (int i = 0; i < 5; i++)
        if (specials[i] + 1 > lo) lo = specials[i] + 1;
    return (masking_params){0.15, cfg->train.max_predictions_per_seq, sp.cls, sp.sep, sp.pad < 0 ? 0 : sp.pad,
                            sp.mask, lo, V};
#else
    fatal("train.tokenizer '%s': this bertpre was built without SentencePiece (install libsentencepiece-dev and "
          "rebuild)", path);
#endif
}

train_data *train_data_open(const run_config *cfg, int rank, int world_size) {
    const train_config *t = &cfg->train;
    train_data *d = xcalloc(1, sizeof *d);
    d->rank = rank;
    masking_params mp = masking_from_config(cfg);
    if (!t->data[0]) {
        if (t->eval_data[0]) fatal("train.eval_data is set but train.data is not");
        snprintf(d->description, sizeof d->description, "synthetic batches (data/synthetic.h)");
        return d;
    }
#if BERTPRE_HAVE_HDF5
    d->options = (loader_options){.batch_size = t->micro_batch_size,
                                  .rank = rank,
                                  .world_size = world_size,
                                  .seed = (uint64_t)t->seed,
                                  .vocab_size = cfg->model.vocab_size,
                                  .seq_length = t->seq_length,
                                  .max_predictions = t->max_predictions_per_seq,
                                  .shuffle = 1,
                                  .prefetch = 4,
                                  .check_on_open = 1,
                                  .dynamic_masking = t->dynamic_masking,
                                  .masking = mp};
    d->train = loader_open(t->data, &d->options);
    snprintf(d->description, sizeof d->description, "%ld samples in %d shard(s) from %s%s",
             loader_samples(d->train), loader_shard_count(d->train), t->data,
             t->dynamic_masking ? ", dynamic masking" : "");
#else
    (void)rank, (void)world_size, (void)mp;
    fatal("train.data = '%s': this bertpre was built without HDF5 (install libhdf5-dev and rebuild)", t->data);
#endif
    return d;
}

void train_data_fill(train_data *d, const run_config *cfg, batch_t *micro, int accum, uint32_t first) {
#if BERTPRE_HAVE_HDF5
    if (d->train) {
        for (int k = 0; k < accum; k++) loader_next_batch(d->train, &micro[k]);
        return;
    }
#endif
    for (int k = 0; k < accum; k++)
        synthetic_batch(&micro[k], cfg->model.vocab_size, (uint64_t)cfg->train.seed, first + (uint32_t)k);
}

int train_data_cursor(const train_data *d, uint32_t next_first, int64_t *out, int max) {
    if (max < 6) fatal("train_data_cursor: room for %d integers, 6 needed", max);
#if BERTPRE_HAVE_HDF5
    if (d->train) {
        loader_cursor c = loader_cursor_get(d->train);
        int64_t values[6] = {c.epoch, c.position, (int64_t)c.seed, c.rank, c.world_size, c.samples};
        memcpy(out, values, sizeof values);
        return 6;
    }
#endif
    out[0] = next_first;
    return 1;
}

void train_data_resume(train_data *d, uint32_t next_first, const int64_t *cursor, int n, const char *where) {
#if BERTPRE_HAVE_HDF5
    if (d->train) {
        if (n != 6)
            fatal("%s: the data cursor of rank %d has %d integers, not the loader's 6: the checkpoint was written "
                  "on synthetic batches (train.data empty)", where, d->rank, n);
        loader_cursor c = {.epoch = cursor[0], .position = cursor[1], .seed = (uint64_t)cursor[2],
                           .rank = (int32_t)cursor[3], .world_size = (int32_t)cursor[4], .samples = cursor[5]};
        loader_cursor_set(d->train, c);
        return;
    }
#endif
    if (n != 1 || cursor[0] != next_first)
        fatal("%s: the data cursor of rank %d does not continue synthetic batches at micro-batch %u (was the "
              "checkpoint written with train.data set?)", where, d->rank, next_first);
}

const char *train_data_describe(const train_data *d) { return d->description; }

void train_data_evaluate(train_data *d, const run_config *cfg, bert_model *m, batch_t *scratch) {
    const train_config *t = &cfg->train;
    if (!t->eval_data[0]) return;
#if BERTPRE_HAVE_HDF5
    loader_options o = d->options;
    o.shuffle = 0;
    o.dynamic_masking = 0;
    loader *l = loader_open(t->eval_data, &o);
    long batches = loader_rank_samples(l) / t->micro_batch_size;
    if (batches == 0) batches = 1;
    if (t->eval_batches > 0 && t->eval_batches < batches) batches = t->eval_batches;
    double mlm = 0.0, nsp = 0.0;
    long n_pred = 0, correct = 0, nsp_correct = 0, sequences = 0;
    float smoothing = m->label_smoothing;
    m->label_smoothing = 0.0f;  // the evaluation reports the plain cross-entropy
    for (long b = 0; b < batches; b++) {
        loader_next_batch(l, scratch);
        bert_losses s = bert_forward(m, scratch, 0, (uint64_t)t->seed, 0);
        mlm += s.mlm_sum;
        nsp += s.nsp_sum;
        n_pred += s.n_pred;
        correct += s.mlm_correct;
        nsp_correct += s.nsp_correct;
        sequences += scratch->B;
    }
    m->label_smoothing = smoothing;
    printf("eval | %ld sequences of %s | mlm loss %.4f | nsp loss %.4f | mlm acc %.3f | nsp acc %.3f\n", sequences,
           t->eval_data, n_pred ? mlm / n_pred : 0.0, nsp / sequences, n_pred ? (double)correct / n_pred : 0.0,
           (double)nsp_correct / sequences);
    loader_close(l);
#else
    (void)d, (void)m, (void)scratch;
#endif
}

void train_data_close(train_data *d) {
#if BERTPRE_HAVE_HDF5
    if (d->train) loader_close(d->train);
#endif
    free(d);
}
