// The tokenizer's C API itself (tokenizer/tokenizer.h): training from files (the path the
// command line does not take), special ids, piece/id lookups, and that failures come back
// as statuses: a missing file, a bad id, a missing model. Encoding from two threads at
// once gives the ids of one thread (prep relies on it), for SentencePiece and for WordPiece
// (whose ids by hand here; their equality with BERT's is test wordpiece_parity), the latter
// also on a long non-ASCII run (its heap path) and with the casing options.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bertpre_config.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

#if BERTPRE_HAVE_SENTENCEPIECE
static const char *words[] = {"kernel", "driver", "memory", "the", "a", "device", "interrupt", "page", "file",
                              "system", "lock", "thread", "network", "packet", "buffer", "queue"};
#endif

typedef struct {
    const tokenizer *tok;
    const char *text;
    int *ids;
    size_t n;
} encode_job;

static void *encode_many(void *arg) {
    encode_job *j = arg;
    int *ids = NULL;
    size_t cap = 0;
    for (int rep = 0; rep < 200; rep++) tokenizer_encode(j->tok, j->text, strlen(j->text), &ids, &j->n, &cap);
    j->ids = ids;
    return NULL;
}

static int same_ids(const int *a, size_t n, const int *b, size_t m) { return n == m && !memcmp(a, b, n * sizeof(int)); }

static void wordpiece_checks(const char *dir) {
    char vocab[256], config[256];
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", dir);
    snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
    // ids: 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK], 5 un, 6 ##aff, 7 ##able, 8 caf, 9 ##e,
    // 10 ",", 11 Caf, 12 ##é, 13 é
    FILE *f = fopen(vocab, "w");
    fputs("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nun\n##aff\n##able\ncaf\n##e\n,\nCaf\n##\xc3\xa9\n\xc3\xa9\n", f);
    fclose(f);
    tokenizer *tok = NULL;
    tokenizer_status s = tokenizer_load(&tok, vocab);
    expect_true("wordpiece: a vocab.txt loads as WordPiece, uncased without a tokenizer_config.json",
                s.ok && tokenizer_type(tok) == TOKENIZER_WORDPIECE && tokenizer_lower_case(tok) == 1 &&
                    tokenizer_strip_accents(tok) == 1 && tokenizer_vocab_size(tok) == 14);
    if (!tok) return;
    tokenizer_special_ids sp = tokenizer_specials(tok);
    expect_true("wordpiece: specials by name", sp.pad == 0 && sp.unk == 1 && sp.cls == 2 && sp.sep == 3 && sp.mask == 4);
    int *ids = NULL;
    size_t n = 0, cap = 0;
    const char *text = "Unaffable, CAFÉ [MASK]x";
    s = tokenizer_encode(tok, text, strlen(text), &ids, &n, &cap);
    int want[] = {5, 6, 7, 10, 8, 9, 4, 1};
    expect_true("wordpiece: 'Unaffable, CAFÉ [MASK]x' uncased is un ##aff ##able , caf ##e [MASK] [UNK]",
                s.ok && same_ids(ids, n, want, 8));
    // A run of over 512 bytes without ASCII white space takes the heap buffers.
    char *longrun = malloc(3000);
    size_t len = 0;
    for (int i = 0; i < 600; i++) len += (size_t)sprintf(longrun + len, i % 2 ? "\xc3\xa9" : ",");
    s = tokenizer_encode(tok, longrun, len, &ids, &n, &cap);
    int ok = s.ok && n == 600;
    for (size_t i = 0; ok && i < n; i++) ok = ids[i] == (i % 2 ? 1 : 10);  // é stripped to e: no token, [UNK]
    expect_true("wordpiece: a 900-byte run ',é,é...' gives ', [UNK]' 300 times", ok);
    encode_job jobs[2] = {{tok, longrun, NULL, 0}, {tok, longrun, NULL, 0}};
    jobs[0].text = jobs[1].text = longrun;
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, encode_many, &jobs[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    expect_true("wordpiece: two threads encoding at once get the same ids",
                same_ids(jobs[0].ids, jobs[0].n, ids, n) && same_ids(jobs[1].ids, jobs[1].n, ids, n));
    for (int i = 0; i < 2; i++) free(jobs[i].ids);
    char *back = NULL;
    int some[] = {11, 12, 10, 5, 6};
    s = tokenizer_decode(tok, some, 5, &back);
    expect_true("wordpiece: decode joins ## pieces: 'Café , unaff'", s.ok && !strcmp(back, "Café , unaff"));
    free(back);
    tokenizer_free(tok);

    f = fopen(config, "w");
    fputs("{\"do_lower_case\": false}\n", f);
    fclose(f);
    s = tokenizer_load(&tok, vocab);
    text = "Café";
    tokenizer_status s2 = s.ok ? tokenizer_encode(tok, text, strlen(text), &ids, &n, &cap) : s;
    int cased[] = {11, 12};
    expect_true("wordpiece: do_lower_case false in tokenizer_config.json: cased, 'Café' is Caf ##é",
                s2.ok && tokenizer_lower_case(tok) == 0 && same_ids(ids, n, cased, 2));
    tokenizer_free(tok);
    tokenizer_options lower = {1, -1};
    s = tokenizer_load_with(&tok, vocab, &lower);
    s2 = s.ok ? tokenizer_encode(tok, text, strlen(text), &ids, &n, &cap) : s;
    int uncased[] = {8, 9};
    expect_true("wordpiece: lower_case 1 over the config: 'Café' is caf ##e", s2.ok && same_ids(ids, n, uncased, 2));
    tokenizer_free(tok);
    f = fopen(config, "w");
    fputs("{\"do_lower_case\": fals", f);
    fclose(f);
    s = tokenizer_load(&tok, vocab);
    expect_true("wordpiece: a broken tokenizer_config.json: an error naming it", !s.ok && strstr(s.message, config));
    unlink(config);
    free(longrun);
    free(ids);
}

int main(void) {
    char dir[] = "/tmp/bertpre-test-tok-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    wordpiece_checks(dir);
#if !BERTPRE_HAVE_SENTENCEPIECE
    printf("SKIP (SentencePiece part): bertpre was built without SentencePiece\n");
#else
    char corpus[256], prefix[256], model[256];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    snprintf(prefix, sizeof prefix, "%s/m", dir);
    snprintf(model, sizeof model, "%s/m.model", dir);
    FILE *f = fopen(corpus, "w");
    for (int line = 0; line < 3000; line++) {
        for (int w = 0; w < 12; w++) fprintf(f, "%s%s", w ? " " : "", words[philox_draw(5, 0, line, w) % 16]);
        fputs(".\n", f);
    }
    fclose(f);

    tokenizer_train_options o = {.model_prefix = prefix, .vocab_size = 60, .num_threads = 1, .seed = 1};
    tokenizer_status s = tokenizer_train(&o, corpus, NULL, NULL);
    expect_true("train from a file: ok", s.ok);
    if (!s.ok) printf("     %s\n", s.message);
    s = tokenizer_train(&o, "/nonexistent/corpus.txt", NULL, NULL);
    expect_true("train from a missing file: an error status naming it",
                !s.ok && strstr(s.message, "/nonexistent/corpus.txt") != NULL);

    tokenizer *tok = NULL;
    s = tokenizer_load(&tok, "/nonexistent/m.model");
    expect_true("load a missing model: an error status, no tokenizer", !s.ok && tok == NULL);
    s = tokenizer_load(&tok, model);
    expect_true("load the trained model", s.ok && tok);
    if (!tok) return 1;
    tokenizer_special_ids sp = tokenizer_specials(tok);
    expect_true("specials: <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4",
                sp.pad == 0 && sp.unk == 1 && sp.cls == 2 && sp.sep == 3 && sp.mask == 4);
    expect_true("vocab size as trained", tokenizer_vocab_size(tok) == 60);
    expect_true("piece_to_id: [MASK] is 4, an unknown piece is -1",
                tokenizer_piece_to_id(tok, "[MASK]") == 4 && tokenizer_piece_to_id(tok, "no-such-piece") == -1);
    char piece[64];
    s = tokenizer_id_to_piece(tok, 3, piece, sizeof piece);
    expect_true("id_to_piece(3) is [SEP]", s.ok && !strcmp(piece, "[SEP]"));
    s = tokenizer_id_to_piece(tok, 60, piece, sizeof piece);
    expect_true("id_to_piece(vocab size): an error status", !s.ok && strstr(s.message, "60"));

    const char *text = "the kernel driver locks the page buffer.";
    int *ids = NULL;
    size_t n = 0, cap = 0;
    s = tokenizer_encode(tok, text, strlen(text), &ids, &n, &cap);
    char *back = NULL;
    tokenizer_status s2 = tokenizer_decode(tok, ids, n, &back);
    expect_true("encode then decode gives the text back", s.ok && s2.ok && n > 0 && !strcmp(back, text));
    free(back);
    int bad[2] = {5, -1};
    s = tokenizer_decode(tok, bad, 2, &back);
    expect_true("decode of a negative id: an error status, no text", !s.ok && back == NULL);

    encode_job jobs[2] = {{tok, text, NULL, 0}, {tok, text, NULL, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, encode_many, &jobs[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    int same = 1;
    for (int i = 0; i < 2; i++) same &= jobs[i].n == n && !memcmp(jobs[i].ids, ids, n * sizeof(int));
    expect_true("two threads encoding at once get the same ids", same);
    for (int i = 0; i < 2; i++) free(jobs[i].ids);
    free(ids);
    tokenizer_free(tok);
#endif
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", dir);
    printf("%s\n", test_failures ? "FAILED" : "all passed");
    return test_failures ? 1 : 0;
}
