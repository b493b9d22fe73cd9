// Checkpoint directories (format in checkpoint.h and docs/CHECKPOINTS.md). Crash safety
// comes from the order of operations: every file is written inside a temporary directory,
// COMPLETE last, all of them fsynced, and only then is the directory renamed to its step
// name; readers take only directories with that name and a COMPLETE file.
#include "engine/checkpoint.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kernels/common/check.h"
#include "kernels/common/files.h"
#include "engine/safetensors.h"
#include "engine/sha256.h"
#include "engine/tile.h"

enum { FORMAT_VERSION = 1 };
static const char *TMP_PREFIX = ".tmp-";

static void remove_dir(const char *path) {
    char failed[2300];
    check_file(remove_flat_dir(path, failed, sizeof failed) == 0, failed, "removing");
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

static int write_tensors(const char *path, const bert_model *m, const float *const *buffers,
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
    int status = st_write_file(path, all, n, meta);
    json_decref(meta);
    free(names);
    free(all);
    return status;
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

// A failed write (disk full, I/O error) removes the temporary directory before it reports
// the file, so that nothing half-written stays behind and a retry has the space back.
static void write_failed(const char *tmp, const char *file, const char *what) {
    staged_dir_abort(tmp);
    fatal("checkpoint: %s '%s' failed: %s (the partial checkpoint %s was removed; the previous checkpoints are "
          "intact)", what, file, strerror(errno), tmp);
}

// The manifest written as COMPLETE: the SHA-256 of every other file of the checkpoint.
static void write_manifest(const char *tmp, const char *const *files, int n) {
    char path[1300], hex[65];
    json_t *sums = json_object();
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, files[i]);
        if (sha256_file(path, hex) != 0) write_failed(tmp, path, "reading back for its checksum");
        json_object_set_new(sums, files[i], json_string(hex));
    }
    json_t *manifest = json_pack("{s:s, s:o}", "format", "bertpre-checkpoint-manifest", "sha256", sums);
    snprintf(path, sizeof path, "%s/COMPLETE", tmp);
    if (write_json_file(path, manifest, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) write_failed(tmp, path, "writing");
    json_decref(manifest);
}

// Writes the files into a temporary sibling of `final` (files.h), then moves it into place. A
// checkpoint of the same step may exist (a skipped step does not advance the step): it is
// replaced, moved aside first so that a crash between the renames still leaves one whole.
static void write_dir(const char *final, const bert_model *m, const optim_state *opt, json_t *state) {
    char tmp[1200], path[1300];
    staged_dir_begin(final, "checkpoint", 1, tmp, sizeof tmp);

    const char *files[3];
    int n_files = 0;
    float *params = download(m, m->params);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    const char *model_prefix[] = {""};
    if (write_tensors(path, m, (const float *const[]){params}, model_prefix, 1) != 0)
        write_failed(tmp, path, "writing");
    free(params);
    files[n_files++] = "model.safetensors";
    maybe_die_for_test();
    if (opt) {
        const char *prefixes[2];
        float *buffers[2], *host[2];
        int n = optim_buffer_names(opt, prefixes, buffers);
        for (int i = 0; i < n; i++) host[i] = download(m, buffers[i]);
        snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
        if (write_tensors(path, m, (const float *const *)host, prefixes, n) != 0) write_failed(tmp, path, "writing");
        for (int i = 0; i < n; i++) free(host[i]);
        files[n_files++] = "optimizer.safetensors";
    }
    snprintf(path, sizeof path, "%s/state.json", tmp);
    if (write_json_file(path, state, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) write_failed(tmp, path, "writing");
    files[n_files++] = "state.json";
    write_manifest(tmp, files, n_files);
    staged_dir_commit(tmp, final, "checkpoint", 1);
}

static json_t *model_json(const bert_model *m) { return bert_config_to_json(&m->cfg); }

// 1 when a directory entry is a checkpoint's name, step-N (its step in *step).
static int step_of(const char *name, long *step) {
    int len = 0;
    return sscanf(name, "step-%ld%n", step, &len) == 1 && name[len] == 0;
}

void checkpoint_save(const char *root, const run_config *cfg, const bert_model *m, const optim_state *opt,
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
        " s:{s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f},"
        " s:{s:f, s:f, s:b, s:i, s:i, s:I, s:I, s:i},"
        " s:{s:s, s:I, s:I},"
        " s:{s:i, s:o},"
        " s:o, s:s}",
        "format", "bertpre-checkpoint", "version", FORMAT_VERSION, "kind", "training", "step", (json_int_t)s->applied,
        "iteration", (json_int_t)s->iteration, "skipped_steps", (json_int_t)s->skipped, "phase", t->phase,
        "schedule", "next_update", (json_int_t)(s->applied + 1), "total_updates", (json_int_t)t->steps,
        "learning_rate", t->learning_rate, "warmup_proportion", t->warmup_proportion,
        "optimizer", "name", optim_name(opt->kind), "step", (json_int_t)opt->step, "beta1", opt->beta1, "beta2",
        opt->beta2, "eps", opt->eps, "weight_decay", opt->weight_decay, "max_grad_norm", opt->max_grad_norm,
        "momentum", opt->momentum, "trust_coefficient", opt->trust_coefficient,
        "loss_scaler", "scale", ls->scale, "min_scale", ls->min_scale, "dynamic", ls->dynamic, "growth_interval",
        ls->growth_interval, "max_skips", ls->max_skips, "clean_steps", (json_int_t)ls->clean_steps, "skipped",
        (json_int_t)ls->skipped, "consecutive", ls->consecutive,
        "rng", "generator", "philox4x32-10, counter-based: (seed, micro-batch number, site, element)", "seed",
        (json_int_t)t->seed, "next_iteration", (json_int_t)s->iteration,
        "data", "world_size", s->world_size, "cursors", cursors,
        "config", config, "config_hash", hash);
    if (!state) fatal("checkpoint: building state.json failed");
    json_object_set_new(state, "elapsed_s", json_real(s->elapsed_s));
    snprintf(out, size, "%s/step-%09ld", root, s->applied);
    write_dir(out, m, opt, state);
    json_decref(state);

    // Keep the newest `keep` complete checkpoints; drop what interrupted writes left.
    checkpoint_remove_stale(root);
    DIR *d = opendir(root);
    check_file(d, root, "listing the checkpoint directory");
    long steps[4096], step;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (step_of(e->d_name, &step) && n < 4096) steps[n++] = step;
    closedir(d);
    char path[2300];
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
    write_dir(dir, m, NULL, state);
    json_decref(state);
}


static int compare_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int checkpoint_list(const char *root, char *out, size_t size) {
    if (size) out[0] = 0;
    DIR *d = opendir(root);
    if (!d) return 0;
    char *names[4096];
    int n = 0;
    long step;
    for (struct dirent *e; (e = readdir(d));)
        if (step_of(e->d_name, &step) && n < 4096) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof(char *), compare_names);
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        if (used < size) used += (size_t)snprintf(out + used, size - used, "%s%s", i ? ", " : "", names[i]);
        free(names[i]);
    }
    return n;
}

int checkpoint_remove_stale(const char *root) {
    DIR *d = opendir(root);
    if (!d) return 0;
    int n = 0;
    char path[2300];
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0) continue;
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        remove_dir(path);
        n++;
    }
    closedir(d);
    return n;
}

void checkpoint_remove_all(const char *root) {
    DIR *d = opendir(root);
    if (!d) return;
    char path[2300];
    for (struct dirent *e; (e = readdir(d));) {
        long step;
        if (!step_of(e->d_name, &step)) continue;
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        remove_dir(path);
    }
    closedir(d);
}

double checkpoint_bytes(size_t n_params) { return 3.0 * 4.0 * (double)n_params + 65536.0; }

int checkpoint_latest(const char *root, char *out, size_t size) {
    DIR *d = opendir(root);
    if (!d) return 0;
    long best = -1;
    char path[2300];
    for (struct dirent *e; (e = readdir(d));) {
        long step;
        if (!step_of(e->d_name, &step) || step <= best) continue;
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
static int is_string(const json_t *v) { return json_is_string(v); }
static long get_long(const checkpoint *c, json_t *obj, const char *key) {
    return (long)json_integer_value(get(c, obj, key, is_integer));
}
static double get_real(const checkpoint *c, json_t *obj, const char *key) {
    return json_number_value(get(c, obj, key, is_number));
}

// COMPLETE lists the SHA-256 of every file written before it: each must be present and
// match, so a truncated, bit-flipped or edited file is named before anything reads it.
static void verify_manifest(const char *dir) {
    char path[1300], file[1400], hex[65];
    snprintf(path, sizeof path, "%s/COMPLETE", dir);
    json_error_t err;
    json_t *manifest = json_load_file(path, 0, &err);
    json_t *format = json_object_get(manifest, "format"), *sums = json_object_get(manifest, "sha256");
    if (!manifest || !json_is_string(format) || strcmp(json_string_value(format), "bertpre-checkpoint-manifest") ||
        !json_is_object(sums))
        fatal("%s: not a checkpoint manifest (JSON with 'format' \"bertpre-checkpoint-manifest\" and 'sha256' "
              "per file)%s%s: the file was damaged or the checkpoint was not written by this bertpre", path,
              manifest ? "" : ": ", manifest ? "" : err.text);
    static const char *const required[] = {"model.safetensors", "state.json"};
    for (int i = 0; i < 2; i++)
        if (!json_is_string(json_object_get(sums, required[i])))
            fatal("%s: field 'sha256' has no checksum of %s", path, required[i]);
    const char *name;
    json_t *value;
    json_object_foreach(sums, name, value) {
        snprintf(file, sizeof file, "%s/%s", dir, name);
        if (!json_is_string(value) || strchr(name, '/'))
            fatal("%s: field 'sha256.%s' is not a checksum of a file of the checkpoint", path, name);
        if (sha256_file(file, hex) != 0) fatal("checkpoint %s: cannot read %s: %s", dir, file, strerror(errno));
        if (strcmp(hex, json_string_value(value)) != 0)
            fatal("checkpoint %s: %s has SHA-256 %s, the manifest %s records %s: one of them was damaged or "
                  "edited after it was written; use another checkpoint", dir, file, hex, path,
                  json_string_value(value));
    }
    json_decref(manifest);
}

// A directory without COMPLETE, said for what it holds: nothing, step-N checkpoint
// directories (a checkpoint root, none complete: a root with a complete one is taken by
// cli_checkpoint_dir before this), no checkpoint file, or the files of an interrupted write.
static void not_a_checkpoint(const char *dir) {
    char names[600];
    int steps = checkpoint_list(dir, names, sizeof names);
    if (steps)
        fatal("checkpoint %s: a checkpoint root holding %d step director%s (%s%s) but no complete checkpoint: "
              "%s write%s interrupted", dir, steps, steps == 1 ? "y" : "ies", names,
              strlen(names) >= sizeof names - 1 ? "..." : "", steps == 1 ? "its" : "their",
              steps == 1 ? " was" : "s were");
    int entries = 0, files = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        entries++;
        files += !strcmp(e->d_name, "state.json") || !strcmp(e->d_name, "model.safetensors");
    }
    if (d) closedir(d);
    if (!entries) fatal("checkpoint %s: the directory is empty: no checkpoint at all", dir);
    if (!files)
        fatal("checkpoint %s: no checkpoint at all (no COMPLETE, state.json or model.safetensors, and no step-N "
              "directory)", dir);
    fatal("checkpoint %s is incomplete (no COMPLETE file: its write was interrupted); use an older one", dir);
}

void checkpoint_open(checkpoint *c, const char *dir) {
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    char path[1300];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) fatal("checkpoint %s: not a directory", dir);
    snprintf(path, sizeof path, "%s/COMPLETE", dir);
    if (access(path, R_OK) != 0) not_a_checkpoint(dir);
    verify_manifest(dir);
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
    json_t *model = get(c, config, "model", is_object);
    bert_config_from_json(&c->model, model, where);
    // The heads: bertpre writes "architectures" from them (bert_config_to_json).
    const char *arch = json_string_value(json_array_get(json_object_get(model, "architectures"), 0));
    c->model.mlm_only = arch && !strcmp(arch, "BertForMaskedLM");
    json_t *kind = json_object_get(c->state, "kind");
    c->training = json_is_string(kind) && !strcmp(json_string_value(kind), "training");
}

void checkpoint_close(checkpoint *c) {
    json_decref(c->state);
    memset(c, 0, sizeof *c);
}

// Names the first field where the two JSON objects differ, or returns NULL. With `only`,
// those fields in the list's order (so that the optimizer is named before its eps).
static const char *first_difference(json_t *a, json_t *b, const char *const *only) {
    const char *key;
    json_t *value;
    if (only) {
        for (int i = 0; only[i]; i++) {
            json_t *mine = json_object_get(a, only[i]), *other = json_object_get(b, only[i]);
            if (mine && (!other || !json_equal(mine, other))) return only[i];
        }
        return NULL;
    }
    json_object_foreach(a, key, value) {
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
    char *a = json_object_get(stored, field) ? json_dumps_exact(json_object_get(stored, field), 0) : NULL;
    char *b = json_object_get(current, field) ? json_dumps_exact(json_object_get(current, field), 0) : NULL;
    fatal("checkpoint %s does not fit the config %s: %s.%s is %s in the checkpoint and %s in the config%s", c->dir,
          config_path, section, field, a ? a : "(absent)", b ? b : "(absent)", hint);
}

// The pooler's and the NSP classifier's tensors: what BertForPreTraining has and
// BertForMaskedLM has not.
static int nsp_head_tensor(const char *name) {
    return !strncmp(name, "bert.pooler.", 12) || !strncmp(name, "cls.seq_relationship.", 21);
}

// The tensors of m's table (under `prefix`) from `file` of the checkpoint into host[m->n_params]
// (the NSP head's left as they are with skip_nsp_head), each checked: present, F32 of the
// table's shape, finite.
static void read_host_tensors_into(const checkpoint *c, const char *file, const bert_model *m, const char *prefix,
                                   float *host, int skip_nsp_head) {
    char path[1300], name[160];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    st_file f;
    st_open(&f, path);
    for (int i = 0; i < m->n_tensors; i++) {
        const param_info *p = &m->table[i];
        if (skip_nsp_head && nsp_head_tensor(p->name)) continue;
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        const st_tensor *t = st_find(&f, name);
        if (!t) fatal("%s: missing tensor '%s'", path, name);
        if (strcmp(t->dtype, "F32") != 0 || t->ndim != p->ndim || t->shape[0] != p->shape[0] ||
            (p->ndim == 2 && t->shape[1] != p->shape[1]))
            fatal("%s: tensor '%s' is %s of %d dimensions [%lld, %lld], expected F32 [%d, %d]", path, name,
                  t->dtype, t->ndim, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                  p->shape[0], p->ndim == 2 ? p->shape[1] : 0);
        st_read_float(&f, t, host + p->offset);
        for (size_t k = 0; k < p->numel; k++)
            if (!isfinite(host[p->offset + k]))
                fatal("%s: tensor '%s' element %zu is %g: a checkpoint holds finite values only", path, name, k,
                      (double)host[p->offset + k]);
    }
    st_close(&f);
}

// read_host_tensors_into a new host array (the caller frees it).
static float *read_host_tensors(const checkpoint *c, const char *file, const bert_model *m, const char *prefix) {
    float *host = xcalloc(m->n_params, sizeof(float));
    read_host_tensors_into(c, file, m, prefix, host, 0);
    return host;
}

static void read_tensors(const checkpoint *c, const char *file, const bert_model *m, const char *prefix,
                         float *buffer) {
    float *host = read_host_tensors(c, file, m, prefix);
    m->be->upload(buffer, host, m->n_params * sizeof(float));
    free(host);
}

void checkpoint_check_model(const checkpoint *c, const bert_config *model, const char *config_path) {
    json_t *stored = bert_config_to_json(&c->model), *current = bert_config_to_json(model);
    // The heads may differ (checkpoint_load_weights): the encoder and the MLM head must not.
    json_object_del(stored, "architectures");
    json_object_del(current, "architectures");
    fit_or_die(c, stored, current, "model", NULL, config_path,
               " (the weights of one model shape do not load into another)");
    json_decref(stored);
    json_decref(current);
}

void checkpoint_check_weights(const checkpoint *c, int with_optimizer) {
    bert_model table;
    bert_init_table(&table, &c->model);
    free(read_host_tensors(c, "model.safetensors", &table, ""));
    if (with_optimizer) {  // the optimizer's buffers, under the names a resume reads
        optim_state named = {0};
        int kind = optim_kind_of(json_string_value(get(c, get(c, c->state, "optimizer", is_object), "name",
                                                       is_string)));
        if (kind < 0) fatal("checkpoint %s: state.json names an unknown optimizer", c->dir);
        named.kind = (optim_kind)kind;
        const char *prefixes[2];
        float *buffers[2];
        int n = optim_buffer_names(&named, prefixes, buffers);
        for (int i = 0; i < n; i++) free(read_host_tensors(c, "optimizer.safetensors", &table, prefixes[i]));
    }
    bert_free(&table);
}

const char *checkpoint_heads_note(const checkpoint *c, const bert_config *model) {
    if (c->model.mlm_only == model->mlm_only) return NULL;
    return model->mlm_only ? "its pooler and NSP head are left out (train.objective mlm)"
                           : "it has no NSP head (BertForMaskedLM): the pooler and NSP head start from fresh weights";
}

void checkpoint_load_weights(const checkpoint *c, bert_model *m) {
    checkpoint_check_model(c, &m->cfg, "in use");
    if (c->model.mlm_only && !m->cfg.mlm_only) {
        // The pooler and NSP head keep the weights m holds (bert_init_weights'); the rest is read.
        float *host = xcalloc(m->n_params, sizeof(float));
        m->be->download(host, m->params, m->n_params * sizeof(float));
        read_host_tensors_into(c, "model.safetensors", m, "", host, 1);
        m->be->upload(m->params, host, m->n_params * sizeof(float));
        free(host);
    } else {
        read_tensors(c, "model.safetensors", m, "", m->params);
    }
    bert_sync_compute(m);
}

void checkpoint_check_tile(const checkpoint *c, const bert_config *model, const char *config_path) {
    char why[400];
    if (model_tile_misfit(&c->model, model, why, sizeof why))
        fatal("checkpoint %s does not tile into the model of %s (--init-tile): %s", c->dir, config_path, why);
}

void checkpoint_load_tiled(const checkpoint *c, bert_model *m) {
    checkpoint_check_tile(c, &m->cfg, "in use");
    bert_model small;
    bert_init_table(&small, &c->model);
    float *from = read_host_tensors(c, "model.safetensors", &small, "");
    float *host = xcalloc(m->n_params, sizeof(float));
    m->be->download(host, m->params, m->n_params * sizeof(float));
    model_tile_weights(&small, from, m, host);
    m->be->upload(m->params, host, m->n_params * sizeof(float));
    free(host);
    free(from);
    bert_free(&small);
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
                                           "optimizer", "lr_schedule", "label_smoothing", "weight_decay",
                                           "max_grad_norm", "beta1", "beta2", "eps", "momentum",
                                           "trust_coefficient", "objective", "mask_prob", "whole_word_mask", NULL};
    // Fields added after the format: a checkpoint written before one ran with its default.
    static const char *const added_later[] = {"objective", "mask_prob", "whole_word_mask"};
    json_t *stored = json_deep_copy(get(c, config, "train", is_object)), *defaults = train_config_defaults_json();
    for (size_t i = 0; i < sizeof added_later / sizeof added_later[0]; i++)
        if (!json_object_get(stored, added_later[i]))
            json_object_set(stored, added_later[i], json_object_get(defaults, added_later[i]));
    json_decref(defaults);
    json_t *train = train_config_to_json(&cfg->train);
    fit_or_die(c, stored, train, "train", same_run, config_path,
               " (--resume continues the same run; --init-from starts a new run from the weights)");
    json_decref(train);
    json_decref(stored);
    // train.unpad may change: the model computes the same function, in another order of
    // sums. A checkpoint from before the field ran padded.
    json_t *was = json_object_get(get(c, config, "train", is_object), "unpad");
    const char *before = json_is_string(was) ? json_string_value(was) : "off";
    if (strcmp(before, cfg->train.unpad) != 0)
        fprintf(stderr,
                "bertpre: warning: checkpoint %s was trained with train.unpad = \"%s\" and %s sets \"%s\": the "
                "run continues the same model function, but its sums run in another order, so it is no longer "
                "bitwise the same as an uninterrupted run\n",
                c->dir, before, config_path, cfg->train.unpad);
    json_t *data = get(c, c->state, "data", is_object);
    int world = (int)get_long(c, data, "world_size");
    if (world != cfg->train.world_size && !synthetic_cursors(c))
        fatal("checkpoint %s was written by %d rank(s) and this run has %d: every rank's data cursor must be "
              "resumed by the same rank; relaunch with %d", c->dir, world, cfg->train.world_size, world);
}

void checkpoint_read_state(const checkpoint *c, const run_config *cfg, train_state *s) {
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
    json_t *elapsed = json_object_get(c->state, "elapsed_s");  // absent before it was stored
    s->elapsed_s = json_is_number(elapsed) ? json_number_value(elapsed) : 0.0;
    json_t *ls = get(c, c->state, "loss_scaler", is_object);
    s->scaler = (loss_scaler){.scale = get_real(c, ls, "scale"),
                              .min_scale = get_real(c, ls, "min_scale"),
                              .dynamic = json_is_true(get(c, ls, "dynamic", NULL)),
                              .growth_interval = (int)get_long(c, ls, "growth_interval"),
                              .max_skips = (int)get_long(c, ls, "max_skips"),
                              .clean_steps = get_long(c, ls, "clean_steps"),
                              .skipped = get_long(c, ls, "skipped"),
                              .consecutive = (int)get_long(c, ls, "consecutive")};
    if (s->applied < 0 || s->applied > cfg->train.steps || s->iteration < s->applied)
        fatal("%s/state.json: step %ld / iteration %ld do not fit a run of %d steps", c->dir, s->applied,
              s->iteration, cfg->train.steps);
}

void checkpoint_resume(const checkpoint *c, const run_config *cfg, const char *config_path, bert_model *m,
                       optim_state *opt, train_state *s) {
    checkpoint_check_resume(c, cfg, config_path);
    checkpoint_read_state(c, cfg, s);
    json_t *o = get(c, c->state, "optimizer", is_object);
    const char *name = json_string_value(get(c, o, "name", is_string));
    if (strcmp(name, optim_name(opt->kind)) != 0)
        fatal("checkpoint %s holds the state of optimizer '%s' and the config %s trains with '%s': resume with "
              "train.optimizer = \"%s\", or start a new run from the weights with --init-from", c->dir, name,
              config_path, optim_name(opt->kind), name);
    opt->step = get_long(c, o, "step");
    opt->beta1 = get_real(c, o, "beta1");
    opt->beta2 = get_real(c, o, "beta2");
    opt->eps = get_real(c, o, "eps");
    opt->weight_decay = get_real(c, o, "weight_decay");
    opt->max_grad_norm = get_real(c, o, "max_grad_norm");
    opt->momentum = get_real(c, o, "momentum");
    opt->trust_coefficient = get_real(c, o, "trust_coefficient");
    checkpoint_load_weights(c, m);
    const char *prefixes[2];
    float *buffers[2];
    int n = optim_buffer_names(opt, prefixes, buffers);
    for (int i = 0; i < n; i++) read_tensors(c, "optimizer.safetensors", m, prefixes[i], buffers[i]);
}
