// The sharded loader (see loader.h): block order per epoch, this rank's slice of it, one
// block in memory, optional re-masking, and a prefetch thread behind a ring of batches.
#include "data/loader.h"
#include <dirent.h>
#include <glob.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "kernels/common/check.h"
#include "data/shard.h"
#include "data/synthetic.h"

// Shards open at once: enough for the blocks in flight, few enough for thousands of shards
// (file descriptors, HDF5 chunk caches).
enum { LOADER_OPEN_FILES = 8 };

// Keys of the Philox draws, so that block order, row order and masks never share a stream.
enum { SITE_BLOCK_ORDER = 0xFFFFFFF0u, SITE_ROW_ORDER_BASE = 0 };
static const uint64_t MASKING_SEED_SALT = 0x6d61736b696e6721ull;

typedef struct {
    int shard;
    long first;  // first row in the shard
    int count;
} block_t;

typedef struct {
    batch_t batch;
    loader_cursor after;  // the cursor once this batch is consumed
} slot_t;

struct loader {
    loader_options opt;
    int n_shards;
    shard_file *shards;
    long *shard_offset;  // global index of each shard's first sample
    long *last_used;     // per shard: when it was last read, for closing the least recent
    long reads;
    long samples;
    int S, P;
    int P_stored;  // the shards' masked_lm_positions columns: P or fewer (copy_row widens)
    block_t *blocks;
    long n_blocks;
    // This rank's slice of every epoch's order.
    long lo, hi;
    // Order of the epoch the producer is in.
    int64_t order_epoch;
    long *order;        // permuted block indices
    long *order_start;  // global index of the first sample of order[i]
    // The block in memory: its rows, in that epoch's row order.
    long cached_block;
    int64_t cached_epoch;
    batch_t block_rows;
    int *row_perm;
    int *scratch;
    // Producer position and consumer position.
    loader_cursor produce, consume;
    // Prefetch.
    pthread_t thread;
    int thread_running, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    slot_t *slots;
    long produced, consumed;  // slot sequence numbers
};

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int compare_strings(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void add_path(char ***paths, int *n, int *cap, const char *p) {
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        *paths = realloc(*paths, sizeof(char *) * (size_t)*cap);
        check_alloc(*paths, sizeof(char *) * (size_t)*cap);
    }
    (*paths)[(*n)++] = strdup(p);
}

// prep's held-out shards are named eval-*.
static int is_heldout(const char *path) {
    const char *slash = strrchr(path, '/');
    return !strncmp(slash ? slash + 1 : path, "eval-", 5);
}

// Expands the comma-separated spec into a sorted list of files; a directory's eval-* files
// (prep's held-out shards) are left out when skip_heldout is set, and are all it gives when
// heldout_only is set and it has any. The same file named twice (by two entries, a link, or
// another spelling of its path) is an error.
static char **expand_spec(const char *spec, int *n_out, int skip_heldout, int heldout_only) {
    char **paths = NULL;
    int n = 0, cap = 0;
    char *copy = strdup(spec), *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        int before = n;
        struct stat st;
        if (stat(item, &st) == 0 && S_ISDIR(st.st_mode)) {
            DIR *dir = opendir(item);
            check_file(dir, item, "opendir");
            for (struct dirent *e; (e = readdir(dir));) {
                if (!has_suffix(e->d_name, ".hdf5") && !has_suffix(e->d_name, ".h5")) continue;
                if (e->d_name[0] == '.') continue;  // hidden: temporary files among them
                if (skip_heldout && is_heldout(e->d_name)) continue;
                char full[4096];
                snprintf(full, sizeof full, "%s/%s", item, e->d_name);
                add_path(&paths, &n, &cap, full);
            }
            closedir(dir);
            // Evaluation: a directory that holds held-out shards means those.
            int heldout = 0;
            for (int i = before; i < n; i++) heldout += is_heldout(paths[i]);
            if (heldout_only && heldout) {
                int kept = before;
                for (int i = before; i < n; i++)
                    if (is_heldout(paths[i])) paths[kept++] = paths[i];
                    else free(paths[i]);
                n = kept;
            }
            if (n == before)
                fatal("%s: the directory holds no shard (*.hdf5 or *.h5%s)", item,
                      skip_heldout ? "; held-out eval-* shards are not trained on" : "");
        } else if (stat(item, &st) == 0) {
            add_path(&paths, &n, &cap, item);
        } else {
            glob_t g;
            if (glob(item, 0, NULL, &g) != 0 || g.gl_pathc == 0)
                fatal("%s: no such shard file, directory, or files matching the pattern", item);
            for (size_t i = 0; i < g.gl_pathc; i++) add_path(&paths, &n, &cap, g.gl_pathv[i]);
            globfree(&g);
        }
        qsort(paths + before, (size_t)(n - before), sizeof(char *), compare_strings);
    }
    free(copy);
    if (n == 0) fatal("data '%s': names no shard file", spec);
    for (int i = 0; i < n; i++) {
        struct stat a, b;
        if (stat(paths[i], &a) != 0) continue;  // reported when opened
        for (int j = 0; j < i; j++)
            if (stat(paths[j], &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
                fatal("data '%s': the shard %s is listed twice (also as %s); each shard must appear once", spec,
                      paths[i], paths[j]);
    }
    *n_out = n;
    return paths;
}

static void build_order(loader *l, int64_t epoch) {
    for (long i = 0; i < l->n_blocks; i++) l->order[i] = i;
    if (l->opt.shuffle) {
        rng_stream r = rng_stream_at(l->opt.seed, (uint32_t)epoch, SITE_BLOCK_ORDER, 0);
        for (long i = l->n_blocks - 1; i > 0; i--) {
            long j = rng_range(&r, 0, (int)i);
            long t = l->order[i];
            l->order[i] = l->order[j];
            l->order[j] = t;
        }
    }
    long start = 0;
    for (long i = 0; i < l->n_blocks; i++) {
        l->order_start[i] = start;
        start += l->blocks[l->order[i]].count;
    }
    l->order_epoch = epoch;
}

// Reads a block, keeping at most LOADER_OPEN_FILES shards open.
static void read_block(loader *l, long b) {
    const block_t *blk = &l->blocks[b];
    shard_file *f = &l->shards[blk->shard];
    if (!shard_is_open(f)) {
        int open = 0, oldest = -1;
        for (int s = 0; s < l->n_shards; s++)
            if (shard_is_open(&l->shards[s])) {
                open++;
                if (oldest < 0 || l->last_used[s] < l->last_used[oldest]) oldest = s;
            }
        if (open >= LOADER_OPEN_FILES) shard_release(&l->shards[oldest]);
        shard_reopen(f);
    }
    l->last_used[blk->shard] = ++l->reads;
    shard_read_rows(f, blk->first, blk->count, &l->block_rows, l->opt.vocab_size);
}

// Makes block `b` (in epoch `epoch`'s row order) the one in memory.
static void load_block(loader *l, long b, int64_t epoch) {
    if (l->cached_block == b && l->cached_epoch == epoch) return;
    const block_t *blk = &l->blocks[b];
    if (l->cached_block != b) read_block(l, b);
    for (int i = 0; i < blk->count; i++) l->row_perm[i] = i;
    if (l->opt.shuffle) {
        rng_stream r = rng_stream_at(l->opt.seed, (uint32_t)epoch, SITE_ROW_ORDER_BASE + (uint32_t)b, 0);
        for (int i = blk->count - 1; i > 0; i--) {
            int j = rng_range(&r, 0, i);
            int t = l->row_perm[i];
            l->row_perm[i] = l->row_perm[j];
            l->row_perm[j] = t;
        }
    }
    l->cached_block = b;
    l->cached_epoch = epoch;
}

// Row j of src into row i of dst; a src of fewer masked columns (src->P <= dst->P) is zero-filled.
static void copy_row(batch_t *dst, int i, const batch_t *src, int j) {
    int T = dst->T, P = dst->P, Ps = src->P;
    memcpy(dst->input_ids + (size_t)i * T, src->input_ids + (size_t)j * T, sizeof(int) * T);
    memcpy(dst->input_mask + (size_t)i * T, src->input_mask + (size_t)j * T, sizeof(int) * T);
    memcpy(dst->segment_ids + (size_t)i * T, src->segment_ids + (size_t)j * T, sizeof(int) * T);
    int *pos = dst->masked_lm_positions + (size_t)i * P, *ids = dst->masked_lm_ids + (size_t)i * P;
    memcpy(pos, src->masked_lm_positions + (size_t)j * Ps, sizeof(int) * Ps);
    memcpy(ids, src->masked_lm_ids + (size_t)j * Ps, sizeof(int) * Ps);
    memset(pos + Ps, 0, sizeof(int) * (P - Ps));
    memset(ids + Ps, 0, sizeof(int) * (P - Ps));
    dst->next_sentence_labels[i] = src->next_sentence_labels[j];
    memcpy(dst->document_starts + (size_t)i * T, src->document_starts + (size_t)j * T, sizeof(int) * T);
}

static void remask(loader *l, batch_t *out, int i, int64_t epoch, long sample) {
    int T = out->T, P = out->P;
    int *ids = out->input_ids + (size_t)i * T;
    int *pos = out->masked_lm_positions + (size_t)i * P, *lab = out->masked_lm_ids + (size_t)i * P;
    masking_restore(ids, pos, lab, P);
    int len = 0;
    while (len < T && out->input_mask[(size_t)i * T + len]) len++;
    rng_stream r =
        rng_stream_at(l->opt.seed ^ MASKING_SEED_SALT, (uint32_t)epoch, (uint32_t)sample, (uint64_t)(sample >> 32) << 40);
    masking_apply(&l->opt.masking, &r, ids, len, pos, lab, l->scratch);
}

// Fills `out` from cursor *c and advances it: the whole sampling logic, run by the producer.
static void produce_batch(loader *l, loader_cursor *c, batch_t *out) {
    long share = l->hi - l->lo;
    for (int i = 0; i < out->B; i++) {
        if (c->position == share) c->epoch++, c->position = 0;
        if (l->order_epoch != c->epoch) build_order(l, c->epoch);
        long q = l->lo + c->position;
        long a = 0, z = l->n_blocks - 1;  // last order index whose start <= q
        while (a < z) {
            long m = (a + z + 1) / 2;
            if (l->order_start[m] <= q) a = m;
            else z = m - 1;
        }
        long b = l->order[a];
        load_block(l, b, c->epoch);
        int row = l->row_perm[q - l->order_start[a]];
        copy_row(out, i, &l->block_rows, row);
        if (l->opt.dynamic_masking) {
            long sample = l->shard_offset[l->blocks[b].shard] + l->blocks[b].first + row;
            remask(l, out, i, c->epoch, sample);
        }
        c->position++;
    }
}

static void *prefetch_main(void *arg) {
    loader *l = arg;
    int Q = l->opt.prefetch;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->produced - l->consumed == Q) pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) break;
        slot_t *s = &l->slots[l->produced % Q];
        pthread_mutex_unlock(&l->mu);
        produce_batch(l, &l->produce, &s->batch);
        s->after = l->produce;
        pthread_mutex_lock(&l->mu);
        l->produced++;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void prefetch_start(loader *l) {
    if (l->opt.prefetch <= 0) return;
    l->produce = l->consume;
    l->produced = l->consumed = 0;
    l->stop = 0;
    if (pthread_create(&l->thread, NULL, prefetch_main, l) != 0) fatal("loader: cannot start the prefetch thread");
    l->thread_running = 1;
}

static void prefetch_stop(loader *l) {
    if (!l->thread_running) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    l->thread_running = 0;
}

loader *loader_open(const char *spec, const loader_options *options) {
    loader *l = xcalloc(1, sizeof *l);
    l->opt = *options;
    if (l->opt.world_size < 1 || l->opt.rank < 0 || l->opt.rank >= l->opt.world_size)
        fatal("loader: rank %d is not in [0, world_size = %d)", l->opt.rank, l->opt.world_size);
    if (l->opt.batch_size < 1) fatal("loader: batch size %d must be positive", l->opt.batch_size);
    char **paths = expand_spec(spec, &l->n_shards, l->opt.skip_heldout, l->opt.heldout_only);
    l->shards = xcalloc((size_t)l->n_shards, sizeof(shard_file));
    l->shard_offset = xcalloc((size_t)l->n_shards, sizeof(long));
    l->last_used = xcalloc((size_t)l->n_shards, sizeof(long));
    for (int s = 0; s < l->n_shards; s++) {
        shard_file *f = &l->shards[s];
        shard_open(f, paths[s]);
        free(paths[s]);
        if (s == 0) {
            l->S = l->opt.seq_length ? l->opt.seq_length : f->S;
            l->P = l->opt.max_predictions ? l->opt.max_predictions : f->P;
            l->P_stored = f->P;
        }
        if (f->S != l->S)
            fatal("%s: dataset 'input_ids' has sequence length %d, expected %d (train.seq_length or the first "
                  "shard)", f->path, f->S, l->S);
        if (f->P > l->P)
            fatal("%s: dataset 'masked_lm_positions' has %d columns, more than max_predictions_per_seq = %d", f->path,
                  f->P, l->P);
        if (f->P != l->P_stored)
            fatal("%s: dataset 'masked_lm_positions' has %d columns and the first shard's has %d: the shards of one "
                  "data set store the same max_predictions", f->path, f->P, l->P_stored);
        shard_release(f);
        l->shard_offset[s] = l->samples;
        l->samples += f->N;
        l->n_blocks += (f->N + LOADER_BLOCK - 1) / LOADER_BLOCK;
    }
    free(paths);
    if (l->samples < l->opt.world_size)
        fatal("data '%s': %ld samples cannot be shared by %d ranks", spec, l->samples, l->opt.world_size);
    l->blocks = xcalloc((size_t)l->n_blocks, sizeof(block_t));
    long k = 0;
    for (int s = 0; s < l->n_shards; s++)
        for (long first = 0; first < l->shards[s].N; first += LOADER_BLOCK) {
            long left = l->shards[s].N - first;
            l->blocks[k++] = (block_t){s, first, (int)(left < LOADER_BLOCK ? left : LOADER_BLOCK)};
        }
    batch_alloc(&l->block_rows, LOADER_BLOCK, l->S, l->P_stored);
    if (l->opt.check_on_open)
        for (long b = 0; b < l->n_blocks; b++) read_block(l, b);
    l->order = xcalloc((size_t)l->n_blocks, sizeof(long));
    l->order_start = xcalloc((size_t)l->n_blocks, sizeof(long));
    l->order_epoch = -1;
    l->cached_block = -1;
    l->row_perm = xcalloc(LOADER_BLOCK, sizeof(int));
    l->scratch = xcalloc(MASKING_SCRATCH(l->S), sizeof(int));
    l->opt.masking.max_predictions = l->P;
    long W = l->opt.world_size, r = l->opt.rank;
    l->lo = (long)((__int128)l->samples * r / W);
    l->hi = (long)((__int128)l->samples * (r + 1) / W);
    l->consume = (loader_cursor){0, 0, l->opt.seed, l->opt.rank, l->opt.world_size, l->samples};
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (l->opt.prefetch > 0) {
        l->slots = xcalloc((size_t)l->opt.prefetch, sizeof(slot_t));
        for (int i = 0; i < l->opt.prefetch; i++) batch_alloc(&l->slots[i].batch, l->opt.batch_size, l->S, l->P);
    }
    prefetch_start(l);
    return l;
}

void loader_next_batch(loader *l, batch_t *out) {
    CHECK(out->B == l->opt.batch_size && out->T == l->S && out->P == l->P,
          "loader: batch of shape B=%d S=%d P=%d requested from a loader of B=%d S=%d P=%d", out->B, out->T, out->P,
          l->opt.batch_size, l->S, l->P);
    if (!l->thread_running) {
        produce_batch(l, &l->consume, out);
        return;
    }
    int Q = l->opt.prefetch;
    pthread_mutex_lock(&l->mu);
    while (l->produced == l->consumed) pthread_cond_wait(&l->cv, &l->mu);
    slot_t *s = &l->slots[l->consumed % Q];
    pthread_mutex_unlock(&l->mu);
    batch_t src = s->batch;
    for (int i = 0; i < out->B; i++) copy_row(out, i, &src, i);
    l->consume = s->after;
    pthread_mutex_lock(&l->mu);
    l->consumed++;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

loader_cursor loader_cursor_get(const loader *l) { return l->consume; }

void loader_cursor_set(loader *l, loader_cursor c) {
    if (c.seed != l->opt.seed || c.rank != l->opt.rank || c.world_size != l->opt.world_size ||
        c.samples != l->samples)
        fatal("loader: the stored cursor (seed %llu, rank %d of %d, %lld samples) does not match this run "
              "(seed %llu, rank %d of %d, %ld samples)",
              (unsigned long long)c.seed, c.rank, c.world_size, (long long)c.samples,
              (unsigned long long)l->opt.seed, l->opt.rank, l->opt.world_size, l->samples);
    if (c.epoch < 0 || c.position < 0 || c.position > l->hi - l->lo)
        fatal("loader: the stored cursor (epoch %lld, position %lld) is outside this rank's %ld samples per epoch",
              (long long)c.epoch, (long long)c.position, l->hi - l->lo);
    prefetch_stop(l);
    l->consume = c;
    prefetch_start(l);
}

void loader_close(loader *l) {
    prefetch_stop(l);
    if (l->slots)
        for (int i = 0; i < l->opt.prefetch; i++) batch_free(&l->slots[i].batch);
    free(l->slots);
    for (int s = 0; s < l->n_shards; s++) shard_close(&l->shards[s]);
    free(l->shards);
    free(l->shard_offset);
    free(l->last_used);
    free(l->blocks);
    free(l->order);
    free(l->order_start);
    free(l->row_perm);
    free(l->scratch);
    batch_free(&l->block_rows);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}

long loader_samples(const loader *l) { return l->samples; }
long loader_rank_samples(const loader *l) { return l->hi - l->lo; }
int loader_seq_length(const loader *l) { return l->S; }
int loader_max_predictions(const loader *l) { return l->P; }
int loader_shard_count(const loader *l) { return l->n_shards; }
const char *loader_shard_path(const loader *l, int i) { return l->shards[i].path; }
const char *loader_shard_tokenizer(const loader *l, int i) { return l->shards[i].tokenizer_sha256; }

const char *loader_mlm_only_shard(const loader *l, const char **packing) {
    for (int i = 0; i < l->n_shards; i++)
        if (shard_mlm_only(&l->shards[i])) {
            if (packing) *packing = l->shards[i].packing;
            return l->shards[i].path;
        }
    return NULL;
}
