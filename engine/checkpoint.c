// Checkpoint directories (format in checkpoint.h and docs/CHECKPOINTS.md). Crash safety
// comes from the order of operations: every file is written and fsynced inside a
// temporary directory, COMPLETE last, and only then is the directory renamed to its
// step name; readers take only directories with that name and a COMPLETE file.
#include "engine/checkpoint.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kernels/common/check.h"
#include "engine/safetensors.h"

enum { FORMAT_VERSION = 1 };
static const char *TMP_PREFIX = ".tmp-";

static void fsync_path(const char *path, int directory) {
    int fd = open(path, directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    check_file(fd >= 0, path, "opening for fsync");
    check_file(fsync(fd) == 0, path, "fsync");
    close(fd);
}

static void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    check_file(fp, path, "creating");
    int ok = fputs(text, fp) >= 0 && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    ok = (fclose(fp) == 0) && ok;
    check_file(ok, path, "writing");
}

static void remove_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    char file[2300];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        check_file(unlink(file) == 0, file, "removing");
    }
    closedir(d);
    check_file(rmdir(path) == 0, path, "removing the directory");
}

static void make_dirs(const char *path) {
    char buf[1100];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) check_file(0, buf, "creating the directory");
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) check_file(0, buf, "creating the directory");
}

// FNV-1a over the canonical text of the config: a short name for "the same run config".
static void config_hash(json_t *config, char out[32]) {
    char *text = json_dumps(config, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    uint64_t h = 14695981039346656037ull;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) h = (h ^ *p) * 1099511628211ull;
    snprintf(out, 32, "fnv1a64:%016llx", (unsigned long long)h);
    free(text);
}

// Host copies of the tensors of a flat backend buffer, named prefix + table name.
static st_entry *tensor_entries(const bert_model *m, const float *host, const char *prefix, char (*names)[128]) {
    st_entry *e = xcalloc(m->n_tensors, sizeof(st_entry));
    for (int i = 0; i < m->n_tensors; i++) {
        const param_info *p = &m->table[i];
        snprintf(names[i], 128, "%s%s", prefix, p->name);
        e[i] = (st_entry){names[i], "F32", p->ndim, {p->shape[0], p->shape[1]}, host + p->offset};
    }
    return e;
}

static void write_tensors(const char *path, const bert_model *m, const float *const *buffers,
                          const char *const *prefixes, int n_buffers) {
    int n = m->n_tensors * n_buffers;
    st_entry *all = xcalloc(n, sizeof(st_entry));
    char (*names)[128] = xcalloc(n, 128);
    for (int b = 0; b < n_buffers; b++) {
        st_entry *e = tensor_entries(m, buffers[b], prefixes[b], names + b * m->n_tensors);
        memcpy(all + b * m->n_tensors, e, m->n_tensors * sizeof(st_entry));
        free(e);
    }
    json_t *meta = json_pack("{s:s}", "format", "pt");
    st_write(path, all, n, meta);
    json_decref(meta);
    free(names);
    free(all);
}

static float *download(const bert_model *m, const float *buffer) {
    float *host = xmalloc(m->n_params * sizeof(float));
    m->be->download(host, buffer, m->n_params * sizeof(float));
    return host;
}

// Test hook (documented in docs/CHECKPOINTS.md as test-only): with
// BERTPRE_TEST_DIE_DURING_CHECKPOINT=N the Nth checkpoint this process writes kills the
// process with SIGKILL after its first file, so a test can check what a crash leaves.
static void maybe_die_for_test(void) {
    static int written = 0;
    const char *env = getenv("BERTPRE_TEST_DIE_DURING_CHECKPOINT");
    if (env && atoi(env) == ++written) raise(SIGKILL);
}

// Writes files into a temporary sibling of `final`, then renames it into place.
static void write_dir(const char *final, const bert_model *m, const lamb_state *opt, json_t *state) {
    char parent[1100], tmp[1200], path[1300];
    snprintf(parent, sizeof parent, "%s", final);
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : final;
    if (slash) *slash = 0;
    else snprintf(parent, sizeof parent, ".");
    snprintf(tmp, sizeof tmp, "%s/%s%s.%d", parent, TMP_PREFIX, base, (int)getpid());
    remove_dir(tmp);
    check_file(mkdir(tmp, 0777) == 0, tmp, "creating the directory");

    float *params = download(m, m->params);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    const char *model_prefix[] = {""};
    write_tensors(path, m, (const float *const[]){params}, model_prefix, 1);
    free(params);
    maybe_die_for_test();
    if (opt) {
        float *mom1 = download(m, opt->m), *mom2 = download(m, opt->v);
        snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
        const char *prefixes[] = {"exp_avg.", "exp_avg_sq."};
        write_tensors(path, m, (const float *const[]){mom1, mom2}, prefixes, 2);
        free(mom1);
        free(mom2);
    }
    char *text = json_dumps(state, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    snprintf(path, sizeof path, "%s/state.json", tmp);
    write_text(path, text);
    free(text);
    snprintf(path, sizeof path, "%s/COMPLETE", tmp);
    write_text(path, "complete\n");
    fsync_path(tmp, 1);

    // A checkpoint of the same step may exist (a skipped step does not advance the step):
    // it is moved aside first, so a crash between the renames still leaves the older ones.
    struct stat st;
    if (stat(final, &st) == 0) {
        snprintf(path, sizeof path, "%s/%sold-%s.%d", parent, TMP_PREFIX, base, (int)getpid());
        check_file(rename(final, path) == 0, final, "moving the previous checkpoint of this step aside");
        check_file(rename(tmp, final) == 0, final, "renaming the new checkpoint into place");
        remove_dir(path);
    } else {
        check_file(rename(tmp, final) == 0, final, "renaming the new checkpoint into place");
    }
    fsync_path(parent, 1);
}

static json_t *model_json(const bert_model *m) { return bert_config_to_json(&m->cfg); }

void checkpoint_save(const char *root, const run_config *cfg, const bert_model *m, const lamb_state *opt,
                     const train_state *s, int keep, char *out, size_t size) {
    const train_config *t = &cfg->train;
    json_t *config = json_pack("{s:o, s:o}", "model", model_json(m), "train", train_config_to_json(t));
    char hash[32];
    config_hash(config, hash);
    json_t *cursors = json_array();
    for (int r = 0; r < s->world_size; r++) {
        json_t *row = json_array();
        for (int i = 0; i < s->cursor_len; i++)
            json_array_append_new(row, json_integer((json_int_t)s->cursors[(size_t)r * s->cursor_len + i]));
        json_array_append_new(cursors, row);
    }
    const loss_scaler *ls = &s->scaler;
    json_t *state = json_pack(
        "{s:s, s:i, s:s, s:I, s:I, s:I, s:i,"
        " s:{s:I, s:I, s:f, s:f},"
        " s:{s:s, s:I, s:f, s:f, s:f, s:f, s:f},"
        " s:{s:f, s:f, s:b, s:i, s:i, s:I, s:I, s:i},"
        " s:{s:s, s:I, s:I},"
        " s:{s:i, s:o},"
        " s:o, s:s}",
        "format", "bertpre-checkpoint", "version", FORMAT_VERSION, "kind", "training", "step", (json_int_t)s->applied,
        "iteration", (json_int_t)s->iteration, "skipped_steps", (json_int_t)s->skipped, "phase", t->phase,
        "schedule", "next_update", (json_int_t)(s->applied + 1), "total_updates", (json_int_t)t->steps,
        "learning_rate", t->learning_rate, "warmup_proportion", t->warmup_proportion,
        "optimizer", "name", "lamb", "step", (json_int_t)opt->step, "beta1", opt->beta1, "beta2", opt->beta2, "eps",
        opt->eps, "weight_decay", opt->weight_decay, "max_grad_norm", opt->max_grad_norm,
        "loss_scaler", "scale", ls->scale, "min_scale", ls->min_scale, "dynamic", ls->dynamic, "growth_interval",
        ls->growth_interval, "max_skips", ls->max_skips, "clean_steps", (json_int_t)ls->clean_steps, "skipped",
        (json_int_t)ls->skipped, "consecutive", ls->consecutive,
        "rng", "generator", "philox4x32-10, counter-based: (seed, micro-batch number, site, element)", "seed",
        (json_int_t)t->seed, "next_iteration", (json_int_t)s->iteration,
        "data", "world_size", s->world_size, "cursors", cursors,
        "config", config, "config_hash", hash);
    if (!state) fatal("checkpoint: building state.json failed");
    make_dirs(root);
    snprintf(out, size, "%s/step-%09ld", root, s->applied);
    write_dir(out, m, opt, state);
    json_decref(state);

    // Keep the newest `keep` complete checkpoints; drop what interrupted writes left.
    DIR *d = opendir(root);
    check_file(d, root, "listing the checkpoint directory");
    long steps[4096];
    int n = 0;
    struct dirent *e;
    char path[2300];
    while ((e = readdir(d))) {
        long step;
        int len = 0;
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        if (!strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX))) {
            remove_dir(path);
        } else if (sscanf(e->d_name, "step-%ld%n", &step, &len) == 1 && e->d_name[len] == 0 && n < 4096) {
            steps[n++] = step;
        }
    }
    closedir(d);
    for (int i = 0; keep > 0 && i < n; i++) {
        int newer = 0;
        for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
        if (newer >= keep) {
            snprintf(path, sizeof path, "%s/step-%09ld", root, steps[i]);
            remove_dir(path);
        }
    }
}

void checkpoint_save_weights(const char *dir, const bert_model *m, const char *source) {
    struct stat st;
    if (stat(dir, &st) == 0) fatal("%s already exists; choose a new directory for the checkpoint", dir);
    json_t *config = json_pack("{s:o}", "model", model_json(m));
    char hash[32];
    config_hash(config, hash);
    json_t *state = json_pack("{s:s, s:i, s:s, s:s, s:o, s:s}", "format", "bertpre-checkpoint", "version",
                              FORMAT_VERSION, "kind", "weights", "source", source, "config", config, "config_hash",
                              hash);
    char parent[1100];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        make_dirs(parent);
    }
    write_dir(dir, m, NULL, state);
    json_decref(state);
}

int checkpoint_latest(const char *root, char *out, size_t size) {
    DIR *d = opendir(root);
    if (!d) return 0;
    long best = -1;
    struct dirent *e;
    char path[2300];
    while ((e = readdir(d))) {
        long step;
        int len = 0;
        if (sscanf(e->d_name, "step-%ld%n", &step, &len) != 1 || e->d_name[len] != 0 || step <= best) continue;
        snprintf(path, sizeof path, "%s/%s/COMPLETE", root, e->d_name);
        if (access(path, R_OK) == 0) best = step;
    }
    closedir(d);
    if (best < 0) return 0;
    snprintf(out, size, "%s/step-%09ld", root, best);
    return 1;
}

static json_t *get(const checkpoint *c, json_t *obj, const char *key, int (*is_type)(const json_t *)) {
    json_t *v = json_object_get(obj, key);
    if (!v || (is_type && !is_type(v))) fatal("%s/state.json: missing or invalid field '%s'", c->dir, key);
    return v;
}
static int is_object(const json_t *v) { return json_is_object(v); }
static int is_integer(const json_t *v) { return json_is_integer(v); }
static int is_number(const json_t *v) { return json_is_number(v); }
static int is_array(const json_t *v) { return json_is_array(v); }
static long get_long(const checkpoint *c, json_t *obj, const char *key) {
    return (long)json_integer_value(get(c, obj, key, is_integer));
}
static double get_real(const checkpoint *c, json_t *obj, const char *key) {
    return json_number_value(get(c, obj, key, is_number));
}

void checkpoint_open(checkpoint *c, const char *dir) {
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    char path[1300];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) fatal("checkpoint %s: not a directory", dir);
    snprintf(path, sizeof path, "%s/COMPLETE", dir);
    if (access(path, R_OK) != 0)
        fatal("checkpoint %s is incomplete (no COMPLETE file: its write was interrupted); use an older one", dir);
    snprintf(path, sizeof path, "%s/state.json", dir);
    json_error_t err;
    c->state = json_load_file(path, 0, &err);
    if (!c->state) fatal("%s: cannot read: %s", path, err.text);
    json_t *format = json_object_get(c->state, "format");
    if (!json_is_string(format) || strcmp(json_string_value(format), "bertpre-checkpoint") != 0)
        fatal("%s: field 'format' is not \"bertpre-checkpoint\"", path);
    long version = get_long(c, c->state, "version");
    if (version != FORMAT_VERSION)
        fatal("%s: field 'version' = %ld, this bertpre reads version %d", path, version, FORMAT_VERSION);
    json_t *config = get(c, c->state, "config", is_object);
    char hash[32];
    config_hash(config, hash);
    json_t *stored = json_object_get(c->state, "config_hash");
    if (!json_is_string(stored) || strcmp(json_string_value(stored), hash) != 0)
        fatal("%s: field 'config_hash' = %s does not match the stored config (%s): the file was edited or damaged",
              path, json_is_string(stored) ? json_string_value(stored) : "(missing)", hash);
    char where[1400];
    snprintf(where, sizeof where, "%s: config.model", path);
    bert_config_from_json(&c->model, get(c, config, "model", is_object), where);
    json_t *kind = json_object_get(c->state, "kind");
    c->training = json_is_string(kind) && !strcmp(json_string_value(kind), "training");
}

void checkpoint_close(checkpoint *c) {
    json_decref(c->state);
    memset(c, 0, sizeof *c);
}

// Names the first field where the two JSON objects differ, or returns NULL.
static const char *first_difference(json_t *a, json_t *b, const char *const *only) {
    const char *key;
    json_t *value;
    json_object_foreach(a, key, value) {
        if (only) {
            int listed = 0;
            for (int i = 0; only[i]; i++) listed |= !strcmp(only[i], key);
            if (!listed) continue;
        }
        json_t *other = json_object_get(b, key);
        if (!other || !json_equal(value, other)) return key;
    }
    return NULL;
}

static void fit_or_die(const checkpoint *c, json_t *stored, json_t *current, const char *section,
                       const char *const *only, const char *config_path, const char *hint) {
    const char *field = first_difference(stored, current, only);
    if (!field) field = first_difference(current, stored, only);
    if (!field) return;
    char *a = json_dumps(json_object_get(stored, field), JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    char *b = json_dumps(json_object_get(current, field), JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
    fatal("checkpoint %s does not fit the config %s: %s.%s is %s in the checkpoint and %s in the config%s", c->dir,
          config_path, section, field, a ? a : "(absent)", b ? b : "(absent)", hint);
}

static void read_tensors(const checkpoint *c, const char *file, const bert_model *m, const char *prefix,
                         float *buffer) {
    char path[1300], name[160];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    st_file f;
    st_open(&f, path);
    float *host = xcalloc(m->n_params, sizeof(float));
    for (int i = 0; i < m->n_tensors; i++) {
        const param_info *p = &m->table[i];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        const st_tensor *t = st_find(&f, name);
        if (!t) fatal("%s: missing tensor '%s'", path, name);
        if (strcmp(t->dtype, "F32") != 0 || t->ndim != p->ndim || t->shape[0] != p->shape[0] ||
            (p->ndim == 2 && t->shape[1] != p->shape[1]))
            fatal("%s: tensor '%s' is %s of %d dimensions [%lld, %lld], expected F32 [%d, %d]", path, name,
                  t->dtype, t->ndim, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                  p->shape[0], p->ndim == 2 ? p->shape[1] : 0);
        st_read_float(&f, t, host + p->offset);
    }
    m->be->upload(buffer, host, m->n_params * sizeof(float));
    free(host);
    st_close(&f);
}

void checkpoint_check_model(const checkpoint *c, const bert_config *model, const char *config_path) {
    json_t *stored = bert_config_to_json(&c->model), *current = bert_config_to_json(model);
    fit_or_die(c, stored, current, "model", NULL, config_path,
               " (the weights of one model shape do not load into another)");
    json_decref(stored);
    json_decref(current);
}

void checkpoint_load_weights(const checkpoint *c, bert_model *m) {
    checkpoint_check_model(c, &m->cfg, "in use");
    read_tensors(c, "model.safetensors", m, "", m->params);
    bert_sync_compute(m);
}

// Synthetic batches are numbered by micro-batch across the whole run (one integer per rank):
// they continue on any number of ranks, from rank 0's number.
static int synthetic_cursors(const checkpoint *c) {
    json_t *cursors = json_object_get(json_object_get(c->state, "data"), "cursors");
    json_t *row = json_array_get(cursors, 0);
    return json_is_array(row) && json_array_size(row) == 1 && json_is_integer(json_array_get(row, 0));
}

// The synthetic cursors of `world` ranks: rank r starts accumulation x r micro-batches after
// rank 0 (cmd_train's numbering).
static void synthetic_cursors_for(train_state *s, int world, int accumulation) {
    int64_t first = s->cursors[0];
    free(s->cursors);
    s->cursors = xcalloc((size_t)world, sizeof(int64_t));
    for (int r = 0; r < world; r++) s->cursors[r] = first + (int64_t)r * accumulation;
    s->world_size = world;
}

void checkpoint_check_resume(const checkpoint *c, const run_config *cfg, const char *config_path) {
    if (!c->training)
        fatal("checkpoint %s holds weights only (kind \"weights\"): start from it with --init-from, not --resume",
              c->dir);
    json_t *config = json_object_get(c->state, "config");
    checkpoint_check_model(c, &cfg->model, config_path);
    // The fields that decide what the next steps compute; the rest (logging, checkpoint
    // cadence, backend) may change between a run and its resume.
    static const char *const same_run[] = {"seed", "micro_batch_size", "global_batch_size", "seq_length",
                                           "max_predictions_per_seq", "steps", "learning_rate",
                                           "warmup_proportion", "precision", "phase", "data", "dynamic_masking",
                                           NULL};
    json_t *train = train_config_to_json(&cfg->train);
    fit_or_die(c, get(c, config, "train", is_object), train, "train", same_run, config_path,
               " (--resume continues the same run; --init-from starts a new run from the weights)");
    json_decref(train);
    json_t *data = get(c, c->state, "data", is_object);
    int world = (int)get_long(c, data, "world_size");
    if (world != cfg->train.world_size && !synthetic_cursors(c))
        fatal("checkpoint %s was written by %d rank(s) and this run has %d: every rank's data cursor must be "
              "resumed by the same rank; relaunch with %d", c->dir, world, cfg->train.world_size, world);
}

void checkpoint_resume(const checkpoint *c, const run_config *cfg, const char *config_path, bert_model *m,
                       lamb_state *opt, train_state *s) {
    checkpoint_check_resume(c, cfg, config_path);
    json_t *cursors = get(c, get(c, c->state, "data", is_object), "cursors", is_array);
    // Another rank count only on synthetic batches (checked above): read the stored ranks' rows.
    int world = synthetic_cursors(c) ? (int)json_array_size(cursors) : cfg->train.world_size;
    if ((int)json_array_size(cursors) != world)
        fatal("%s/state.json: data.cursors has %zu rows for %d ranks", c->dir, json_array_size(cursors), world);
    s->world_size = world;
    s->cursor_len = world ? (int)json_array_size(json_array_get(cursors, 0)) : 0;
    if (s->cursor_len > CHECKPOINT_CURSOR_MAX)
        fatal("%s/state.json: data.cursors rows have %d values, at most %d", c->dir, s->cursor_len,
              CHECKPOINT_CURSOR_MAX);
    s->cursors = xcalloc((size_t)world * (s->cursor_len ? s->cursor_len : 1), sizeof(int64_t));
    for (int r = 0; r < world; r++) {
        json_t *row = json_array_get(cursors, r);
        if (!json_is_array(row) || (int)json_array_size(row) != s->cursor_len)
            fatal("%s/state.json: data.cursors[%d] is not an array of %d integers", c->dir, r, s->cursor_len);
        for (int i = 0; i < s->cursor_len; i++) {
            json_t *v = json_array_get(row, i);
            if (!json_is_integer(v)) fatal("%s/state.json: data.cursors[%d][%d] is not an integer", c->dir, r, i);
            s->cursors[(size_t)r * s->cursor_len + i] = json_integer_value(v);
        }
    }
    if (world != cfg->train.world_size)
        synthetic_cursors_for(s, cfg->train.world_size, cfg->train.accumulation_steps);
    s->applied = get_long(c, c->state, "step");
    s->iteration = get_long(c, c->state, "iteration");
    s->skipped = get_long(c, c->state, "skipped_steps");
    json_t *ls = get(c, c->state, "loss_scaler", is_object);
    s->scaler = (loss_scaler){.scale = get_real(c, ls, "scale"),
                              .min_scale = get_real(c, ls, "min_scale"),
                              .dynamic = json_is_true(get(c, ls, "dynamic", NULL)),
                              .growth_interval = (int)get_long(c, ls, "growth_interval"),
                              .max_skips = (int)get_long(c, ls, "max_skips"),
                              .clean_steps = get_long(c, ls, "clean_steps"),
                              .skipped = get_long(c, ls, "skipped"),
                              .consecutive = (int)get_long(c, ls, "consecutive")};
    json_t *o = get(c, c->state, "optimizer", is_object);
    opt->step = get_long(c, o, "step");
    opt->beta1 = get_real(c, o, "beta1");
    opt->beta2 = get_real(c, o, "beta2");
    opt->eps = get_real(c, o, "eps");
    opt->weight_decay = get_real(c, o, "weight_decay");
    opt->max_grad_norm = get_real(c, o, "max_grad_norm");
    if (s->applied < 0 || s->applied > cfg->train.steps || s->iteration < s->applied)
        fatal("%s/state.json: step %ld / iteration %ld do not fit a run of %d steps", c->dir, s->applied,
              s->iteration, cfg->train.steps);
    checkpoint_load_weights(c, m);
    read_tensors(c, "optimizer.safetensors", m, "exp_avg.", opt->m);
    read_tensors(c, "optimizer.safetensors", m, "exp_avg_sq.", opt->v);
}
