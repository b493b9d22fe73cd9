// The tokenizer's C API itself (tokenizer/tokenizer.h): training from files (the path the
// command line does not take), special ids, piece/id lookups, and that failures come back
// as statuses: a missing file, a bad id, a missing model. Encoding from two threads at
// once gives the ids of one thread (prep relies on it).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bertpre_config.h"
#include "tests/test_util.h"

#if !BERTPRE_HAVE_SENTENCEPIECE
int main(void) {
    printf("SKIP: bertpre was built without SentencePiece (libsentencepiece-dev not found)\n");
    return 77;
}
#else
#include "tokenizer/tokenizer.h"

static const char *words[] = {"kernel", "driver", "memory", "the", "a", "device", "interrupt", "page", "file",
                              "system", "lock", "thread", "network", "packet", "buffer", "queue"};

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

int main(void) {
    char dir[] = "/tmp/bertpre-test-tok-XXXXXX";
    if (!mkdtemp(dir)) return 1;
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
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", dir);
    printf("%s\n", test_failures ? "FAILED" : "all passed");
    return test_failures ? 1 : 0;
}
#endif
