// Every CUDA op, forward and backward, against the FP32 CPU reference, in the style of
// ggml's test-backend-ops: a table of cases with awkward shapes (T = 7, C = 72, NH = 3, rows
// that are not a multiple of a block, ignored targets, padding), run on both backends from
// the same inputs, compared by relative error ||cuda - cpu|| / ||cpu|| per output.
// Inputs are first rounded to the backend's activation type, so the comparison measures
// the kernels, not the rounding of the inputs. Every output buffer has guard bytes on both
// sides, checked after each op; NaN or inf in an output always fails. Parameter gradients
// start from random values on both sides, which checks that they accumulate (+=).
//
// Tolerances, per activation type (u = unit roundoff): FP32 1e-5 (FP32 arithmetic, sums
// in another order than the CPU's double accumulation: ~1e-7 seen), FP16 5e-3 (u = 2^-11;
// an op stores up to ~5 rounded intermediates, each adding ~u/sqrt(3) = 2.8e-4 relative),
// BF16 4e-2 (u = 2^-8, the same argument: ~2.3e-3 per rounding). A wrong kernel gives ~1.
//
// usage: test_cuda_ops_{emu,gpu} fp32|fp16|bf16 [--base]   (--base: BERT-base shapes too)
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <string>
#include <vector>
#include "kernels/backend.h"
#include "kernels/common/philox.h"
#ifdef TEST_REAL_GPU
#include <cuda_runtime_api.h>
#endif

enum precision { FP32, FP16, BF16 };
static precision prec;
static const backend_t *gpu;
static const backend_t *cpu = &backend_cpu;
static double tolerance;
static int failures = 0, checks = 0;
static const size_t GUARD = 256;

// ---- host-side values ----------------------------------------------------------------
static float round_act(float x) {
    if (prec == FP16) return __half2float(__float2half_rn(x));
    if (prec == BF16) return __bfloat162float(__float2bfloat16_rn(x));
    return x;
}
static std::vector<float> random_vec(size_t n, uint32_t site, float lo, float hi, bool act = true) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) {
        float x = lo + (hi - lo) * (float)(philox_draw(777, 1, site, i) / 4294967296.0);
        v[i] = act ? round_act(x) : x;
    }
    return v;
}

// ---- buffers with guards ---------------------------------------------------------------
enum kind { ACT, ACC, INT };
struct buffer {
    const backend_t *be;
    kind k;
    size_t n;
    char *base;  // allocation start; data at base + GUARD
    void *data() const { return base + GUARD; }
    size_t elem() const { return k == ACT ? be->act_size : k == ACC ? be->acc_size : sizeof(int); }
};

static std::vector<unsigned char> guard_pattern() {
    std::vector<unsigned char> g(GUARD);
    for (size_t i = 0; i < GUARD; i++) g[i] = (unsigned char)(0xA5 ^ (i * 7));
    return g;
}

static void encode(const backend_t *be, kind k, const float *src, void *dst, size_t n) {
    size_t es = k == ACT ? be->act_size : be->acc_size;
    for (size_t i = 0; i < n; i++) {
        if (es == 4)
            ((float *)dst)[i] = src[i];
        else if (prec == FP16)
            ((__half *)dst)[i] = __float2half_rn(src[i]);
        else
            ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
    }
}
static void decode(const backend_t *be, kind k, const void *src, float *dst, size_t n) {
    size_t es = k == ACT ? be->act_size : be->acc_size;
    for (size_t i = 0; i < n; i++) {
        if (es == 4)
            dst[i] = ((const float *)src)[i];
        else if (prec == FP16)
            dst[i] = __half2float(((const __half *)src)[i]);
        else
            dst[i] = __bfloat162float(((const __nv_bfloat16 *)src)[i]);
    }
}

static buffer make(const backend_t *be, kind k, size_t n) {
    buffer b{be, k, n, nullptr};
    size_t bytes = n * b.elem();
    b.base = (char *)be->alloc(bytes + 2 * GUARD);
    std::vector<unsigned char> g = guard_pattern();
    be->upload(b.base, g.data(), GUARD);
    be->upload(b.base + GUARD + bytes, g.data(), GUARD);
    return b;
}
static buffer make(const backend_t *be, kind k, const std::vector<float> &v) {
    buffer b = make(be, k, v.size());
    std::vector<char> tmp(v.size() * b.elem() + 1);
    encode(be, k, v.data(), tmp.data(), v.size());
    be->upload(b.data(), tmp.data(), v.size() * b.elem());
    return b;
}
static buffer make_ints(const backend_t *be, const std::vector<int> &v) {
    buffer b = make(be, INT, v.size());
    be->upload(b.data(), v.data(), v.size() * sizeof(int));
    return b;
}
static std::vector<float> read(const buffer &b, const std::string &what) {
    std::vector<char> tmp(b.n * b.elem() + 2 * GUARD);
    b.be->download(tmp.data(), b.base, tmp.size());
    std::vector<unsigned char> g = guard_pattern();
    if (memcmp(tmp.data(), g.data(), GUARD) || memcmp(tmp.data() + GUARD + b.n * b.elem(), g.data(), GUARD)) {
        printf("FAIL %-60s writes outside its buffer (guard bytes changed)\n", what.c_str());
        failures++;
    }
    std::vector<float> v(b.n);
    if (b.k == INT)
        for (size_t i = 0; i < b.n; i++) v[i] = (float)((int *)(tmp.data() + GUARD))[i];
    else
        decode(b.be, b.k, tmp.data() + GUARD, v.data(), b.n);
    return v;
}
static void release(buffer &b) { b.be->release(b.base); }

static void compare(const std::string &what, const buffer &got_b, const buffer &ref_b, double tol = -1) {
    if (tol < 0) tol = tolerance;
    std::vector<float> got = read(got_b, what + " [cuda]"), ref = read(ref_b, what + " [cpu]");
    double diff = 0.0, norm = 0.0;
    bool finite = true;
    for (size_t i = 0; i < got.size(); i++) {
        if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) finite = false;
        diff += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        norm += (double)ref[i] * ref[i];
    }
    double err = !finite ? INFINITY : norm == 0.0 ? (diff == 0.0 ? 0.0 : INFINITY) : sqrt(diff / norm);
    bool ok = err <= tol;
    checks++;
    if (!ok) failures++;
    printf("%s %-60s rel error %.3e (tolerance %.0e)\n", ok ? "ok  " : "FAIL", what.c_str(), err, tol);
}

// A pair of buffers, one per backend, from the same host values.
struct pair_buf {
    buffer g, c;
    void *G() const { return g.data(); }
    void *C() const { return c.data(); }
    int *Gi() const { return (int *)g.data(); }
    int *Ci() const { return (int *)c.data(); }
};
static pair_buf both(kind k, const std::vector<float> &v) { return {make(gpu, k, v), make(cpu, k, v)}; }
static pair_buf both(kind k, size_t n) { return {make(gpu, k, n), make(cpu, k, n)}; }
static pair_buf both_ints(const std::vector<int> &v) { return {make_ints(gpu, v), make_ints(cpu, v)}; }
static void check(const std::string &what, const pair_buf &p) { compare(what, p.g, p.c); }
static void release(pair_buf &p) {
    release(p.g);
    release(p.c);
}
template <typename... P>
static void release_all(P &...p) {
    (release(p), ...);
}

// Timing of the CUDA calls (printed with --base, the GPU suite's shapes): the stream is
// drained before and after each call by a small download, which waits for the stream.
static bool timing = false;
static buffer sync_buf;
static double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static void drain() {
    int scratch;
    gpu->download(&scratch, sync_buf.data(), sizeof scratch);
}
#define TIMED(call)                                                                 \
    do {                                                                            \
        if (timing) drain();                                                        \
        double t0_ = now_ms();                                                      \
        call;                                                                       \
        if (timing) {                                                               \
            drain();                                                                \
            printf("time %-56.56s %9.3f ms\n", #call, now_ms() - t0_);             \
        }                                                                           \
    } while (0)

static std::string tag(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static std::string tag(const char *op, const char *fmt, ...) {
    char shape[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(shape, sizeof shape, fmt, ap);
    va_end(ap);
    return std::string(op) + " " + shape;
}

// ---- op cases --------------------------------------------------------------------------
static void test_embeddings(int B, int T, int C, int V) {
    int N = B * T;
    std::vector<int> ids(N), seg(N);
    for (int n = 0; n < N; n++) {
        ids[n] = (int)(philox_draw(5, 0, 1, n) % V);
        seg[n] = (n % T) >= T / 2;
    }
    ids[1] = 0;  // padding tokens: no gradient for row 0 of wte
    ids[N - 1] = 0;
    ids[2] = ids[3];  // a repeated id within a sequence
    pair_buf pid = both_ints(ids), pseg = both_ints(seg);
    pair_buf wte = both(ACT, random_vec((size_t)V * C, 1, -1, 1)), wpe = both(ACT, random_vec((size_t)T * C, 2, -1, 1)),
             wtt = both(ACT, random_vec((size_t)2 * C, 3, -1, 1));
    pair_buf out = both(ACT, (size_t)N * C);
    TIMED(gpu->embeddings_forward(out.G(), pid.Gi(), pseg.Gi(), wte.G(), wpe.G(), wtt.G(), B, T, C));
    cpu->embeddings_forward(out.C(), pid.Ci(), pseg.Ci(), wte.C(), wpe.C(), wtt.C(), B, T, C);
    std::string s = tag("embeddings", "B=%d T=%d C=%d V=%d", B, T, C, V);
    check(s + " out", out);
    pair_buf dout = both(ACT, random_vec((size_t)N * C, 4, -1, 1));
    pair_buf dwte = both(ACC, random_vec((size_t)V * C, 5, -1, 1, false)),
             dwpe = both(ACC, random_vec((size_t)T * C, 6, -1, 1, false)),
             dwtt = both(ACC, random_vec((size_t)2 * C, 7, -1, 1, false));
    TIMED(gpu->embeddings_backward(dwte.G(), dwpe.G(), dwtt.G(), dout.G(), pid.Gi(), pseg.Gi(), 0, B, T, C));
    cpu->embeddings_backward(dwte.C(), dwpe.C(), dwtt.C(), dout.C(), pid.Ci(), pseg.Ci(), 0, B, T, C);
    check(s + " dwte", dwte);
    check(s + " dwpe", dwpe);
    check(s + " dwtt", dwtt);
    release_all(pid, pseg, wte, wpe, wtt, out, dout, dwte, dwpe, dwtt);
}

static void test_layernorm(int N, int C) {
    pair_buf inp = both(ACT, random_vec((size_t)N * C, 10, -2, 3)), w = both(ACT, random_vec(C, 11, 0.5, 1.5)),
             b = both(ACT, random_vec(C, 12, -0.5, 0.5));
    pair_buf out = both(ACT, (size_t)N * C), mean = both(ACC, N), rstd = both(ACC, N);
    TIMED(gpu->layernorm_forward(out.G(), mean.G(), rstd.G(), inp.G(), w.G(), b.G(), N, C, 1e-12f));
    cpu->layernorm_forward(out.C(), mean.C(), rstd.C(), inp.C(), w.C(), b.C(), N, C, 1e-12f);
    std::string s = tag("layernorm", "N=%d C=%d", N, C);
    check(s + " out", out);
    check(s + " mean", mean);
    check(s + " rstd", rstd);
    pair_buf dout = both(ACT, random_vec((size_t)N * C, 13, -1, 1)), dinp = both(ACT, (size_t)N * C);
    pair_buf dw = both(ACC, random_vec(C, 14, -1, 1, false)), db = both(ACC, random_vec(C, 15, -1, 1, false));
    // Both backends use their own saved statistics (as in the model).
    TIMED(gpu->layernorm_backward(dinp.G(), dw.G(), db.G(), dout.G(), inp.G(), w.G(), mean.G(), rstd.G(), N, C));
    cpu->layernorm_backward(dinp.C(), dw.C(), db.C(), dout.C(), inp.C(), w.C(), mean.C(), rstd.C(), N, C);
    check(s + " dinp", dinp);
    check(s + " dweight", dw);
    check(s + " dbias", db);
    release_all(inp, w, b, out, mean, rstd, dout, dinp, dw, db);
}

// add_mode: 0 no dinp_add, 1 dinp_add == dinp, 2 a separate dinp_add
static void test_matmul(int N, int IC, int OC, bool bias, int add_mode) {
    pair_buf inp = both(ACT, random_vec((size_t)N * IC, 20, -1, 1)),
             w = both(ACT, random_vec((size_t)OC * IC, 21, -0.5, 0.5)), b = both(ACT, random_vec(OC, 22, -1, 1));
    pair_buf out = both(ACT, (size_t)N * OC);
    TIMED(gpu->matmul_forward(out.G(), inp.G(), w.G(), bias ? b.G() : nullptr, N, IC, OC));
    cpu->matmul_forward(out.C(), inp.C(), w.C(), bias ? b.C() : nullptr, N, IC, OC);
    std::string s = tag("matmul", "N=%d IC=%d OC=%d bias=%d add=%d", N, IC, OC, bias, add_mode);
    check(s + " out", out);
    pair_buf dout = both(ACT, random_vec((size_t)N * OC, 23, -1, 1));
    pair_buf dinp = both(ACT, random_vec((size_t)N * IC, 24, -1, 1)), add = both(ACT, random_vec((size_t)N * IC, 25, -1, 1));
    pair_buf dw = both(ACC, random_vec((size_t)OC * IC, 26, -1, 1, false)), db = both(ACC, random_vec(OC, 27, -1, 1, false));
    const void *add_g = add_mode == 0 ? nullptr : add_mode == 1 ? dinp.G() : add.G();
    const void *add_c = add_mode == 0 ? nullptr : add_mode == 1 ? dinp.C() : add.C();
    TIMED(gpu->matmul_backward(dinp.G(), dw.G(), bias ? db.G() : nullptr, dout.G(), inp.G(), w.G(), add_g, N, IC, OC));
    cpu->matmul_backward(dinp.C(), dw.C(), bias ? db.C() : nullptr, dout.C(), inp.C(), w.C(), add_c, N, IC, OC);
    check(s + " dinp", dinp);
    check(s + " dweight", dw);
    if (bias) check(s + " dbias", db);
    release_all(inp, w, b, out, dout, dinp, add, dw, db);
}

static void test_attention(int B, int T, int C, int NH, float p) {
    int N = B * T;
    std::vector<int> mask(N);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) mask[b * T + t] = t < T - b * 2;  // sequence b has 2b padding keys
    pair_buf pm = both_ints(mask);
    pair_buf qkv = both(ACT, random_vec((size_t)N * 3 * C, 30, -1.5, 1.5));
    pair_buf out = both(ACT, (size_t)N * C), probs = both(ACT, (size_t)B * NH * T * T);
    dropout_t d = {p, 3, 17, 99};
    TIMED(gpu->attention_forward(out.G(), probs.G(), qkv.G(), pm.Gi(), B, T, C, NH, d));
    cpu->attention_forward(out.C(), probs.C(), qkv.C(), pm.Ci(), B, T, C, NH, d);
    std::string s = tag("attention", "B=%d T=%d C=%d NH=%d p=%.1f", B, T, C, NH, p);
    check(s + " out", out);
    check(s + " probs", probs);
    pair_buf dout = both(ACT, random_vec((size_t)N * C, 31, -1, 1)), dqkv = both(ACT, (size_t)N * 3 * C);
    TIMED(gpu->attention_backward(dqkv.G(), dout.G(), qkv.G(), probs.G(), B, T, C, NH, d));
    cpu->attention_backward(dqkv.C(), dout.C(), qkv.C(), probs.C(), B, T, C, NH, d);
    // The key bias aside, dq, dk and dv are all non-trivial; compare the three together.
    check(s + " dqkv", dqkv);
    release_all(pm, qkv, out, probs, dout, dqkv);
}

static void test_pointwise(int n, float p) {
    std::string s = tag("pointwise", "n=%d p=%.1f", n, p);
    pair_buf x = both(ACT, random_vec(n, 40, -4, 4)), r = both(ACT, random_vec(n, 41, -1, 1)),
             dout = both(ACT, random_vec(n, 42, -1, 1));
    pair_buf out = both(ACT, n), dinp = both(ACT, n);
    TIMED(gpu->gelu_forward(out.G(), x.G(), n));
    cpu->gelu_forward(out.C(), x.C(), n);
    check(s + " gelu", out);
    TIMED(gpu->gelu_backward(dinp.G(), dout.G(), x.G(), n));
    cpu->gelu_backward(dinp.C(), dout.C(), x.C(), n);
    check(s + " gelu backward", dinp);
    TIMED(gpu->tanh_forward(out.G(), x.G(), n));
    cpu->tanh_forward(out.C(), x.C(), n);
    check(s + " tanh", out);
    // tanh backward takes the forward's output: give both the same (the CPU's) values.
    std::vector<float> y = read(out.c, "tanh out");
    for (float &v : y) v = round_act(v);
    pair_buf yb = both(ACT, y);
    TIMED(gpu->tanh_backward(dinp.G(), dout.G(), yb.G(), n));
    cpu->tanh_backward(dinp.C(), dout.C(), yb.C(), n);
    check(s + " tanh backward", dinp);
    dropout_t d = {p, 7, 5, 1234};
    TIMED(gpu->dropout_residual_forward(out.G(), x.G(), r.G(), n, d));
    cpu->dropout_residual_forward(out.C(), x.C(), r.C(), n, d);
    check(s + " dropout + residual", out);
    TIMED(gpu->dropout_residual_forward(out.G(), x.G(), nullptr, n, d));
    cpu->dropout_residual_forward(out.C(), x.C(), nullptr, n, d);
    check(s + " dropout", out);
    TIMED(gpu->dropout_backward(dinp.G(), dout.G(), n, d));
    cpu->dropout_backward(dinp.C(), dout.C(), n, d);
    check(s + " dropout backward", dinp);
    release_all(x, r, dout, out, dinp, yb);
}

static void test_gather(int M, int C, std::vector<int> index) {
    int N = (int)index.size();
    std::string s = tag("gather", "N=%d M=%d C=%d", N, M, C);
    pair_buf idx = both_ints(index), inp = both(ACT, random_vec((size_t)M * C, 50, -1, 1));
    pair_buf out = both(ACT, (size_t)N * C), dout = both(ACT, random_vec((size_t)N * C, 51, -1, 1));
    pair_buf dinp = both(ACT, random_vec((size_t)M * C, 52, -1, 1));  // must be overwritten
    TIMED(gpu->gather_rows_forward(out.G(), inp.G(), idx.Gi(), N, C));
    cpu->gather_rows_forward(out.C(), inp.C(), idx.Ci(), N, C);
    check(s + " out", out);
    TIMED(gpu->gather_rows_backward(dinp.G(), dout.G(), idx.Gi(), N, M, C));
    cpu->gather_rows_backward(dinp.C(), dout.C(), idx.Ci(), N, M, C);
    check(s + " dinp", dinp);
    release_all(idx, inp, out, dout, dinp);
}

static void test_crossentropy(int N, int V) {
    std::string s = tag("crossentropy", "N=%d V=%d", N, V);
    std::vector<int> targets(N);
    for (int n = 0; n < N; n++) targets[n] = n % 5 == 3 ? -1 : (int)(philox_draw(9, 0, 2, n) % V);
    std::vector<float> logits = random_vec((size_t)N * V, 60, -6, 6);
    for (int n = 0; n < N; n += 4) logits[(size_t)n * V + targets[n] % V] = round_act(9.0f);  // some argmax hits
    pair_buf t = both_ints(targets), x = both(ACT, logits);
    pair_buf losses = both(ACC, N), correct = both_ints(std::vector<int>(N, 7));
    TIMED(gpu->crossentropy_forward(losses.G(), correct.Gi(), x.G(), t.Gi(), N, V));
    cpu->crossentropy_forward(losses.C(), correct.Ci(), x.C(), t.Ci(), N, V);
    check(s + " losses", losses);
    std::vector<float> cg = read(correct.g, s + " correct"), cc = read(correct.c, s + " correct");
    bool same = cg == cc;
    checks++;
    if (!same) failures++;
    printf("%s %-60s (argmax hits, exact)\n", same ? "ok  " : "FAIL", (s + " correct").c_str());
    pair_buf dx = both(ACT, (size_t)N * V);
    TIMED(gpu->crossentropy_backward(dx.G(), x.G(), t.Gi(), N, V, 0.37f));
    cpu->crossentropy_backward(dx.C(), x.C(), t.Ci(), N, V, 0.37f);
    check(s + " dlogits", dx);
    // In place, as the model calls it.
    TIMED(gpu->crossentropy_backward(x.G(), x.G(), t.Gi(), N, V, 0.37f));
    cpu->crossentropy_backward(x.C(), x.C(), t.Ci(), N, V, 0.37f);
    check(s + " dlogits in place", x);
    release_all(t, x, losses, correct, dx);
}

// LAMB is FP32 on every backend: tolerance 1e-5 (FP32 arithmetic against the CPU's double
// sums over 5 steps; ~1e-7 expected). Tensors: decayed, not decayed, one spanning several
// chunks of the CUDA kernels, and an all-zero one (trust ratio 1); clipping in some steps.
static void test_lamb() {
    std::vector<lamb_tensor> tensors = {{0, 15, 1}, {16, 7, 0}, {24, 40000, 1}, {40024, 6, 1}, {40032, 33, 0}};
    size_t n = 40072;
    std::vector<float> w = random_vec(n, 80, -0.2f, 0.2f, false);
    for (size_t k = 40024; k < 40030; k++) w[k] = 0.0f;
    pair_buf params = both(ACC, w), m = both(ACC, n), v = both(ACC, n);
    for (int step = 1; step <= 5; step++) {
        std::vector<float> g = random_vec(n, 90 + step, -1, 1, false);
        for (size_t k = 40024; k < 40030; k++) g[k] = 0.0f;
        pair_buf grads = both(ACC, g);
        // steps 1-2: the norm (~115 / 4) is clipped to 1; later steps: unclipped
        lamb_hyper h = {1e-2 * step, 0.9, 0.999, 1e-6, 0.01, step <= 2 ? 1.0 : 1e3, 4.0, step, nullptr};
        double ng = gpu->lamb_step((float *)params.G(), (float *)m.G(), (float *)v.G(), grads.G(), tensors.data(),
                                   (int)tensors.size(), h);
        double nc = cpu->lamb_step((float *)params.C(), (float *)m.C(), (float *)v.C(), grads.C(), tensors.data(),
                                   (int)tensors.size(), h);
        bool ok = fabs(ng - nc) <= 1e-5 * nc;
        checks++;
        if (!ok) failures++;
        printf("%s %-60s %.6f vs %.6f\n", ok ? "ok  " : "FAIL", tag("lamb", "step %d grad norm", step).c_str(), ng, nc);
        release(grads);
    }
    compare("lamb 5 steps params", params.g, params.c, 1e-5);
    compare("lamb 5 steps m", m.g, m.c, 1e-5);
    compare("lamb 5 steps v", v.g, v.c, 1e-5);
    // An overflow (inf in one gradient) leaves everything unchanged.
    std::vector<float> g(n, 0.5f);
    g[100] = INFINITY;
    pair_buf grads = both(ACC, g);
    std::vector<float> before = read(params.g, "lamb params");
    lamb_hyper h = {1e-2, 0.9, 0.999, 1e-6, 0.01, 1.0, 1.0, 6, nullptr};
    double norm = gpu->lamb_step((float *)params.G(), (float *)m.G(), (float *)v.G(), grads.G(), tensors.data(),
                                 (int)tensors.size(), h);
    bool unchanged = read(params.g, "lamb params") == before && !std::isfinite(norm);
    checks++;
    if (!unchanged) failures++;
    printf("%s %-60s\n", unchanged ? "ok  " : "FAIL", "lamb overflow: norm not finite, parameters unchanged");
    release_all(params, m, v, grads);
}

static void test_params_to_compute(size_t n) {
    std::vector<float> master = random_vec(n, 70, -3, 3, false);
    buffer m = make(gpu, ACC, master), out = make(gpu, ACT, n);
    TIMED(gpu->params_to_compute(out.data(), (const float *)m.data(), n));
    std::vector<float> got = read(out, "params_to_compute");
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != round_act(master[i]);
    checks++;
    if (bad) failures++;
    printf("%s %-60s %d elements differ from round-to-nearest (exact)\n", bad ? "FAIL" : "ok  ",
           tag("params_to_compute", "n=%zu", n).c_str(), bad);
    release(m);
    release(out);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s fp32|fp16|bf16 [--base]\n", argv[0]);
        return 2;
    }
    bool base = argc > 2 && !strcmp(argv[2], "--base");
    std::string p = argv[1];
#ifdef TEST_REAL_GPU
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("SKIP: no CUDA GPU visible to this process\n");
        return 77;
    }
    const backend_t *tables[] = {&backend_cuda_fp32, &backend_cuda_fp16, &backend_cuda_bf16};
#else
    const backend_t *tables[] = {&backend_cuda_emu_fp32, &backend_cuda_emu_fp16, &backend_cuda_emu_bf16};
#endif
    if (p == "fp32") prec = FP32, tolerance = 1e-5;
    else if (p == "fp16") prec = FP16, tolerance = 5e-3;
    else if (p == "bf16") prec = BF16, tolerance = 4e-2;
    else {
        fprintf(stderr, "unknown precision '%s' (fp32, fp16 or bf16)\n", p.c_str());
        return 2;
    }
    gpu = tables[prec];
    printf("backend %s against %s\n", gpu->name, cpu->name);

    test_params_to_compute(1000);
    test_lamb();
    test_embeddings(2, 7, 72, 37);
    test_embeddings(3, 33, 40, 101);
    test_layernorm(14, 72);
    test_layernorm(99, 40);
    test_matmul(14, 72, 216, true, 0);
    test_matmul(14, 72, 216, true, 1);
    test_matmul(33, 40, 24, false, 2);
    test_matmul(7, 72, 37, true, 2);
    test_attention(2, 7, 72, 3, 0.0f);
    test_attention(2, 7, 72, 3, 0.3f);
    test_attention(3, 33, 40, 5, 0.1f);
    test_pointwise(1000, 0.1f);
    test_pointwise(77, 0.5f);
    test_gather(14, 72, {3, 0, 13, 7, 7, 1});
    test_gather(40, 24, {5, 10, 15, 20, 25, 30, 35, 0, 39});
    test_crossentropy(9, 37);
    test_crossentropy(6, 1000);
    test_crossentropy(4, 2);
    if (base) {
        timing = true;
        sync_buf = make(gpu, INT, 1);
        // BERT-base shapes (GPU suite): B=4 T=128 C=768 NH=12 I=3072 V=30528.
        test_embeddings(4, 128, 768, 30528);
        test_layernorm(512, 768);
        test_matmul(512, 768, 2304, true, 0);
        test_matmul(512, 3072, 768, true, 1);
        test_matmul(512, 768, 3072, true, 2);
        test_attention(4, 128, 768, 12, 0.1f);
        test_pointwise(512 * 3072, 0.1f);
        test_gather(512, 768, {1, 5, 9, 100, 200, 300, 400, 511, 0, 128, 256, 384});
        test_crossentropy(80, 30528);
    }
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
