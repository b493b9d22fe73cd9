// The prep pipeline (see prep.h): a reader thread cutting the text into chunks, workers
// that tokenize and build instances, and one writer thread per output file.
#include "data/prep.h"
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "data/batch.h"
#include "data/instances.h"
#include "kernels/common/check.h"
#include "kernels/common/clock.h"
#include "kernels/common/philox.h"
#include "data/masking.h"
#include "data/shard.h"
#include "data/synthetic.h"
#include "kernels/common/files.h"
#include "tokenizer/tokenizer.h"

// Keys of the draws (the "site" of rng_stream), kept apart from each other. Per-document
// draws take (pass << 24) ^ document; the packed rows of a pass (pass << 24) ^ SITE_PACKED(eval).
enum { SITE_EVAL_SPLIT = 0xFFFFFFF1u, SITE_SHUFFLE_TRAIN = 0xFFFFFFF2u, SITE_SHUFFLE_EVAL = 0xFFFFFFF3u };
#define SITE_PACKED(eval) (0xFFFFF0u + (uint32_t)(eval))

const char *const prep_packing_names[4] = {"pairs", "full-sentences", "doc-sentences", "contiguous"};

const char *prep_separate_documents_refusal(prep_packing packing) {
    if (packing == PREP_DOC_SENTENCES)
        return "--separate-documents needs --packing full-sentences or contiguous: doc-sentences rows already hold "
               "one document each";
    if (packing == PREP_PAIRS)
        return "--separate-documents needs --packing full-sentences or contiguous: pairs (the default) are "
               "next-sentence pairs, [CLS] A [SEP] B [SEP], not packed documents";
    return NULL;
}

enum { SLOT_FREE, SLOT_FILLED, SLOT_DONE };

typedef struct {
    long seq;           // index among this rank's chunks
    long global_chunk;  // index among all chunks: the key of its draws
    int state;
    text_document *docs;
    token_doc *tdocs;
    char *is_eval;
    int n_docs, cap_docs;
    double bytes;
    long sentences, tokens, unknown;
    long single_sentence_docs, cut_tokens, cut_sentences, dropped_tokens;  // see prep_stats
    instances_t train, eval;
    int consumers_left;  // writer threads that have not yet taken their rows
} chunk_t;

typedef struct {
    const prep_options *o;
    int unk;  // the tokenizer's <unk> id: text made mostly of it is not usable
    tokenizer *tok;
    masking_params mp, mp_eval;  // the train rows' masking, and the held-out rows' (mp again, or BERT's)
    chunk_t *slots;
    int n_slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long next_to_process, total_chunks;  // total_chunks = -1 until the reader is done
    shard_writer **writers;  // the train shards, then the eval shard
    int n_writers;
    prep_stats stats;
    double done_bytes;  // text of this rank's chunks whose instances are written
    long chunks_done;
} prep_state;

// The sentences' ids go straight into the document's buffer, one after the other.
static void tokenize_document(prep_state *st, const text_document *doc, token_doc *out) {
    out->n_ids = 0;
    out->n_sent = 0;
    token_doc_reserve(out, 1, doc->n);
    out->start[0] = 0;
    for (int i = 0; i < doc->n; i++) {
        const char *s = doc->text + doc->start[i];
        size_t before = out->n_ids;
        tokenizer_status ts = tokenizer_encode_append(st->tok, s, strlen(s), &out->ids, &out->n_ids, &out->cap_ids);
        if (!ts.ok) fatal("prep: %s", ts.message);
        if (out->n_ids > before) out->start[++out->n_sent] = (long)out->n_ids;
    }
}

static void process_chunk(prep_state *st, chunk_t *c, instance_scratch *w) {
    const prep_options *o = st->o;
    instance_rules rules = {o->seq_length, o->max_predictions, o->short_seq_prob, o->packing, &st->mp,
                            o->separate_documents};
    instance_rules held_out = rules;
    held_out.mp = &st->mp_eval;
    c->train.rows.B = c->eval.rows.B = 0;
    c->train.real_tokens = c->eval.real_tokens = 0;
    c->train.masked = c->eval.masked = 0;
    c->train.unmasked_rows = c->eval.unmasked_rows = 0;
    c->sentences = c->tokens = c->unknown = 0;
    c->single_sentence_docs = c->cut_tokens = c->cut_sentences = c->dropped_tokens = 0;
    int max_tokens = o->seq_length - 3;
    int *train_pool = xmalloc(sizeof(int) * (size_t)(c->n_docs + 1));
    int *eval_pool = xmalloc(sizeof(int) * (size_t)(c->n_docs + 1));
    int n_train = 0, n_eval = 0;
    for (int i = 0; i < c->n_docs; i++) {
        tokenize_document(st, &c->docs[i], &c->tdocs[i]);
        c->sentences += c->tdocs[i].n_sent;
        c->tokens += (long)c->tdocs[i].n_ids;
        for (size_t k = 0; k < c->tdocs[i].n_ids; k++) c->unknown += c->tdocs[i].ids[k] == st->unk;
        c->single_sentence_docs += c->tdocs[i].n_sent == 1;
        for (int k = 0; k < c->tdocs[i].n_sent; k++)
            if (sentence_len(&c->tdocs[i], k) > max_tokens) {
                c->cut_tokens += sentence_len(&c->tdocs[i], k) - max_tokens;
                c->cut_sentences++;
            }
        if (c->tdocs[i].n_sent == 0) continue;
        if (c->is_eval[i]) eval_pool[n_eval++] = i;
        else train_pool[n_train++] = i;
    }
    for (int pass = 0; pass < o->dupe_factor && o->packing != PREP_PAIRS; pass++)
        for (int eval = 0; eval < 2; eval++) {
            rng_stream r = rng_stream_at(o->seed, (uint32_t)c->global_chunk, ((uint32_t)pass << 24) ^ SITE_PACKED(eval),
                                         0);
            instances_pack(eval ? &held_out : &rules, c->tdocs, c->is_eval, c->n_docs, eval, &r, w,
                           eval ? &c->eval : &c->train);
        }
    for (int pass = 0; pass < o->dupe_factor && o->packing == PREP_PAIRS; pass++)
        for (int i = 0; i < c->n_docs; i++) {
            if (c->tdocs[i].n_sent == 0) continue;
            rng_stream r = rng_stream_at(o->seed, (uint32_t)c->global_chunk, ((uint32_t)pass << 24) ^ (uint32_t)i, 0);
            int ev = c->is_eval[i];
            c->dropped_tokens += instances_pairs(ev ? &held_out : &rules, c->tdocs, i, ev ? eval_pool : train_pool,
                                                 ev ? n_eval : n_train, &r, w, ev ? &c->eval : &c->train);
        }
    rng_stream rt = rng_stream_at(o->seed, (uint32_t)c->global_chunk, SITE_SHUFFLE_TRAIN, 0);
    rng_stream re = rng_stream_at(o->seed, (uint32_t)c->global_chunk, SITE_SHUFFLE_EVAL, 0);
    instances_reserve(&c->train, o->seq_length, o->max_predictions, 1);
    instances_reserve(&c->eval, o->seq_length, o->max_predictions, 1);
    instances_shuffle(&c->train, &rt);
    instances_shuffle(&c->eval, &re);
    free(train_pool);
    free(eval_pool);
}

static void *worker_main(void *arg) {
    prep_state *st = arg;
    instance_scratch w = {0};
    w.mask_scratch = xmalloc(sizeof(int) * MASKING_SCRATCH(st->o->seq_length));
    pthread_mutex_lock(&st->mu);
    for (;;) {
        long k = st->next_to_process;
        chunk_t *c = &st->slots[k % st->n_slots];
        while (!(c->state == SLOT_FILLED && c->seq == k) && !(st->total_chunks >= 0 && k >= st->total_chunks)) {
            pthread_cond_wait(&st->cv, &st->mu);
            k = st->next_to_process;
            c = &st->slots[k % st->n_slots];
        }
        if (st->total_chunks >= 0 && k >= st->total_chunks) break;
        st->next_to_process++;
        pthread_mutex_unlock(&st->mu);
        process_chunk(st, c, &w);
        pthread_mutex_lock(&st->mu);
        c->state = SLOT_DONE;
        c->consumers_left = st->n_writers;
        pthread_cond_broadcast(&st->cv);
    }
    pthread_mutex_unlock(&st->mu);
    free(w.a);
    free(w.b);
    free(w.mask_scratch);
    return NULL;
}

typedef struct {
    prep_state *st;
    int output;  // index into st->writers: a train shard, or the eval shard (the last)
} writer_arg;

// One thread per output file, so that shards are compressed in parallel. Train instance g
// (counted over the chunks in order) goes to shard g % shards.
static void *writer_main(void *arg) {
    writer_arg *wa = arg;
    prep_state *st = wa->st;
    const prep_options *o = st->o;
    shard_writer *w = st->writers[wa->output];
    int is_eval = wa->output == o->shards;
    long base = 0;
    for (long k = 0;; k++) {
        pthread_mutex_lock(&st->mu);
        chunk_t *c = &st->slots[k % st->n_slots];
        while (!(c->state == SLOT_DONE && c->seq == k) && !(st->total_chunks >= 0 && k >= st->total_chunks))
            pthread_cond_wait(&st->cv, &st->mu);
        int finished = st->total_chunks >= 0 && k >= st->total_chunks;
        pthread_mutex_unlock(&st->mu);
        if (finished) break;
        if (is_eval) {
            for (int i = 0; i < c->eval.rows.B; i++) shard_writer_append(w, &c->eval.rows, c->eval.perm[i]);
        } else {
            int first = (int)((wa->output - base % o->shards + o->shards) % o->shards);
            for (int i = first; i < c->train.rows.B; i += o->shards) shard_writer_append(w, &c->train.rows, c->train.perm[i]);
            base += c->train.rows.B;
        }
        pthread_mutex_lock(&st->mu);
        if (--c->consumers_left == 0) {
            st->stats.sentences += c->sentences;
            st->stats.tokens += c->tokens;
            st->stats.unknown_tokens += c->unknown;
            st->stats.single_sentence_documents += c->single_sentence_docs;
            st->stats.cut_tokens += c->cut_tokens;
            st->stats.cut_sentences += c->cut_sentences;
            st->stats.dropped_tokens += c->dropped_tokens;
            st->stats.train_instances += c->train.rows.B;
            st->stats.real_tokens += c->train.real_tokens + c->eval.real_tokens;
            st->stats.masked += c->train.masked + c->eval.masked;
            st->stats.unmasked_rows += c->train.unmasked_rows + c->eval.unmasked_rows;
            st->stats.eval_instances += c->eval.rows.B;
            st->done_bytes += c->bytes;
            st->chunks_done++;
            c->state = SLOT_FREE;
            pthread_cond_broadcast(&st->cv);
        }
        pthread_mutex_unlock(&st->mu);
    }
    return NULL;
}

static void chunk_add_document(chunk_t *c, const text_document *doc, int is_eval) {
    if (c->n_docs == c->cap_docs) {
        int cap = c->cap_docs ? 2 * c->cap_docs : 64;
        c->docs = realloc(c->docs, sizeof(text_document) * (size_t)cap);
        c->tdocs = realloc(c->tdocs, sizeof(token_doc) * (size_t)cap);
        c->is_eval = realloc(c->is_eval, (size_t)cap);
        if (!c->docs || !c->tdocs || !c->is_eval) fatal("prep: out of host memory for a chunk of %d documents", cap);
        memset(c->docs + c->cap_docs, 0, sizeof(text_document) * (size_t)(cap - c->cap_docs));
        memset(c->tdocs + c->cap_docs, 0, sizeof(token_doc) * (size_t)(cap - c->cap_docs));
        c->cap_docs = cap;
    }
    text_document *d = &c->docs[c->n_docs];
    text_document_clear(d);
    for (int i = 0; i < doc->n; i++) text_document_add(d, doc->text + doc->start[i], strlen(doc->text + doc->start[i]));
    c->is_eval[c->n_docs++] = (char)is_eval;
    c->bytes += (double)doc->len;
}

static void chunk_free(chunk_t *c) {
    for (int i = 0; i < c->cap_docs; i++) {
        text_document_free(&c->docs[i]);
        free(c->tdocs[i].ids);
        free(c->tdocs[i].start);
    }
    free(c->docs);
    free(c->tdocs);
    free(c->is_eval);
    instances_t *in[2] = {&c->train, &c->eval};
    for (int k = 0; k < 2; k++) {
        if (in[k]->cap) batch_free(&in[k]->rows);
        free(in[k]->perm);
    }
}

static chunk_t *slot_acquire(prep_state *st, long local, long global_chunk) {
    chunk_t *c = &st->slots[local % st->n_slots];
    pthread_mutex_lock(&st->mu);
    while (c->state != SLOT_FREE) pthread_cond_wait(&st->cv, &st->mu);
    pthread_mutex_unlock(&st->mu);
    c->n_docs = 0;
    c->bytes = 0;
    c->seq = local;
    c->global_chunk = global_chunk;
    return c;
}

static void slot_submit(prep_state *st, chunk_t *c) {
    pthread_mutex_lock(&st->mu);
    c->state = SLOT_FILLED;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

// Progress counts text whose instances are written: `done` bytes of this rank's chunks, out
// of an estimate of its total (what the reader has taken, scaled by how far through the
// input files on disk it is).
static void progress_print(prep_state *st, double read_mine, double input_fraction, double start, int final) {
    pthread_mutex_lock(&st->mu);
    double done = st->done_bytes;
    pthread_mutex_unlock(&st->mu);
    double elapsed = now_seconds() - start, total = input_fraction > 0 ? read_mine / input_fraction : 0.0;
    double f = final ? 1.0 : total > 0 ? done / total : 0.0;
    if (f > 1.0) f = 1.0;
    double rate = elapsed > 0 ? done / 1e6 / elapsed : 0.0, eta = f > 0 ? elapsed * (1.0 - f) / f : 0.0;
    int width = 30, filled = (int)(f * width + 0.5);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\rprep [%s] %3.0f%% %8.1f MB %6.2f MB/s ETA %3d:%02d ", bar, 100.0 * f, done / 1e6, rate,
            (int)eta / 60, (int)eta % 60);
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

// Temporary names of shards being written (".tmp-NAME.partial", which no loader takes): a
// killed prep leaves nothing under a final name, and the next run writes them anew (the same
// name every run, so that none piles up; files.h's protocol finishes them).
static const char *const PREP_TMP_PREFIX = ".tmp-";

// The temporary names of this run's shards. A prep that ends on an error, wherever in bertpre
// (a bad input line, a full disk while another shard is being closed), removes every one of
// them through fatal_cleanup: those still open, those closed and not yet renamed (a name
// already renamed is no longer there to remove).
static char (*unfinished_paths)[4200];
static int n_unfinished;
// A failed prep of one rank also removes its lock file and the directories it made for
// --output (each only where empty: rmdir), so that it leaves nothing it wrote.
static char lock_path[4200], made_dirs[8][1100];
static int n_made_dirs;
static void remove_unfinished(void) {
    for (int k = 0; k < n_unfinished; k++) unlink(unfinished_paths[k]);
    if (lock_path[0]) unlink(lock_path);
    for (int k = n_made_dirs - 1; k >= 0; k--) rmdir(made_dirs[k]);
}
// Ctrl-C, SIGTERM and SIGHUP (a scheduler's stop, a closed terminal) end prep as an error does:
// the unfinished shards removed (unlink and write are async-signal-safe), then the signal's own
// end. The handlers are in place while shards are being written.
static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
static struct sigaction stop_before[3];
static void on_stop_signal(int sig) {
    static const char text[] = "bertpre: prep stopped by a signal: its unfinished shards removed\n";
    fatal_cleanup_run();
    if (write(2, text, sizeof text - 1) < 0) {}
    signal(sig, SIG_DFL);
    raise(sig);
}
static void stop_handlers(int install) {
    for (int i = 0; i < 3; i++) {
        if (!install) {
            sigaction(stop_signals[i], &stop_before[i], NULL);
            continue;
        }
        struct sigaction action = {.sa_handler = on_stop_signal};
        sigemptyset(&action.sa_mask);
        sigaction(stop_signals[i], NULL, &stop_before[i]);
        if (stop_before[i].sa_handler != SIG_IGN) sigaction(stop_signals[i], &action, NULL);  // nohup stays
    }
}
// The output directory's lock file (hidden: loaders and the shard checks pass it by).
#define PREP_LOCK_FILE ".bertpre-prep-lock"

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

// Whether `name` is one of the files this run (all ranks) writes: those are replaced.
static int is_own_output(const prep_options *o, const char *name) {
    int number, len = 0;
    size_t plen = strlen(o->prefix);
    if (!strncmp(name, o->prefix, plen) && sscanf(name + plen, "-%5d.hdf5%n", &number, &len) == 1 &&
        name[plen + len] == 0 && strlen(name) == plen + 11)
        return number >= 0 && number < o->world_size * o->shards;
    if (o->eval_fraction > 0 && sscanf(name, "eval-%5d.hdf5%n", &number, &len) == 1 && name[len] == 0 &&
        strlen(name) == 15)
        return number >= 0 && number < o->world_size;
    return 0;
}

// An output directory that holds shards this run does not write (an earlier run with other
// options, another prefix, more shards) is refused: a loader given the directory would mix
// them into training.
static void refuse_foreign_shards(const prep_options *o) {
    DIR *d = opendir(o->output_dir);
    check_file(d, o->output_dir, "listing the output directory");
    char found[1024] = "";
    size_t used = 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!has_suffix(e->d_name, ".hdf5") && !has_suffix(e->d_name, ".h5")) continue;
        if (!strncmp(e->d_name, PREP_TMP_PREFIX, strlen(PREP_TMP_PREFIX)) || is_own_output(o, e->d_name)) continue;
        if (n++ < 5 && used < sizeof found)
            used += (size_t)snprintf(found + used, sizeof found - used, "%s%s", used ? ", " : "", e->d_name);
    }
    closedir(d);
    if (n)
        fatal("prep: --output '%s' already holds %d shard(s) that this run does not write (%s%s): a loader given the "
              "directory would mix them into training; remove them or choose an empty directory",
              o->output_dir, n, found, n > 5 ? ", ..." : "");
}

// One prep per output directory: each rank holds its byte of the lock file
// PREP_LOCK_FILE (rank 0 writes who holds it), and a second prep is refused at once at the
// rank both have, before it reads, writes or removes anything there. A prep of one rank
// removes the file when it ends well (prep_run); one of several ranks leaves it.
static dir_lock lock_output_dir(const prep_options *o) {
    char what[1200], holder[512];
    snprintf(what, sizeof what, "prep: --output '%s'", o->output_dir);
    dir_lock l;  // never released: held until the process ends, however it ends
    int got = dir_lock_take_slot(&l, o->output_dir, PREP_LOCK_FILE, o->rank, 1, what, holder, sizeof holder);
    if (got == DIR_LOCK_HELD)
        fatal("%s is in use by another prep (%s, holding %s%s): two preps in one directory remove each other's "
              "unfinished shards. Wait for it to end, stop it, or choose another directory",
              what, holder[0] ? holder : "its host and pid not written", l.path,
              o->world_size > 1 ? " at this rank" : "");
    if (got == DIR_LOCK_UNSUPPORTED)
        fprintf(stderr, "bertpre: warning: %s: cannot lock %s (%s): nothing stops a second prep into it\n", what,
                l.path, strerror(errno));
    else if (o->rank == 0)
        dir_lock_sign(&l);
    return l;
}

// Text that gives poor instances: mostly one-sentence documents (their next-sentence pairs
// split a sentence or pair it with another document), or sentences longer than a sequence
// (cut: their tokens beyond it are lost), as a paragraph per line in --format lines gives.
// A warning, or with --strict an error that writes nothing.
static void prep_check_text(const prep_options *o, const prep_stats *s) {
    // Packed rows make no pairs and cut no sentence: neither warning applies.
    if (o->packing != PREP_PAIRS) return;
    long docs = s->documents;
    const char *fix = o->text.format == TEXT_SENTENCE_LINES
                          ? "if the input has a paragraph or more per line, --format text splits it into sentences"
                          : "";
    char text[2][800];
    int n = 0;
    if (docs > 0 && 2 * s->single_sentence_documents > docs)
        snprintf(text[n++], sizeof text[0],
                 "%ld of the %ld documents (%.0f%%) have a single sentence: their next-sentence pairs cannot follow "
                 "one sentence with the next (--format %s takes %s)%s%s",
                 s->single_sentence_documents, docs, 100.0 * s->single_sentence_documents / docs,
                 o->text.format == TEXT_SENTENCE_LINES ? "lines" : "text",
                 o->text.format == TEXT_SENTENCE_LINES ? "a sentence per line, a blank line between documents"
                                                       : "running text, a blank line or a file per document",
                 fix[0] ? "; " : "", fix);
    // Cut "sentences" of several sequences each are no sentences: text without sentence breaks
    // (markup, code, tables, a paragraph or a document per line), which a longer sequence
    // would not mend.
    double cut_mean = s->cut_sentences ? (double)s->cut_tokens / s->cut_sentences + (o->seq_length - 3) : 0;
    int unsplit = cut_mean > 4.0 * o->seq_length;
    char cure[300];
    if (unsplit)
        snprintf(cure, sizeof cure, "these %ld 'sentences' hold %.0f tokens on average, so the text has no sentence "
                 "breaks to split at (markup, code or tables, or a paragraph per line): give prose, or strip the "
                 "markup, rather than a longer --seq-length", s->cut_sentences, cut_mean);
    else
        snprintf(cure, sizeof cure, "raise --seq-length");
    if (s->tokens > 0 && 20 * s->cut_tokens > s->tokens)  // over 5%: real sentences fit a sequence
        snprintf(text[n++], sizeof text[0],
                 "%ld of the %ld tokens (%.0f%%) lie beyond --seq-length %d in sentences longer than a sequence "
                 "(%d tokens besides [CLS] and two [SEP]) and are cut off: %s%s%s",
                 s->cut_tokens, s->tokens, 100.0 * s->cut_tokens / s->tokens, o->seq_length, o->seq_length - 3,
                 cure, fix[0] && !unsplit ? "; or, " : "", unsplit ? "" : fix);
    for (int i = 0; i < n; i++) {
        if (o->strict)
            fatal("prep: %s; %ld tokens dropped in all (--strict: nothing was written to %s)", text[i],
                  s->dropped_tokens, o->output_dir);
        fprintf(stderr, "bertpre: warning: prep: %s; %ld tokens dropped in all\n", text[i], s->dropped_tokens);
    }
}

prep_stats prep_run(const prep_options *o) {
    prep_state st;
    memset(&st, 0, sizeof st);
    st.o = o;
    if (o->seq_length < 5) fatal("prep: max sequence length %d is too short (at least 5)", o->seq_length);
    if (o->max_predictions < 1 || o->max_predictions > o->seq_length - 3)
        fatal("prep: max predictions per sequence %d must be in [1, %d]", o->max_predictions, o->seq_length - 3);
    if (o->shards < 1) fatal("prep: the number of shards must be at least 1, got %d", o->shards);
    if (o->dupe_factor < 1) fatal("prep: the dupe factor must be at least 1, got %d", o->dupe_factor);
    const char *refused = o->separate_documents ? prep_separate_documents_refusal(o->packing) : NULL;
    if (refused) fatal("prep: %s", refused);
    tokenizer_options topt = {o->lower_case, o->strip_accents};
    tokenizer_status ts = tokenizer_load_with(&st.tok, o->tokenizer_model, &topt);
    if (!ts.ok) fatal("prep: cannot load the tokenizer: %s", ts.message);
    char casing[1024];
    if (tokenizer_casing_warning(st.tok, o->tokenizer_model, casing, sizeof casing))
        fprintf(stderr, "bertpre: warning: prep: %s\n", casing);
    tokenizer_special_ids sp = tokenizer_specials(st.tok);
    if (sp.cls < 0 || sp.sep < 0 || sp.mask < 0)
        fatal("%s: the tokenizer lacks [CLS], [SEP] or [MASK] (ids %d, %d, %d); train it with 'bertpre tokenizer "
              "train'", o->tokenizer_model, sp.cls, sp.sep, sp.mask);
    int V = tokenizer_vocab_size(st.tok);
    st.mp = masking_for_tokenizer(sp, V, o->masked_lm_prob, o->max_predictions);
    if (o->whole_word_mask) masking_whole_words(&st.mp, st.tok);
    st.mp_eval = o->eval_bert_masking ? masking_for_tokenizer(sp, V, MASK_PROB_DEFAULT, o->max_predictions) : st.mp;
    st.stats.vocab_size = V;
    st.unk = sp.unk;

    struct stat dir_st;
    if (stat(o->output_dir, &dir_st) != 0) {
        // --output and its missing parents (mkdir -p), the ones made remembered for a failure.
        char failed[1100];
        int err = make_dirs_noted(o->output_dir, made_dirs, 8, &n_made_dirs, failed, sizeof failed);
        if (err) {
            for (int k = n_made_dirs - 1; k >= 0; k--) rmdir(made_dirs[k]);
            errno = err;
            check_file(0, failed, "creating the --output directory");
        }
    } else if (!S_ISDIR(dir_st.st_mode)) {
        fatal("prep: --output '%s' is a file, not a directory", o->output_dir);
    }
    fatal_cleanup = remove_unfinished;  // the directories made, from here on
    dir_lock lock = lock_output_dir(o);
    if (o->world_size == 1 && lock.fd >= 0) snprintf(lock_path, sizeof lock_path, "%s", lock.path);
    refuse_foreign_shards(o);
    st.n_writers = o->shards + (o->eval_fraction > 0);
    st.writers = xcalloc((size_t)st.n_writers, sizeof(shard_writer *));
    char (*final_paths)[4096] = xcalloc((size_t)st.n_writers, 4096), (*tmp_paths)[4200] = xcalloc((size_t)st.n_writers, 4200);
    unfinished_paths = tmp_paths;
    fatal_cleanup = remove_unfinished;
    stop_handlers(1);
    for (int k = 0; k < st.n_writers; k++) {
        char name[600];
        if (k < o->shards) snprintf(name, sizeof name, "%s-%05d.hdf5", o->prefix, o->rank * o->shards + k);
        else snprintf(name, sizeof name, "eval-%05d.hdf5", o->rank);
        // Written under a temporary name that no loader takes, renamed when complete.
        snprintf(final_paths[k], 4096, "%s/%s", o->output_dir, name);
        snprintf(tmp_paths[k], 4200, "%s/%s%s.partial", o->output_dir, PREP_TMP_PREFIX, name);
        n_unfinished = k + 1;
        // Separate documents: the dataset document_starts, of seq_length / 3 columns (a piece,
        // [CLS] x [SEP], is at least 3 tokens); else none (each row one stream of text).
        st.writers[k] = shard_writer_create(tmp_paths[k], o->seq_length, o->max_predictions,
                                            o->separate_documents ? o->seq_length / 3 : 0, o->gzip_level);
        shard_writer_set_attr(st.writers[k], "packing", prep_packing_names[o->packing]);
        if (o->tokenizer_sha256) shard_writer_set_attr(st.writers[k], "tokenizer_sha256", o->tokenizer_sha256);
    }

    int threads = o->threads > 0 ? o->threads : 1;
    st.n_slots = 2 * threads;
    st.slots = xcalloc((size_t)st.n_slots, sizeof(chunk_t));
    for (int i = 0; i < st.n_slots; i++) st.slots[i].seq = -1;
    st.total_chunks = -1;
    pthread_mutex_init(&st.mu, NULL);
    pthread_cond_init(&st.cv, NULL);
    pthread_t *workers = xcalloc((size_t)threads, sizeof(pthread_t));
    pthread_t *writers = xcalloc((size_t)st.n_writers, sizeof(pthread_t));
    writer_arg *writer_args = xcalloc((size_t)st.n_writers, sizeof(writer_arg));
    for (int i = 0; i < threads; i++)
        if (pthread_create(&workers[i], NULL, worker_main, &st) != 0) fatal("prep: cannot start a worker thread");
    for (int k = 0; k < st.n_writers; k++) {
        writer_args[k] = (writer_arg){&st, k};
        if (pthread_create(&writers[k], NULL, writer_main, &writer_args[k]) != 0)
            fatal("prep: cannot start a writer thread");
    }

    double start = now_seconds(), last_print = 0.0, skipped_bytes = 0.0, read_mine = 0.0;
    text_reader *reader = text_reader_open(o->inputs, o->n_inputs, o->pattern, o->text);
    text_document doc = {0};
    long global_chunk = 0, local = 0, doc_index = 0;
    chunk_t *c = NULL;  // this rank's chunk being filled
    while (text_reader_next(reader, &doc)) {
        int mine = global_chunk % o->world_size == o->rank;
        int is_eval = o->eval_fraction > 0 &&
                      philox_draw(o->seed, 0, SITE_EVAL_SPLIT, (uint64_t)doc_index) < o->eval_fraction * 4294967296.0;
        doc_index++;
        st.stats.documents++;
        st.stats.eval_documents += is_eval;
        double fill;
        if (mine) {
            if (!c) c = slot_acquire(&st, local, global_chunk);
            chunk_add_document(c, &doc, is_eval);
            read_mine += (double)doc.len;
            fill = c->bytes;
        } else {
            skipped_bytes += (double)doc.len;
            fill = skipped_bytes;
        }
        // Chunk boundaries depend on the text only, so every rank sees the same chunks.
        if (fill >= (double)o->chunk_bytes) {
            if (c) slot_submit(&st, c), c = NULL, local++;
            skipped_bytes = 0.0;
            global_chunk++;
        }
        if (o->progress && now_seconds() - last_print > 0.25) {
            progress_print(&st, read_mine, text_reader_progress(reader), start, 0);
            last_print = now_seconds();
        }
    }
    if (c) slot_submit(&st, c), local++;
    st.stats.text_bytes = text_reader_bytes_read(reader);
    st.stats.skipped_lines = text_reader_skipped_lines(reader);
    text_reader_close(reader);
    text_document_free(&doc);
    pthread_mutex_lock(&st.mu);
    st.total_chunks = local;
    pthread_cond_broadcast(&st.cv);
    pthread_mutex_unlock(&st.mu);
    for (int finished = 0; o->progress && !finished;) {
        pthread_mutex_lock(&st.mu);
        finished = st.chunks_done == local;
        pthread_mutex_unlock(&st.mu);
        if (!finished) usleep(250000);
        progress_print(&st, read_mine, 1.0, start, finished);
    }
    for (int i = 0; i < threads; i++) pthread_join(workers[i], NULL);
    for (int k = 0; k < st.n_writers; k++) {
        pthread_join(writers[k], NULL);
        shard_writer_close(st.writers[k]);
    }
    const char *problem = NULL;
    char why[200];
    if (st.stats.train_instances == 0) problem = "no training instance";
    else if (5 * st.stats.unknown_tokens > st.stats.tokens) {  // over 20%: real text has well under 1%
        snprintf(why, sizeof why, "%ld of the %ld tokens <unk> (binary data, or text the tokenizer was not trained "
                 "on)", st.stats.unknown_tokens, st.stats.tokens);
        problem = why;
    } else if (o->eval_fraction > 0 && st.stats.eval_instances == 0) problem = "no held-out (eval) instance";
    if (problem) {
        // Whole documents are held out: too few of them leave one side empty, whatever their
        // length. Say which option makes more of them.
        char hint[300] = "";
        int few = st.stats.documents > 0 && st.stats.documents < 20 && st.stats.sentences > 2 * st.stats.documents;
        if (few && o->text.format == TEXT_PLAIN && o->text.doc_per_file)
            snprintf(hint, sizeof hint, "; with --doc-per file each file is one document, too few to split into "
                     "training and held-out ones: --doc-per block makes each blank-line block a document");
        else if (few && o->eval_fraction > 0)
            snprintf(hint, sizeof hint, "; whole documents are held out, and %ld are too few: give more documents "
                     "(a blank line between them) or --eval-fraction 0", st.stats.documents);
        fatal("prep: no usable text: rank %d of %d read %ld document(s), %ld sentence(s), %ld token(s) from %s%s and "
              "gave %s (a document needs sentences of known pieces; --eval-fraction %g)%s; nothing was written "
              "to %s",
              o->rank, o->world_size, st.stats.documents, st.stats.sentences, st.stats.tokens, o->inputs[0],
              o->n_inputs > 1 ? " and the other inputs" : "", problem, o->eval_fraction, hint, o->output_dir);
    }
    prep_check_text(o, &st.stats);
    // Each shard fsynced, moved to its final name (replacing this run's own from before), and
    // the directory fsynced: a crash leaves every shard whole under its name or absent.
    for (int k = 0; k < st.n_writers; k++)
        if (staged_file_commit(tmp_paths[k], final_paths[k], 1) != 0)
            fatal("prep: moving the finished shard %s to %s failed: %s", tmp_paths[k], final_paths[k],
                  strerror(errno));
    stop_handlers(0);
    fatal_cleanup = NULL;
    n_unfinished = n_made_dirs = 0;
    lock_path[0] = 0;
    if (o->world_size == 1) dir_lock_remove(&lock);  // the other ranks of a job may still hold theirs
    free(final_paths);
    free(tmp_paths);
    st.stats.seconds = now_seconds() - start;
    for (int i = 0; i < st.n_slots; i++) chunk_free(&st.slots[i]);
    free(st.slots);
    free(st.writers);
    free(writers);
    free(writer_args);
    free(workers);
    pthread_mutex_destroy(&st.mu);
    pthread_cond_destroy(&st.cv);
    tokenizer_free(st.tok);
    masking_free(&st.mp);
    if (o->eval_bert_masking) masking_free(&st.mp_eval);
    return st.stats;
}
