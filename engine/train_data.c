// Batches for `bertpre train` (see train_data.h): the loader with the run's seed, shapes and
// vocabulary checks, or synthetic batches; and the evaluation pass after training.
#include "engine/train_data.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <jansson.h>
#include "bertpre_config.h"
#include "kernels/common/check.h"
#include "data/masking.h"
#include "data/synthetic.h"
#include "engine/dist.h"
#include "engine/sha256.h"
#include "kernels/common/files.h"
#if BERTPRE_HAVE_HDF5
#include "data/loader.h"
#endif
#include "tokenizer/tokenizer.h"

struct train_data {
    char description[2200];
    int rank;  // for messages
    const char *spec;  // train.data
#if BERTPRE_HAVE_HDF5
    loader *train;
    loader_options options;
#endif
    masking_params masking;  // dynamic masking's (its whole-word table is released on close)
};

// Special ids for dynamic masking: ALBERT's convention (also the synthetic data's) unless a
// tokenizer says otherwise; its vocabulary must fit the model's embedding table.
static masking_params masking_from_config(const run_config *cfg) {
    const char *path = cfg->train.tokenizer;
    if (!path[0]) return synth_masking(cfg->model.vocab_size, cfg->train.mask_prob,
                                        cfg->train.max_predictions_per_seq);
    struct stat st;
    int found = stat(path, &st) == 0;
    if (!found || S_ISDIR(st.st_mode))
        fatal("train.tokenizer = '%s': %s (paths in a config file are relative to its directory, those of --set "
              "to the current directory)", path, found ? "a directory, not a SentencePiece model or vocab.txt"
              : "no such file");
    tokenizer *tok;
    tokenizer_status s = tokenizer_load(&tok, path);
    if (!s.ok) fatal("train.tokenizer: %s", s.message);
    int V = tokenizer_vocab_size(tok);
    tokenizer_special_ids sp = tokenizer_specials(tok);
    if (V > cfg->model.vocab_size)
        fatal("train.tokenizer '%s' has %d pieces, more than the model's vocab_size = %d; raise model.vocab_size "
              "or train a smaller tokenizer", path, V, cfg->model.vocab_size);
    if (sp.cls < 0 || sp.sep < 0 || sp.mask < 0)
        fatal("train.tokenizer '%s' lacks [CLS], [SEP] or [MASK]", path);
    masking_params mp = masking_for_tokenizer(sp, V, cfg->train.mask_prob, cfg->train.max_predictions_per_seq);
    if (cfg->train.whole_word_mask) masking_whole_words(&mp, tok);
    tokenizer_free(tok);
    return mp;
}

#if BERTPRE_HAVE_HDF5
// Shards whose ids come from another tokenizer than train.tokenizer (prep records its file's
// SHA-256): whole-word masking would take another vocabulary's word boundaries, dynamic
// masking its specials, and the export another tokenizer. Shards without the record pass.
// hex: train.tokenizer's SHA-256, computed at the first shard that records one ("" before).
static void refuse_other_tokenizer(const run_config *cfg, const loader *l, const char *field, char hex[65]) {
    const char *path = cfg->train.tokenizer;
    for (int i = 0; i < loader_shard_count(l); i++) {
        const char *made = loader_shard_tokenizer(l, i);
        if (!made[0] || !path[0]) continue;
        if (!hex[0] && sha256_file(path, hex) != 0)
            fatal("train.tokenizer '%s': cannot be read to compare it with the shards' tokenizer: %s", path,
                  strerror(errno));
        if (strcmp(hex, made) != 0)
            fatal("train.%s: %s was written by bertpre prep with another tokenizer (SHA-256 %.12s...) than "
                  "train.tokenizer '%s' (SHA-256 %.12s...): its ids are that tokenizer's pieces; give the tokenizer "
                  "the shards were made with, or write the shards again with this one", field,
                  loader_shard_path(l, i), made, path, hex);
    }
}

// Packed MLM-only rows have no next-sentence pairs: an mlm+nsp run would learn NSP from
// labels that mean nothing.
static void refuse_nsp_on_mlm_rows(const run_config *cfg, const loader *l, const char *field) {
    const char *packing = NULL, *shard = cfg->model.mlm_only ? NULL : loader_mlm_only_shard(l, &packing);
    if (shard)
        fatal("train.%s: %s holds MLM-only rows (written by bertpre prep --packing %s: no next-sentence pairs), and "
              "train.objective = \"%s\" trains next-sentence prediction: set train.objective to \"mlm\", or write "
              "the shards with --packing pairs", field, shard, packing, cfg->train.objective);
}
#endif

train_data *train_data_open(const run_config *cfg, int rank, int world_size) {
    const train_config *t = &cfg->train;
    train_data *d = xcalloc(1, sizeof *d);
    d->rank = rank;
    masking_params mp = d->masking = masking_from_config(cfg);
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
                                  .check_on_open = 0,
                                  .skip_heldout = 1,
                                  .dynamic_masking = t->dynamic_masking,
                                  .masking = mp};
    d->train = loader_open(t->data, &d->options);
    d->spec = t->data;
    refuse_nsp_on_mlm_rows(cfg, d->train, "data");
    char tokenizer_hex[65] = "";  // hashed once for the train and the eval shards
    refuse_other_tokenizer(cfg, d->train, "data", tokenizer_hex);
    if (t->eval_data[0]) {
        // The eval shards are opened (structure checked) now, not after the last step, and
        // must not be trained on.
        loader_options o = d->options;
        o.shuffle = 0, o.prefetch = 0, o.skip_heldout = 0, o.heldout_only = 1;
        loader *e = loader_open(t->eval_data, &o);
        refuse_nsp_on_mlm_rows(cfg, e, "eval_data");
        refuse_other_tokenizer(cfg, e, "eval_data", tokenizer_hex);
        for (int i = 0; i < loader_shard_count(e); i++)
            for (int j = 0; j < loader_shard_count(d->train); j++)
                if (same_file(loader_shard_path(e, i), loader_shard_path(d->train, j)))
                    fatal("train.eval_data '%s' and train.data '%s' both hold %s: evaluation data must be held out "
                          "from training", t->eval_data, t->data, loader_shard_path(e, i));
        loader_close(e);
    }
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
        synthetic_batch_masked(&micro[k], cfg->model.vocab_size, (uint64_t)cfg->train.seed, first + (uint32_t)k,
                               cfg->train.mask_prob);
}

int train_data_cursor(const train_data *d, uint32_t next_first, int64_t *out, int max) {
    CHECK(max >= 6, "train_data_cursor: room for %d integers, 6 needed", max);
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
        if (c.samples != loader_samples(d->train))
            fatal("%s: the data set changed since this checkpoint: it was written on %lld samples and train.data "
                  "'%s' now names %d shard(s) (%s ... %s) holding %ld samples; a shard was added, removed or "
                  "rewritten. Resume needs the same shards (or start a new run with --init-from)",
                  where, (long long)c.samples, d->spec, loader_shard_count(d->train),
                  loader_shard_path(d->train, 0), loader_shard_path(d->train, loader_shard_count(d->train) - 1),
                  loader_samples(d->train));
        loader_cursor_set(d->train, c);
        return;
    }
#endif
    if (n != 1 || cursor[0] != next_first)
        fatal("%s: the data cursor of rank %d does not continue synthetic batches at micro-batch %u (was the "
              "checkpoint written with train.data set?)", where, d->rank, next_first);
}

const char *train_data_describe(const train_data *d) { return d->description; }

#if BERTPRE_HAVE_HDF5
// The evaluation's reader: the whole set (rank 0 of 1) in file order with the stored masks; a
// directory that holds prep's held-out eval-* shards means those (as in train.eval_data).
static loader *open_eval_shards(const char *path, int vocab_size, int B, int T, int P, uint64_t seed) {
    loader_options o = {.batch_size = B, .rank = 0, .world_size = 1, .seed = seed, .vocab_size = vocab_size,
                        .seq_length = T, .max_predictions = P, .shuffle = 0, .prefetch = 4, .check_on_open = 1,
                        .heldout_only = 1};
    return loader_open(path, &o);
}

// "eval: N shard(s) of PATH, R rows: a, b, ..." (the first few paths).
static void print_eval_shards(const loader *l, const char *path, long rows) {
    int n = loader_shard_count(l), shown = n < 4 ? n : 4;
    printf("eval: %d shard%s of %s, %ld rows:", n, n == 1 ? "" : "s", path, rows);
    for (int i = 0; i < shown; i++) printf("%s %s", i ? "," : "", loader_shard_path(l, i));
    printf("%s\n", shown < n ? ", ..." : "");
}
#endif

long eval_shards_shape(const char *path, int vocab_size, int *seq_length, int *max_predictions) {
#if BERTPRE_HAVE_HDF5
    loader *l = open_eval_shards(path, vocab_size, 1, 0, 0, 0);
    *seq_length = loader_seq_length(l);
    *max_predictions = loader_max_predictions(l);
    long rows = loader_samples(l);
    loader_close(l);
    return rows;
#else
    (void)vocab_size, (void)seq_length, (void)max_predictions;
    fatal("'%s': this bertpre was built without HDF5 (install libhdf5-dev and rebuild)", path);
#endif
}

eval_result evaluate_shards(bert_model *m, const char *path, int batches, uint64_t seed, batch_t *scratch,
                            const volatile sig_atomic_t *cancel) {
    eval_result r = {0};
#if BERTPRE_HAVE_HDF5
    int B = scratch->B, V = m->cfg.vocab_size, rank = dist_rank(), world = dist_world_size();
    loader *l = open_eval_shards(path, V, B, scratch->T, scratch->P, seed);
    // The rows evaluated: all of them, or the first `batches` micro-batches' worth; rank r of
    // W takes the contiguous rows [r*rows/W, (r+1)*rows/W), in micro-batches of B and a last,
    // smaller one, so that every row counts exactly once whatever B and the ranks.
    long rows = loader_samples(l);
    if (batches > 0 && (long)batches * B < rows) rows = (long)batches * B;
    long lo = rows * rank / world, hi = rows * (rank + 1) / world;
    if (rank == 0) print_eval_shards(l, path, rows);
    fflush(stdout);
    if (lo > 0)
        loader_cursor_set(l, (loader_cursor){.epoch = 0, .position = lo, .seed = seed, .rank = 0, .world_size = 1,
                                             .samples = loader_samples(l)});
    // Sums over this rank's rows (then over the ranks): losses, the counts, and how often each
    // token is a masked target: the most frequent one, predicted everywhere, is the unigram
    // baseline that the MLM accuracy is compared with.
    enum { MLM, NSP, N_PRED, MLM_CORRECT, NSP_CORRECT, SEQUENCES, BATCHES, N_SUMS };
    double *sums = xcalloc((size_t)N_SUMS + (size_t)V, sizeof(double)), *target_count = sums + N_SUMS;
    float smoothing = m->label_smoothing;
    m->label_smoothing = 0.0f;  // the evaluation reports the plain cross-entropy
    // Every rank runs the same number of micro-batch turns (the largest share's), so that a
    // stop decided between two of them is decided on all ranks alike.
    long turns = ((rows + world - 1) / world + B - 1) / B;
    // A long evaluation says how far it is (rank 0's share, every progress_every_s()).
    time_t start = time(NULL), said = start;
    int every = progress_every_s();
    for (long turn = 0, row = lo; turn < turns; turn++, row += B) {
        time_t now = time(NULL);
        if (rank == 0 && turn > 0 && now - said >= every) {
            double f = (double)turn / turns, left = (now - start) * (1 - f) / f;
            printf("eval: %ld of %ld rows, about %d:%02d left\n", turn * B * world < rows ? turn * B * world : rows, rows,
                   (int)left / 60, (int)left % 60);
            fflush(stdout);
            said = now;
        }
        if (cancel) {
            double stop = *cancel != 0;
            if (world > 1) dist_sum_doubles(&stop, 1);
            if (stop > 0) {
                r.interrupted = 1;
                break;
            }
        }
        if (row >= hi) continue;
        loader_next_batch(l, scratch);
        batch_t part = batch_slice(scratch, 0, hi - row < B ? (int)(hi - row) : B);
        bert_losses s = bert_forward(m, &part, 0, seed, 0);
        sums[MLM] += s.mlm_sum;
        sums[NSP] += s.nsp_sum;
        sums[N_PRED] += s.n_pred;
        sums[MLM_CORRECT] += s.mlm_correct;
        sums[NSP_CORRECT] += s.nsp_correct;
        sums[SEQUENCES] += part.B;
        sums[BATCHES] += 1;
        for (int i = 0; i < part.B; i++)
            for (int p = 0; p < batch_masked_count(&part, i); p++) target_count[part.masked_lm_ids[i * part.P + p]]++;
    }
    m->label_smoothing = smoothing;
    // A model with the NSP head on MLM-only rows: its NSP numbers would mean nothing.
    r.mlm_only = m->cfg.mlm_only || loader_mlm_only_shard(l, NULL) != NULL;
    loader_close(l);
    r.rows = rows;
    if (r.interrupted) {
        free(sums);
        return r;
    }
    if (world > 1) dist_sum_doubles(sums, N_SUMS + V);  // counts below 2^53 add exactly
    double most = 0.0;
    for (int v = 0; v < V; v++)
        if (target_count[v] > most) most = target_count[v];
    r.batches = (long)sums[BATCHES];
    r.sequences = (long)sums[SEQUENCES];
    r.n_pred = (long)sums[N_PRED];
    r.mlm_correct = (long)sums[MLM_CORRECT];
    r.nsp_correct = (long)sums[NSP_CORRECT];
    r.mlm_loss = r.n_pred ? sums[MLM] / r.n_pred : 0.0;
    r.nsp_loss = sums[NSP] / r.sequences;
    r.mlm_accuracy = r.n_pred ? (double)r.mlm_correct / r.n_pred : 0.0;
    r.mlm_baseline_accuracy = r.n_pred ? most / r.n_pred : 0.0;
    r.nsp_accuracy = (double)r.nsp_correct / r.sequences;
    free(sums);
#else
    (void)m, (void)batches, (void)seed, (void)scratch, (void)cancel;
    fatal("'%s': this bertpre was built without HDF5 (install libhdf5-dev and rebuild)", path);
#endif
    return r;
}

json_t *eval_mlm_json(const eval_result *r, double value) { return r->n_pred ? json_real(value) : json_null(); }

void eval_nsp_json(json_t *o, const eval_result *r, int counts) {
    if (r->mlm_only) return;
    json_object_set_new(o, "nsp_loss", json_real(r->nsp_loss));
    json_object_set_new(o, "nsp_accuracy", json_real(r->nsp_accuracy));
    if (counts) json_object_set_new(o, "nsp_correct", json_integer(r->nsp_correct));
}

void eval_result_print(const eval_result *r, const char *path, FILE *out) {
    if (r->mlm_only && !r->n_pred)
        fprintf(out, "eval | %ld sequences of %s | no masked positions in these rows: mlm loss and mlm acc undefined\n",
                r->sequences, path);
    else if (r->mlm_only)
        fprintf(out, "eval | %ld sequences of %s | mlm loss %.4f | mlm acc %.3f (most frequent token: %.3f)\n",
                r->sequences, path, r->mlm_loss, r->mlm_accuracy, r->mlm_baseline_accuracy);
    else if (!r->n_pred)
        fprintf(out,
                "eval | %ld sequences of %s | no masked positions in these rows: mlm loss and mlm acc undefined | "
                "nsp loss %.4f | nsp acc %.3f (chance: 0.5)\n",
                r->sequences, path, r->nsp_loss, r->nsp_accuracy);
    else
        fprintf(out,
                "eval | %ld sequences of %s | mlm loss %.4f | nsp loss %.4f | mlm acc %.3f (most frequent token: "
                "%.3f) | nsp acc %.3f (chance: 0.5)\n",
                r->sequences, path, r->mlm_loss, r->nsp_loss, r->mlm_accuracy, r->mlm_baseline_accuracy,
                r->nsp_accuracy);
}

eval_result train_data_evaluate(train_data *d, const run_config *cfg, bert_model *m, batch_t *scratch, long step,
                                double elapsed, const metrics_sink *metrics, const volatile sig_atomic_t *cancel) {
    const train_config *t = &cfg->train;
    if (!t->eval_data[0]) return (eval_result){0};
    eval_result r = evaluate_shards(m, t->eval_data, t->eval_batches, (uint64_t)t->seed, scratch, cancel);
    if (d->rank != 0) return r;
    if (r.interrupted) {
        printf("eval: interrupted by a stop signal before the end of its %ld rows: no eval line at step %ld\n",
               r.rows, step);
        fflush(stdout);
        return r;
    }
    eval_result_print(&r, t->eval_data, stdout);
    if (!metrics_sink_active(metrics)) return r;
    // The same numbers as one line of the metrics file, marked "eval".
    json_t *line = json_pack("{s:b, s:I, s:I, s:I, s:o, s:o, s:o, s:f}", "eval", 1, "step", (json_int_t)step,
                             "sequences", (json_int_t)r.sequences, "n_pred", (json_int_t)r.n_pred, "mlm_loss",
                             eval_mlm_json(&r, r.mlm_loss), "mlm_accuracy", eval_mlm_json(&r, r.mlm_accuracy),
                             "mlm_baseline_accuracy", eval_mlm_json(&r, r.mlm_baseline_accuracy), "elapsed_s",
                             elapsed);
    eval_nsp_json(line, &r, 0);
    metrics_sink_write(metrics, line);
    json_decref(line);
    return r;
}

void metrics_sink_write(const metrics_sink *sink, const json_t *line) {
    if (!sink) return;
    if (sink->file) {
        char *text = json_dumps_exact(line, JSON_COMPACT);
        int err = write_line(sink->file, text);
        if (err && sink->write_errno && !*sink->write_errno) *sink->write_errno = err;
        free(text);
    }
    if (sink->also) sink->also(sink->ctx, line);
}

void train_data_close(train_data *d) {
#if BERTPRE_HAVE_HDF5
    if (d->train) loader_close(d->train);
#endif
    masking_free(&d->masking);
    free(d);
}
