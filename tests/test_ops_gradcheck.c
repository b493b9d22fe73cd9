// Finite-difference gradient check of every CPU op (the fused ones too), in double precision (the "cpu64" build
// of the same sources). For each op, f = sum(out * r) with a fixed random r; the op's
// backward with dout = r must equal the central difference (f(x + h) - f(x - h)) / 2h for
// every input element. Tolerance 1e-6 relative: central differences with h = 1e-5 in
// double carry a truncation error of order h^2 |f'''| ~ 1e-10 and a rounding error of
// order 1e-16 / h ~ 1e-11, so a correct backward lands near 1e-9 and a wrong one near 1.
#include <string.h>
#include "kernels/backend.h"
#include "tests/test_util.h"

static const backend_t *be = &backend_cpu64;
enum { MAXN = 1 << 14 };
static const double H = 1e-5, TOL = 1e-6;

// The op under test, as f(x) = sum(out * r) over whatever buffers the case holds.
typedef double (*loss_fn)(void *ctx);

static double dot(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void check_input(const char *what, loss_fn f, void *ctx, double *x, size_t n, const double *analytic) {
    double *numeric = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + H;
        double up = f(ctx);
        x[i] = saved - H;
        double down = f(ctx);
        x[i] = saved;
        numeric[i] = (up - down) / (2 * H);
    }
    expect_close(what, rel_error(analytic, numeric, n), TOL);
    free(numeric);
}

// ---- embeddings ------------------------------------------------------------------------
// positions: the unpadded rows' positions (NULL: the padded layout, position n % T).
typedef struct { int B, T, C, V, P, *ids, *seg, *pos; double *wte, *wpe, *wtt, *out, *r; } emb_ctx;
static double emb_loss(void *p) {
    emb_ctx *c = p;
    be->embeddings_forward(c->out, c->ids, c->seg, c->pos, c->wte, c->wpe, c->wtt, c->B * c->T, c->T, c->T, c->C);
    return dot(c->out, c->r, (size_t)c->B * c->T * c->C);
}
static void test_embeddings(void) {
    emb_ctx c = {.B = 2, .T = 7, .C = 6, .V = 11, .P = 3};
    int ids[14], seg[14];
    for (int i = 0; i < 14; i++) ids[i] = (i * 5 + 1) % c.V, seg[i] = i % 3 == 0;
    ids[3] = 0;  // one padding token
    double wte[66], wpe[42], wtt[12], out[84], r[84], dwte[66] = {0}, dwpe[42] = {0}, dwtt[12] = {0};
    fill_random(wte, 66, 1, -1, 1), fill_random(wpe, 42, 2, -1, 1), fill_random(wtt, 12, 3, -1, 1);
    fill_random(r, 84, 4, -1, 1);
    c.ids = ids, c.seg = seg, c.wte = wte, c.wpe = wpe, c.wtt = wtt, c.out = out, c.r = r;
    // pad_id = -1: every row gets its gradient, which finite differences then see.
    be->embeddings_backward(dwte, dwpe, dwtt, r, ids, seg, NULL, -1, c.B * c.T, c.T, c.T, c.C);
    check_input("embeddings d wte", emb_loss, &c, wte, 66, dwte);
    check_input("embeddings d wpe", emb_loss, &c, wpe, 42, dwpe);
    check_input("embeddings d wtt", emb_loss, &c, wtt, 12, dwtt);
    // Unpadded rows: 14 rows of positions in a different order (rows of lengths 5, 7, 2).
    int pos[14] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 0, 1};
    double pwte[66] = {0}, pwpe[42] = {0}, pwtt[12] = {0};
    c.pos = pos;
    be->embeddings_backward(pwte, pwpe, pwtt, r, ids, seg, pos, -1, c.B * c.T, c.T, c.T, c.C);
    check_input("embeddings (positions) d wte", emb_loss, &c, wte, 66, pwte);
    check_input("embeddings (positions) d wpe", emb_loss, &c, wpe, 42, pwpe);
    check_input("embeddings (positions) d wtt", emb_loss, &c, wtt, 12, pwtt);
    c.pos = NULL;
    // pad_id = 0 (torch's padding_idx): the pad row gets nothing, the others are unchanged.
    double dwte_pad[66] = {0}, dwpe2[42] = {0}, dwtt2[12] = {0};
    be->embeddings_backward(dwte_pad, dwpe2, dwtt2, r, ids, seg, NULL, 0, c.B * c.T, c.T, c.T, c.C);
    int pad_row_zero = 1, others_same = 1;
    for (int k = 0; k < c.C; k++) pad_row_zero &= dwte_pad[k] == 0.0;
    for (int k = c.C; k < 66; k++) others_same &= dwte_pad[k] == dwte[k];
    expect_true("embeddings: no gradient into the pad_id row, others unchanged", pad_row_zero && others_same);
}

// ---- layernorm -------------------------------------------------------------------------
typedef struct { int N, C; double *x, *w, *b, *out, *mean, *rstd, *r; } ln_ctx;
static double ln_loss(void *p) {
    ln_ctx *c = p;
    be->layernorm_forward(c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C, 1e-5f);
    return dot(c->out, c->r, (size_t)c->N * c->C);
}
static void test_layernorm(int N, int C) {
    size_t n = (size_t)N * C;
    ln_ctx c = {.N = N, .C = C};
    c.x = malloc(n * 8), c.out = malloc(n * 8), c.r = malloc(n * 8), c.w = malloc(C * 8), c.b = malloc(C * 8);
    c.mean = malloc(N * 8), c.rstd = malloc(N * 8);
    double *dx = malloc(n * 8), *dw = calloc(C, 8), *db = calloc(C, 8);
    fill_random(c.x, n, 5, -2, 3), fill_random(c.w, C, 6, 0.5, 1.5), fill_random(c.b, C, 7, -1, 1);
    fill_random(c.r, n, 8, -1, 1);
    ln_loss(&c);
    be->layernorm_backward(dx, dw, db, c.r, c.x, c.w, c.mean, c.rstd, N, C);
    char what[96];
    snprintf(what, sizeof what, "layernorm N=%d C=%d d inp", N, C);
    check_input(what, ln_loss, &c, c.x, n, dx);
    snprintf(what, sizeof what, "layernorm N=%d C=%d d weight", N, C);
    check_input(what, ln_loss, &c, c.w, C, dw);
    snprintf(what, sizeof what, "layernorm N=%d C=%d d bias", N, C);
    check_input(what, ln_loss, &c, c.b, C, db);
    free(c.x), free(c.out), free(c.r), free(c.w), free(c.b), free(c.mean), free(c.rstd), free(dx), free(dw), free(db);
}

// ---- matmul ----------------------------------------------------------------------------
typedef struct { int N, IC, OC; double *x, *w, *b, *out, *r; } mm_ctx;
static double mm_loss(void *p) {
    mm_ctx *c = p;
    be->matmul_forward(c->out, c->x, c->w, c->b, c->N, c->IC, c->OC);
    return dot(c->out, c->r, (size_t)c->N * c->OC);
}
static void test_matmul(int N, int IC, int OC) {
    mm_ctx c = {.N = N, .IC = IC, .OC = OC};
    c.x = malloc(N * IC * 8), c.w = malloc(OC * IC * 8), c.b = malloc(OC * 8), c.out = malloc(N * OC * 8);
    c.r = malloc(N * OC * 8);
    double *dx = malloc(N * IC * 8), *dw = calloc(OC * IC, 8), *db = calloc(OC, 8), *add = malloc(N * IC * 8);
    fill_random(c.x, N * IC, 9, -1, 1), fill_random(c.w, OC * IC, 10, -1, 1), fill_random(c.b, OC, 11, -1, 1);
    fill_random(c.r, N * OC, 12, -1, 1), fill_random(add, N * IC, 13, -1, 1);
    be->matmul_backward(dx, dw, db, c.r, c.x, c.w, NULL, N, IC, OC);
    char what[96];
    snprintf(what, sizeof what, "matmul N=%d IC=%d OC=%d d inp", N, IC, OC);
    check_input(what, mm_loss, &c, c.x, N * IC, dx);
    snprintf(what, sizeof what, "matmul N=%d IC=%d OC=%d d weight", N, IC, OC);
    check_input(what, mm_loss, &c, c.w, OC * IC, dw);
    snprintf(what, sizeof what, "matmul N=%d IC=%d OC=%d d bias", N, IC, OC);
    check_input(what, mm_loss, &c, c.b, OC, db);
    // dinp_add: dinp = dout @ W + add, both as a separate buffer and in place.
    double *dx2 = malloc(N * IC * 8), *expect = malloc(N * IC * 8), *dw2 = calloc(OC * IC, 8);
    for (int i = 0; i < N * IC; i++) expect[i] = dx[i] + add[i];
    be->matmul_backward(dx2, dw2, NULL, c.r, c.x, c.w, add, N, IC, OC);
    snprintf(what, sizeof what, "matmul N=%d IC=%d OC=%d d inp + add", N, IC, OC);
    expect_close(what, rel_error(dx2, expect, N * IC), 1e-14);
    memcpy(dx2, add, N * IC * 8);
    be->matmul_backward(dx2, dw2, NULL, c.r, c.x, c.w, dx2, N, IC, OC);
    snprintf(what, sizeof what, "matmul N=%d IC=%d OC=%d d inp + add in place", N, IC, OC);
    expect_close(what, rel_error(dx2, expect, N * IC), 1e-14);
    free(c.x), free(c.w), free(c.b), free(c.out), free(c.r), free(dx), free(dw), free(db), free(add);
    free(dx2), free(expect), free(dw2);
}

// ---- attention -------------------------------------------------------------------------
// rows: B*T (padded layout) or the real tokens (packed).
typedef struct { int B, T, C, NH, packed, rows; int *offsets; double *qkv, *out, *lse, *r; dropout_t d; } att_ctx;
static double att_loss(void *p) {
    att_ctx *c = p;
    be->attention_forward(c->out, c->lse, NULL, c->qkv, c->offsets, c->packed, c->B, c->T, c->C, c->NH, c->d);
    return dot(c->out, c->r, (size_t)c->rows * c->C);
}
// Sequence b has b padding keys (packed: only its T - b real tokens exist).
static void test_attention(int B, int T, int C, int NH, float p, int packed) {
    att_ctx c = {.B = B, .T = T, .C = C, .NH = NH, .packed = packed, .d = {.p = p, .step = 3, .site = 5, .seed = 99}};
    c.offsets = malloc((B + 1) * sizeof(int));
    c.offsets[0] = 0;
    for (int b = 0; b < B; b++) c.offsets[b + 1] = c.offsets[b] + T - b;
    c.rows = packed ? c.offsets[B] : B * T;
    size_t n = (size_t)c.rows * 3 * C;
    c.qkv = malloc(n * 8), c.out = malloc((size_t)c.rows * C * 8), c.lse = malloc((size_t)B * NH * T * 8);
    c.r = malloc((size_t)c.rows * C * 8);
    double *dqkv = malloc(n * 8);
    fill_random(c.qkv, n, 14, -1.5, 1.5), fill_random(c.r, (size_t)c.rows * C, 15, -1, 1);
    att_loss(&c);
    // The backward recomputes the probabilities from the saved log-sum-exp.
    be->attention_backward(dqkv, c.r, c.qkv, c.out, c.lse, NULL, c.offsets, packed, B, T, C, NH, c.d);
    char what[96];
    snprintf(what, sizeof what, "attention B=%d T=%d C=%d NH=%d dropout %.1f %s d qkv", B, T, C, NH, p,
             packed ? "packed" : "padded");
    check_input(what, att_loss, &c, c.qkv, n, dqkv);
    // Padding keys get probability exactly 0, so their key and value gradients are exactly 0.
    int padded_zero = 1;
    for (int b = 0; b < B && !packed; b++)
        for (int j = T - b; j < T; j++)
            for (int e = C; e < 3 * C; e++) padded_zero &= dqkv[((size_t)b * T + j) * 3 * C + e] == 0.0;
    if (!packed) expect_true("attention: padding keys get exactly zero key and value gradients", padded_zero);
    free(c.offsets), free(c.qkv), free(c.out), free(c.lse), free(c.r), free(dqkv);
}

// ---- pointwise ops ---------------------------------------------------------------------
typedef struct { int n, op; gelu_kind act; double *x, *res, *out, *r; dropout_t d; } pw_ctx;
static double pw_loss(void *p) {
    pw_ctx *c = p;
    if (c->op == 0) be->gelu_forward(c->out, c->x, c->n, c->act);
    if (c->op == 1) be->tanh_forward(c->out, c->x, c->n);
    if (c->op == 2) be->dropout_residual_forward(c->out, c->x, c->res, c->n, c->d);
    return dot(c->out, c->r, c->n);
}
static void test_pointwise(void) {
    enum { n = 333 };
    double x[n], res[n], out[n], r[n], dx[n];
    fill_random(x, n, 16, -4, 4), fill_random(res, n, 17, -1, 1), fill_random(r, n, 18, -1, 1);
    pw_ctx c = {.n = n, .x = x, .res = res, .out = out, .r = r, .d = {.p = 0.25f, .step = 1, .site = 2, .seed = 7}};
    c.op = 0;
    be->gelu_backward(dx, r, x, n, GELU_ERF);
    check_input("gelu d inp", pw_loss, &c, x, n, dx);
    c.act = GELU_TANH;
    be->gelu_backward(dx, r, x, n, GELU_TANH);
    check_input("gelu (tanh form) d inp", pw_loss, &c, x, n, dx);
    c.op = 1;
    pw_loss(&c);
    be->tanh_backward(dx, r, out, n);
    check_input("tanh d inp", pw_loss, &c, x, n, dx);
    c.op = 2;
    be->dropout_backward(dx, r, n, c.d);
    check_input("dropout(p=0.25) + residual d inp", pw_loss, &c, x, n, dx);
    check_input("dropout(p=0.25) + residual d residual", pw_loss, &c, res, n, r);
    int dropped = 0;
    for (int i = 0; i < n; i++) dropped += dx[i] == 0.0;
    printf("     dropout dropped %d of %d (expected about %d)\n", dropped, n, n / 4);
    expect_true("dropout: dropped fraction within 0.25 +- 0.08 on 333 draws", fabs(dropped / (double)n - 0.25) < 0.08);
}

// ---- fused ops -------------------------------------------------------------------------
typedef struct { int N, C, op; gelu_kind act; double *x, *res, *w, *b, *sum, *out, *mean, *rstd, *r; dropout_t d; } fu_ctx;
static double fu_loss(void *p) {
    fu_ctx *c = p;
    if (c->op == 0) be->bias_gelu_forward(c->out, c->x, c->b, c->N, c->C, c->act);
    if (c->op == 1)
        be->residual_dropout_layernorm_forward(c->out, c->sum, c->mean, c->rstd, c->x, c->res, c->w, c->b, c->N, c->C,
                                               1e-5f, c->d);
    return dot(c->out, c->r, (size_t)c->N * c->C);
}
static void test_fused(void) {
    enum { N = 4, C = 9, n = N * C };
    double x[n], res[n], w[C], b[C], sum[n], out[n], mean[N], rstd[N], r[n], dx[n], dres[n];
    double dw[C] = {0}, db[C] = {0};
    fill_random(x, n, 30, -3, 3), fill_random(res, n, 31, -1, 2), fill_random(w, C, 32, 0.5, 1.5);
    fill_random(b, C, 33, -1, 1), fill_random(r, n, 34, -1, 1);
    fu_ctx c = {.N = N, .C = C, .x = x, .res = res, .w = w, .b = b, .sum = sum, .out = out, .mean = mean,
                .rstd = rstd, .r = r, .d = {.p = 0.2f, .step = 3, .site = 4, .seed = 11}};
    c.op = 0;
    be->bias_gelu_backward(dx, db, r, x, b, N, C, GELU_ERF);
    check_input("bias + gelu d inp", fu_loss, &c, x, n, dx);
    check_input("bias + gelu d bias", fu_loss, &c, b, C, db);
    c.act = GELU_TANH;
    memset(db, 0, sizeof db);
    be->bias_gelu_backward(dx, db, r, x, b, N, C, GELU_TANH);
    check_input("bias + gelu (tanh form) d inp", fu_loss, &c, x, n, dx);
    check_input("bias + gelu (tanh form) d bias", fu_loss, &c, b, C, db);
    c.act = GELU_ERF;
    c.op = 1;
    memset(db, 0, sizeof db);
    fu_loss(&c);
    be->layernorm_dropout_backward(dres, dx, dw, db, r, sum, w, mean, rstd, N, C, c.d);
    check_input("residual + dropout(p=0.2) + layernorm d inp", fu_loss, &c, x, n, dx);
    check_input("residual + dropout(p=0.2) + layernorm d residual", fu_loss, &c, res, n, dres);
    check_input("residual + dropout(p=0.2) + layernorm d weight", fu_loss, &c, w, C, dw);
    check_input("residual + dropout(p=0.2) + layernorm d bias", fu_loss, &c, b, C, db);
}

// ---- gather ----------------------------------------------------------------------------
typedef struct { int N, M, C; int *index; double *x, *out, *r; } ga_ctx;
static double ga_loss(void *p) {
    ga_ctx *c = p;
    be->gather_rows_forward(c->out, c->x, c->index, c->N, c->C);
    return dot(c->out, c->r, (size_t)c->N * c->C);
}
static void test_gather(void) {
    int index[] = {4, 0, 9, 4, 2};  // a repeated row accumulates
    ga_ctx c = {.N = 5, .M = 10, .C = 3, .index = index};
    double x[30], out[15], r[15], dx[30];
    fill_random(x, 30, 19, -1, 1), fill_random(r, 15, 20, -1, 1);
    c.x = x, c.out = out, c.r = r;
    be->gather_rows_backward(dx, r, index, c.N, c.M, c.C);
    check_input("gather rows (repeated index) d inp", ga_loss, &c, x, 30, dx);
}

// ---- cross-entropy ---------------------------------------------------------------------
typedef struct { int N, V; int *targets; double *logits, *losses; float smoothing; } ce_ctx;
static double ce_loss(void *p) {
    ce_ctx *c = p;
    be->crossentropy_forward(c->losses, NULL, c->logits, c->targets, c->N, c->V, c->V, c->smoothing);
    double s = 0.0;
    for (int i = 0; i < c->N; i++) s += c->losses[i];
    return 0.7 * s;
}
// With label smoothing s the loss of a row is -sum_v q_v log softmax_v, q = (1 - s) onehot + s / V.
static void test_crossentropy(int V, float smoothing) {
    int targets[] = {V > 3 ? 3 : 1, -1, 0, V - 1};
    ce_ctx c = {.N = 4, .V = V, .targets = targets, .smoothing = smoothing};
    c.logits = malloc(4 * V * 8), c.losses = malloc(4 * 8);
    double *dlogits = malloc(4 * V * 8);
    fill_random(c.logits, 4 * V, 21, -3, 3);
    be->crossentropy_backward(dlogits, c.logits, targets, c.N, V, V, 0.7f, smoothing);
    char what[96];
    snprintf(what, sizeof what, "cross-entropy V=%d smoothing %g (one row ignored) d logits", V, smoothing);
    check_input(what, ce_loss, &c, c.logits, 4 * V, dlogits);
    ce_loss(&c);
    // Independent value: -log softmax computed here directly.
    double z = 0.0;
    for (int v = 0; v < V; v++) z += exp(c.logits[v]);
    double expect = 0.0;
    for (int v = 0; v < V; v++)
        expect -= ((v == targets[0]) * (1.0 - smoothing) + (double)smoothing / V) * (c.logits[v] - log(z));
    expect_close("cross-entropy row 0 equals -sum q log softmax (q: smoothed one-hot)",
                 fabs(c.losses[0] - expect) / expect, 1e-12);
    expect_true("cross-entropy: ignored row has loss 0", c.losses[1] == 0.0);
    // In place: dlogits aliasing logits gives the same result.
    be->crossentropy_backward(c.logits, c.logits, targets, c.N, V, V, 0.7f, smoothing);
    expect_close("cross-entropy backward in place", rel_error(c.logits, dlogits, 4 * V), 0.0);
    free(c.logits), free(c.losses), free(dlogits);
}

// Rows padded from V to Vp columns (the model's padded vocabulary) whose padding holds a logit
// of 1e6, far above every class: losses, argmax hits and the class gradients equal those of
// the unpadded rows exactly (the same arithmetic on the same V values), padding gradients 0.
static void test_crossentropy_padded(int V, int Vp) {
    int N = 4, targets[] = {3, -1, 0, V - 1};
    double *x = malloc((size_t)N * V * 8), *xp = malloc((size_t)N * Vp * 8), *d = malloc((size_t)N * V * 8);
    double *dp = malloc((size_t)N * Vp * 8), loss[4], lossp[4];
    int hit[4], hitp[4];
    fill_random(x, N * V, 23, -3, 3);
    x[0 * V + 3] = 5.0;  // row 0: the target is the argmax
    for (int n = 0; n < N; n++)
        for (int v = 0; v < Vp; v++) xp[n * Vp + v] = v < V ? x[n * V + v] : 1e6;
    be->crossentropy_forward(loss, hit, x, targets, N, V, V, 0.0f);
    be->crossentropy_forward(lossp, hitp, xp, targets, N, V, Vp, 0.0f);
    be->crossentropy_backward(d, x, targets, N, V, V, 0.7f, 0.0f);
    be->crossentropy_backward(dp, xp, targets, N, V, Vp, 0.7f, 0.0f);
    int same = hit[0] == 1, pad_zero = 1;
    for (int n = 0; n < N; n++) {
        same &= loss[n] == lossp[n] && hit[n] == hitp[n];
        for (int v = 0; v < Vp; v++) {
            if (v < V) same &= d[n * V + v] == dp[n * Vp + v];
            else pad_zero &= dp[n * Vp + v] == 0.0;
        }
    }
    char what[96];
    snprintf(what, sizeof what, "cross-entropy V=%d padded to %d (padding logit 1e6): same losses, hits, gradients", V, Vp);
    expect_true(what, same);
    expect_true("cross-entropy: padding columns get gradient 0", pad_zero);
    free(x), free(xp), free(d), free(dp);
}

int main(void) {
    test_embeddings();
    test_layernorm(5, 8);
    test_layernorm(3, 72);
    test_matmul(7, 5, 9);
    test_matmul(3, 72, 13);
    test_attention(2, 7, 12, 3, 0.0f, 0);
    test_attention(3, 5, 8, 2, 0.2f, 0);
    test_attention(3, 5, 8, 2, 0.2f, 1);
    test_attention(4, 9, 12, 3, 0.1f, 1);
    test_pointwise();
    test_fused();
    test_gather();
    test_crossentropy(2, 0.0f);
    test_crossentropy(37, 0.0f);
    test_crossentropy(2, 0.1f);
    test_crossentropy(37, 0.25f);
    test_crossentropy_padded(37, 40);
    printf("%s\n", test_failures ? "FAILED" : "all op gradients agree with finite differences");
    return test_failures ? 1 : 0;
}
