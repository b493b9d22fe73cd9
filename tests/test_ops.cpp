// Every op, forward and backward, after ggml's test-backend-ops: each case is described once
// (op, shape, parameters, the calls it makes through the backend table) and run in one of
// two modes.
//
// Compare mode (test_cuda_ops_{emu,gpu} fp32|fp16|bf16): the CUDA op against the FP32 CPU
// reference, both from the same host inputs; one place (run_compare) compares what the two
// runs marked as outputs, by relative error ||cuda - cpu|| / ||cpu||, and counts the results.
// Shapes are awkward on purpose (T = 7, C = 72, NH = 3, rows that are not a multiple of a
// block, ignored targets, padding). Inputs are first rounded to the backend's activation
// type, so the comparison measures the kernels, not the rounding of the inputs. Parameter
// gradients start from random values on both sides, which checks that they accumulate (+=).
// Tolerances, per activation type (u = unit roundoff): FP32 1e-5 (FP32 arithmetic, sums
// in another order than the CPU's double accumulation: ~1e-7 seen), FP16 5e-3 (u = 2^-11;
// an op stores up to ~5 rounded intermediates, each adding ~u/sqrt(3) = 2.8e-4 relative),
// BF16 4e-2 (u = 2^-8, the same argument: ~2.3e-3 per rounding). A wrong kernel gives ~1.
//
// Gradient mode (test_ops_grad): the cases small enough for finite differences, on the CPU
// sources built in double ("cpu64"). A case names the dout its backward takes as the
// cotangent of a forward output, so that its forward defines f = sum(out * dout); after the
// backward it names the buffer that holds the gradient of an input. Each element of that
// input is moved by +-h and the whole case run again: the gradient must equal the central
// difference (f(x + h) - f(x - h)) / 2h. Tolerance 1e-6 relative: with h = 1e-5 in double the
// truncation error is of order h^2 |f'''| ~ 1e-10 and the rounding error of order
// 1e-16 / h ~ 1e-11, so a correct backward lands near 1e-9 and a wrong one near 1.
//
// In both modes every buffer a case makes has guard bytes on both sides, checked after the
// case; NaN or inf in an output always fails; each op of the table must be called by a case.
//
// usage: test_cuda_ops_{emu,gpu} fp32|fp16|bf16 [--base] [-o OP[,OP...]] [--past-positions cpu|cuda]
//        test_ops_grad grad [-o OP[,OP...]]
//   --base: BERT-base shapes too, with the time of every CUDA call (the GPU suite)
//   --past-positions: only the embeddings forward of sequences of 9 tokens with a position
//     table of 8 rows, on that backend: it must stop with an error (test op_bounds), never
//     read the memory after the table; returning is a failure (exit 3)
//   -o:     only the cases of these ops (names as printed, e.g. layernorm, attention)
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>
#include "kernels/backend.h"
#include "kernels/common/clock.h"
#include "kernels/common/philox.h"
#include "tests/test_util.h"
#ifdef TEST_OPS_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif
#ifdef TEST_REAL_GPU
#include <cuda_runtime_api.h>
#include "tests/gpu_required.h"
#endif

enum precision { FP32, FP16, BF16 };
static precision prec;
static const backend_t *gpu;  // compare mode: the CUDA table
static double tolerance;
static const size_t GUARD = 256;
static const double GRAD_H = 1e-5, GRAD_TOL = 1e-6;

// ---- host-side values ----------------------------------------------------------------
static float round_act(float x) {
#ifdef TEST_OPS_CUDA
    if (prec == FP16) return __half2float(__float2half_rn(x));
    if (prec == BF16) return __bfloat162float(__float2bfloat16_rn(x));
#endif
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

// Host values to and from a backend's element type: double (cpu64), float, FP16 or BF16.
static void encode(size_t es, const float *src, void *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (es == 8) ((double *)dst)[i] = src[i];
        else if (es == 4) ((float *)dst)[i] = src[i];
#ifdef TEST_OPS_CUDA
        else if (prec == FP16) ((__half *)dst)[i] = __float2half_rn(src[i]);
        else ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
#endif
    }
}
static void decode(size_t es, const void *src, double *dst, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (es == 8) dst[i] = ((const double *)src)[i];
        else if (es == 4) dst[i] = ((const float *)src)[i];
#ifdef TEST_OPS_CUDA
        else if (prec == FP16) dst[i] = __half2float(((const __half *)src)[i]);
        else dst[i] = __bfloat162float(((const __nv_bfloat16 *)src)[i]);
#endif
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
static void fill(const buffer &b, const std::vector<float> &v) {
    if (b.k == INT) {
        std::vector<int> iv(v.begin(), v.end());
        b.be->upload(b.data(), iv.data(), v.size() * sizeof(int));
        return;
    }
    std::vector<char> tmp(v.size() * b.elem() + 1);
    encode(b.elem(), v.data(), tmp.data(), v.size());
    b.be->upload(b.data(), tmp.data(), v.size() * b.elem());
}
static bool guards_intact(const buffer &b) {
    std::vector<char> tmp(b.n * b.elem() + 2 * GUARD);
    b.be->download(tmp.data(), b.base, tmp.size());
    std::vector<unsigned char> g = guard_pattern();
    return !memcmp(tmp.data(), g.data(), GUARD) && !memcmp(tmp.data() + GUARD + b.n * b.elem(), g.data(), GUARD);
}
static std::vector<double> read(const buffer &b) {
    std::vector<char> tmp(b.n * b.elem() + 1);
    b.be->download(tmp.data(), b.data(), b.n * b.elem());
    std::vector<double> v(b.n);
    if (b.k == INT)
        for (size_t i = 0; i < b.n; i++) v[i] = ((int *)tmp.data())[i];
    else
        decode(b.elem(), tmp.data(), v.data(), b.n);
    return v;
}

// ---- one run of a case on one backend ---------------------------------------------------
// A case asks its context for inputs and outputs; the context makes them on its backend,
// remembers which ones to compare, and frees them all afterwards.
struct output {
    std::string name;
    size_t buf;  // index into ctx::bufs
    double tol;
};
struct scalar {
    std::string name;
    double value, tol;
};
// Gradient mode: the buffer `name` held grad (base + df/dx) after the backward, x = bufs[input].
struct gradient_of {
    std::string name;
    size_t input;
    std::vector<double> grad;
    std::vector<float> base;  // empty: 0
};
struct ctx {
    const backend_t *be;
    bool timed = false;  // print the time of each call (the CUDA run with --base)
    bool grad = false;   // a gradient-mode run: the loss f and the gradients are recorded
    // A run of the finite differences: element probe_elem of bufs[probe_buf] (an input) is
    // moved by probe_delta; only f is wanted.
    long probe_buf = -1;
    size_t probe_elem = 0;
    double probe_delta = 0.0, f = 0.0;
    std::vector<buffer> bufs;
    std::vector<output> outputs;
    std::vector<scalar> scalars;
    std::vector<std::pair<std::string, bool>> flags;
    std::vector<gradient_of> grads;

    explicit ctx(const backend_t *backend) : be(backend) {}
    buffer &make_buf(kind k, size_t n) {
        bufs.push_back(make(be, k, n));
        return bufs.back();
    }
    // An input from host values (activations are rounded to the backend's type on upload).
    void *in(kind k, const std::vector<float> &v) {
        buffer &b = make_buf(k, v.size());
        fill(b, v);
        if (probe_buf == (long)bufs.size() - 1) {
            double e;
            char *p = (char *)b.data() + probe_elem * sizeof e;
            be->download(&e, p, sizeof e);
            e += probe_delta;
            be->upload(p, &e, sizeof e);
        }
        return b.data();
    }
    int *ints(const std::vector<int> &v) { return (int *)in(INT, std::vector<float>(v.begin(), v.end())); }
    // An output, zero-filled (tol < 0: the precision's tolerance; 0: exact).
    void *out(const std::string &name, kind k, size_t n, double tol = -1) {
        make_buf(k, n);
        outputs.push_back({name, bufs.size() - 1, tol < 0 ? tolerance : tol});
        return bufs.back().data();
    }
    // An output that starts from host values (accumulated gradients, in-place ops).
    void *inout(const std::string &name, kind k, const std::vector<float> &v, double tol = -1) {
        void *p = out(name, k, v.size(), tol);
        fill(bufs.back(), v);
        return p;
    }
    int *out_ints(const std::string &name, const std::vector<int> &v) {
        return (int *)inout(name, INT, std::vector<float>(v.begin(), v.end()), 0.0);
    }
    // A number both backends return, compared as |cuda - cpu| <= tol |cpu|.
    void value(const std::string &name, double v, double tol) { scalars.push_back({name, v, tol}); }
    // A property that must hold on each backend.
    void expect(const std::string &name, bool ok) { flags.push_back({name, ok}); }
    size_t index(const void *p) const {
        for (size_t i = 0; i < bufs.size(); i++)
            if (bufs[i].data() == p) return i;
        fprintf(stderr, "test_ops: a buffer the case did not make\n");
        exit(2);
    }
    std::vector<double> contents(const void *p) const { return read(bufs[index(p)]); }

    // The dout of a forward output `of`, an input of the backward. Gradient mode: the loss f
    // gains sum(of * dout), so the backward's results are the gradients of f.
    void *cotangent(const void *of, const std::vector<float> &dout) {
        if (grad) {
            std::vector<double> o = contents(of);
            for (size_t i = 0; i < o.size(); i++) f += o[i] * dout[i];
        }
        return in(ACT, dout);
    }
    // A forward output that enters f with the weight w (a backward that takes a scale, not a dout).
    void loss(const void *of, double w) {
        if (grad)
            for (double o : contents(of)) f += w * o;
    }
    // After a backward: buffer g holds base + df/d`of` (base: what g held before and the
    // backward adds to, or what it was given to add; empty: nothing). Gradient mode only.
    void gradient(const std::string &name, const void *g, const void *of, const std::vector<float> &base = {}) {
        if (grad && probe_buf < 0) grads.push_back({name, index(of), contents(g), base});
    }
};

// Timing of the CUDA calls (printed with --base, the GPU suite's shapes): the stream is
// drained before and after each call by a small download, which waits for the stream.
static buffer sync_buf;
static double now_ms() { return now_seconds() * 1e3; }
static void drain() {
    int scratch;
    gpu->download(&scratch, sync_buf.data(), sizeof scratch);
}
#define TIMED(x, call)                                                              \
    do {                                                                            \
        if ((x).timed) drain();                                                     \
        double t0_ = now_ms();                                                      \
        call;                                                                       \
        if ((x).timed) {                                                            \
            drain();                                                                \
            printf("time %-56.56s %9.3f ms\n", #call, now_ms() - t0_);             \
        }                                                                           \
    } while (0)

static std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static std::string fmt(const char *f, ...) {
    char text[160];
    va_list ap;
    va_start(ap, f);
    vsnprintf(text, sizeof text, f, ap);
    va_end(ap);
    return text;
}

// ---- the case table and the one place that counts ---------------------------------------
// grad: small enough for the finite differences (each element of each input whose gradient
// the case names costs two runs of the whole case); such cases run in both modes.
struct op_case {
    std::string op, params;
    std::function<void(ctx &)> body;
    bool grad;
};
static std::vector<op_case> cases;
static bool grad_sized = false;  // the cases added now are run in gradient mode too
static void add(const char *op, const std::string &params, std::function<void(ctx &)> body) {
    cases.push_back({op, params, std::move(body), grad_sized});
}

static int checks = 0, failures = 0;
static void report(bool ok, const std::string &what, const std::string &detail) {
    checks++;
    if (!ok) failures++;
    printf("%s %-60s %s\n", ok ? "ok  " : "FAIL", what.c_str(), detail.c_str());
}

// After a run: its guard bytes and its properties; then its buffers freed.
static void check_guards(const ctx &x, const std::string &what) {
    for (const buffer &b : x.bufs)
        if (!guards_intact(b)) {
            report(false, what, "writes outside a buffer (guard bytes changed)");
            break;
        }
}
static void report_flags(const ctx &x, const std::string &what, const std::string &tag) {
    for (auto &f : x.flags) report(f.second, what + " " + f.first + tag, "");
}
static void release_all(ctx &x) {
    for (buffer &b : x.bufs) b.be->release(b.base);
    x.bufs.clear();
}

#ifdef TEST_OPS_CUDA
static const backend_t *cpu = &backend_cpu;
static bool timing = false;

static void run_compare(const op_case &c) {
    std::string s = c.op + " " + c.params;
    ctx g{gpu}, r{cpu};
    g.timed = timing;
    c.body(g);
    c.body(r);
    check_guards(g, s + " [cuda]");
    check_guards(r, s + " [cpu]");
    if (g.outputs.size() != r.outputs.size() || g.scalars.size() != r.scalars.size()) {
        report(false, s, "the two runs made different outputs");
    } else {
        for (size_t i = 0; i < g.outputs.size(); i++) {
            const output &o = g.outputs[i];
            std::vector<double> got = read(g.bufs[o.buf]), ref = read(r.bufs[r.outputs[i].buf]);
            double err = rel_error(got.data(), ref.data(), got.size());
            report(err <= o.tol, s + " " + o.name,
                   o.tol == 0.0 ? fmt("rel error %.3e (exact)", err) : fmt("rel error %.3e (tolerance %.0e)", err, o.tol));
        }
        for (size_t i = 0; i < g.scalars.size(); i++) {
            double a = g.scalars[i].value, b = r.scalars[i].value;
            report(fabs(a - b) <= g.scalars[i].tol * fabs(b), s + " " + g.scalars[i].name, fmt("%.6f vs %.6f", a, b));
        }
    }
    report_flags(g, s, " [cuda]");
    report_flags(r, s, " [cpu]");
    release_all(g);
    release_all(r);
}
#else

// Gradient mode: one run for the gradients the case names, then two runs per element of each
// of their inputs, that element moved by +-h.
static void run_grad(const op_case &c, const backend_t *be) {
    std::string s = c.op + " " + c.params;
    ctx r{be};
    r.grad = true;
    c.body(r);
    check_guards(r, s);
    report_flags(r, s, "");
    if (r.grads.empty()) report(false, s, "a gradient-mode case that names no gradient");
    for (const gradient_of &g : r.grads) {
        size_t n = r.bufs[g.input].n;
        if (g.grad.size() != n) {
            report(false, s + " " + g.name, "the gradient and its input differ in size");
            continue;
        }
        std::vector<double> numeric(n), analytic(n);
        for (size_t i = 0; i < n; i++) {
            double fs[2];
            for (int k = 0; k < 2; k++) {
                ctx p{be};
                p.grad = true, p.probe_buf = (long)g.input, p.probe_elem = i, p.probe_delta = k ? -GRAD_H : GRAD_H;
                c.body(p);
                fs[k] = p.f;
                release_all(p);
            }
            numeric[i] = (fs[0] - fs[1]) / (2 * GRAD_H);
            analytic[i] = g.grad[i] - (g.base.empty() ? 0.0 : g.base[i]);
        }
        double err = rel_error(analytic.data(), numeric.data(), n);
        report(err <= GRAD_TOL, s + " " + g.name + " = finite differences",
               fmt("rel error %.3e (tolerance %.0e)", err, GRAD_TOL));
    }
    release_all(r);
}
#endif

// ---- which ops of the table the cases call ----------------------------------------------
// The table the cases run on (the CUDA one, or cpu64 in gradient mode), with every op of
// BACKEND_OPS (kernels/backend.h) passing through a wrapper that notes its name: after a
// full run, each op the backend has must have been called by some case.
static backend_t watched_inner;
static std::set<std::string> called_ops;
template <auto Member>
struct watched;
template <typename R, typename... Args, R (*backend_t::*Member)(Args...)>
struct watched<Member> {
    static const char *name;
    static R call(Args... args) {
        called_ops.insert(name);
        return (watched_inner.*Member)(args...);
    }
};
template <typename R, typename... Args, R (*backend_t::*Member)(Args...)>
const char *watched<Member>::name;
static const backend_t *watch_ops(const backend_t *be) {
    static backend_t outer;
    watched_inner = outer = *be;
#define WATCH(member)                                                 \
    if (be->member) {                                                 \
        watched<&backend_t::member>::name = #member;                  \
        outer.member = watched<&backend_t::member>::call;             \
    }
    BACKEND_OPS(WATCH)
#undef WATCH
    return &outer;
}

// ---- op cases --------------------------------------------------------------------------
// mask_every > 0: every mask_every-th token is id 4 (as [MASK] in a batch), a run of rows
// long enough that the CUDA scatter splits it into pieces; segments are long runs too.
// positions: the rows are unpadded, with the positions of sequences of lengths T, T - 3, ...
// pad_id: the backward's (0, the model's, or -1: every row gets its gradient, as finite
// differences see it; then also pad_id 0 from zero: the pad row nothing, the others the same).
static void embeddings_case(int B, int T, int C, int V, int mask_every = 0, bool positions = false, int pad_id = 0) {
    std::vector<int> pos;
    for (int b = 0; b < B && positions; b++)
        for (int t = 0; t < (T - 3 * b > 1 ? T - 3 * b : 1); t++) pos.push_back(t);
    int N = positions ? (int)pos.size() : B * T;
    std::vector<int> ids(N), seg(N);
    for (int n = 0; n < N; n++) {
        ids[n] = mask_every && n % mask_every == 0 ? 4 : (int)(philox_draw(5, 0, 1, n) % V);
        seg[n] = (n % T) >= T / 2;
    }
    ids[1] = 0;  // padding tokens: no gradient for row 0 of wte
    ids[N - 1] = 0;
    ids[2] = ids[3];  // a repeated id within a sequence
    add("embeddings", fmt("B=%d T=%d C=%d V=%d mask_every=%d positions=%d pad_id=%d", B, T, C, V, mask_every,
                          positions, pad_id), [=](ctx &x) {
        const backend_t *be = x.be;
        int *id = x.ints(ids), *sg = x.ints(seg), *ps = positions ? x.ints(pos) : nullptr;
        void *wte = x.in(ACT, random_vec((size_t)V * C, 1, -1, 1)), *wpe = x.in(ACT, random_vec((size_t)T * C, 2, -1, 1)),
             *wtt = x.in(ACT, random_vec((size_t)2 * C, 3, -1, 1));
        void *out = x.out("out", ACT, (size_t)N * C);
        TIMED(x, be->embeddings_forward(out, id, sg, ps, wte, wpe, wtt, N, T, T, C));
        void *dout = x.cotangent(out, random_vec((size_t)N * C, 4, -1, 1));
        std::vector<float> init_te = random_vec((size_t)V * C, 5, -1, 1, false),
                           init_pe = random_vec((size_t)T * C, 6, -1, 1, false),
                           init_tt = random_vec((size_t)2 * C, 7, -1, 1, false);
        void *dwte = x.inout("dwte", ACC, init_te), *dwpe = x.inout("dwpe", ACC, init_pe),
             *dwtt = x.inout("dwtt", ACC, init_tt);
        // The backward takes the host's copies of the ids (backend.h).
        const int *hpos = positions ? pos.data() : nullptr;
        TIMED(x, be->embeddings_backward(dwte, dwpe, dwtt, dout, ids.data(), seg.data(), hpos, pad_id, N, T, T, C));
        x.gradient("dwte", dwte, wte, init_te);
        x.gradient("dwpe", dwpe, wpe, init_pe);
        x.gradient("dwtt", dwtt, wtt, init_tt);
        if (pad_id >= 0) return;
        void *all = x.out("dwte from 0", ACC, (size_t)V * C), *padded = x.out("dwte pad_id 0", ACC, (size_t)V * C);
        void *pe = x.make_buf(ACC, (size_t)T * C).data(), *tt = x.make_buf(ACC, (size_t)2 * C).data();
        be->embeddings_backward(all, pe, tt, dout, ids.data(), seg.data(), hpos, -1, N, T, T, C);
        be->embeddings_backward(padded, pe, tt, dout, ids.data(), seg.data(), hpos, 0, N, T, T, C);
        std::vector<double> a = x.contents(all), p = x.contents(padded);
        bool pad_row_zero = std::all_of(p.begin(), p.begin() + C, [](double v) { return v == 0.0; });
        x.expect("pad_id 0: no gradient into the pad row, the others unchanged",
                 pad_row_zero && std::equal(p.begin() + C, p.end(), a.begin() + C));
    });
}

// bias = false: a LayerNorm without bias (ModernBERT's), NULL bias and dbias. add_mode (the
// backward's dinp_add, a residual's other gradient): 0 none, 1 dinp_add == dinp, 2 a separate one.
static void layernorm_case(int N, int C, bool bias = true, int add_mode = 0) {
    add("layernorm", fmt("N=%d C=%d%s%s", N, C, bias ? "" : " no bias", add_mode ? fmt(" add=%d", add_mode).c_str() : ""),
        [=](ctx &x) {
        const backend_t *be = x.be;
        void *inp = x.in(ACT, random_vec((size_t)N * C, 10, -2, 3)), *w = x.in(ACT, random_vec(C, 11, 0.5, 1.5)),
             *b = bias ? x.in(ACT, random_vec(C, 12, -0.5, 0.5)) : nullptr;
        void *out = x.out("out", ACT, (size_t)N * C), *mean = x.out("mean", ACC, N), *rstd = x.out("rstd", ACC, N);
        TIMED(x, be->layernorm_forward(out, mean, rstd, inp, w, b, N, C, 1e-12f));
        // Each backend uses its own saved statistics (as in the model).
        void *dout = x.cotangent(out, random_vec((size_t)N * C, 13, -1, 1));
        std::vector<float> init_x = random_vec((size_t)N * C, 16, -1, 1), adds = random_vec((size_t)N * C, 17, -1, 1);
        void *dinp = x.inout("dinp", ACT, init_x), *add = x.in(ACT, adds);
        std::vector<float> init_w = random_vec(C, 14, -1, 1, false), init_b = random_vec(C, 15, -1, 1, false);
        void *dw = x.inout("dweight", ACC, init_w), *db = bias ? x.inout("dbias", ACC, init_b) : nullptr;
        const void *dinp_add = add_mode == 0 ? nullptr : add_mode == 1 ? dinp : add;
        TIMED(x, be->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, dinp_add, N, C));
        // dinp = the gradient plus what was given to add.
        x.gradient("dinp", dinp, inp, add_mode == 0 ? std::vector<float>() : add_mode == 1 ? init_x : adds);
        x.gradient("dweight", dw, w, init_w);
        if (bias) x.gradient("dbias", db, b, init_b);
    });
}

// Token embeddings alone (no position or segment table: NULL wpe, wtt and their gradients).
static void token_embeddings_case(int N, int T, int C, int V, int pad_id) {
    std::vector<int> ids(N), seg(N, 0);
    for (int n = 0; n < N; n++) ids[n] = (int)(philox_draw(8, 0, 1, n) % V);
    ids[0] = pad_id >= 0 ? pad_id : 0;
    add("embeddings", fmt("N=%d C=%d V=%d tokens only pad_id=%d", N, C, V, pad_id), [=](ctx &x) {
        const backend_t *be = x.be;
        int *id = x.ints(ids), *sg = x.ints(seg);
        void *wte = x.in(ACT, random_vec((size_t)V * C, 1, -1, 1));
        void *out = x.out("out", ACT, (size_t)N * C);
        TIMED(x, be->embeddings_forward(out, id, sg, nullptr, wte, nullptr, nullptr, N, T, T, C));
        void *dout = x.cotangent(out, random_vec((size_t)N * C, 4, -1, 1));
        std::vector<float> init_te = random_vec((size_t)V * C, 5, -1, 1, false);
        void *dwte = x.inout("dwte", ACC, init_te);
        TIMED(x, be->embeddings_backward(dwte, nullptr, nullptr, dout, ids.data(), seg.data(), nullptr, pad_id, N, T, T,
                                         C));
        x.gradient("dwte", dwte, wte, init_te);
    });
}

// RoPE in place on the queries and keys of qkv[N,3C] (positions: the unpadded layout, sequences
// of lengths T, T - 2, ...; else n % T), forward and backward; the values pass unchanged.
static void rope_case(int N, int T, int C, int NH, float theta, bool positions) {
    std::vector<int> pos;
    for (int n = 0, len = T; positions && n < N; n++) {
        pos.push_back((int)pos.size() ? (pos.back() + 1 < len ? pos.back() + 1 : 0) : 0);
        if (pos.back() == 0 && n) len = len > 3 ? len - 2 : T;
    }
    add("rope", fmt("N=%d T=%d C=%d NH=%d theta=%g%s", N, T, C, NH, theta, positions ? " positions" : ""),
        [=](ctx &x) {
            const backend_t *be = x.be;
            size_t n = (size_t)N * 3 * C, bytes = n * be->act_size;
            int *ps = positions ? x.ints(pos) : nullptr;
            void *in = x.in(ACT, random_vec(n, 90, -2, 2)), *out = x.out("out", ACT, n);
            std::vector<char> copy(bytes);
            be->download(copy.data(), in, bytes);
            be->upload(out, copy.data(), bytes);
            TIMED(x, be->rope_forward(out, ps, N, T, C, NH, theta));
            void *dout = x.cotangent(out, random_vec(n, 91, -1, 1)), *dqkv = x.out("dqkv", ACT, n);
            be->download(copy.data(), dout, bytes);
            be->upload(dqkv, copy.data(), bytes);
            TIMED(x, be->rope_backward(dqkv, positions ? pos.data() : nullptr, N, T, C, NH, theta));
            x.gradient("dqkv", dqkv, in);
        });
}

static void geglu_case(int N, int I, gelu_kind act) {
    add("geglu", fmt("N=%d I=%d %s", N, I, act == GELU_TANH ? "tanh" : "erf"), [=](ctx &x) {
        void *in = x.in(ACT, random_vec((size_t)N * 2 * I, 92, -3, 3));
        void *out = x.out("out", ACT, (size_t)N * I), *dinp = x.out("dinp", ACT, (size_t)N * 2 * I);
        TIMED(x, x.be->geglu_forward(out, in, N, I, act));
        void *dout = x.cotangent(out, random_vec((size_t)N * I, 93, -1, 1));
        TIMED(x, x.be->geglu_backward(dinp, dout, in, N, I, act));
        x.gradient("dinp", dinp, in);
    });
}

// add_mode: 0 no dinp_add, 1 dinp_add == dinp, 2 a separate dinp_add
static void matmul_case(int N, int IC, int OC, bool bias, int add_mode) {
    add("matmul", fmt("N=%d IC=%d OC=%d bias=%d add=%d", N, IC, OC, bias, add_mode), [=](ctx &x) {
        const backend_t *be = x.be;
        void *inp = x.in(ACT, random_vec((size_t)N * IC, 20, -1, 1)),
             *w = x.in(ACT, random_vec((size_t)OC * IC, 21, -0.5, 0.5)), *b = x.in(ACT, random_vec(OC, 22, -1, 1));
        void *out = x.out("out", ACT, (size_t)N * OC);
        TIMED(x, be->matmul_forward(out, inp, w, bias ? b : nullptr, N, IC, OC));
        void *dout = x.cotangent(out, random_vec((size_t)N * OC, 23, -1, 1));
        std::vector<float> init_x = random_vec((size_t)N * IC, 24, -1, 1), adds = random_vec((size_t)N * IC, 25, -1, 1),
                           init_w = random_vec((size_t)OC * IC, 26, -1, 1, false), init_b = random_vec(OC, 27, -1, 1, false);
        void *dinp = x.inout("dinp", ACT, init_x), *add = x.in(ACT, adds);
        void *dw = x.inout("dweight", ACC, init_w);
        void *db = bias ? x.inout("dbias", ACC, init_b) : nullptr;
        const void *dinp_add = add_mode == 0 ? nullptr : add_mode == 1 ? dinp : add;
        TIMED(x, be->matmul_backward(dinp, dw, db, dout, inp, w, dinp_add, N, IC, OC));
        // dinp = dout W + dinp_add: the gradient plus what was given to add.
        x.gradient("dinp", dinp, inp, add_mode == 0 ? std::vector<float>() : add_mode == 1 ? init_x : adds);
        x.gradient("dweight", dw, w, init_w);
        if (bias) x.gradient("dbias", db, b, init_b);
    });
}

// Sequences of several lengths in one batch, given by their offsets (kernels/backend.h):
// sequence 0 is full, sequence b > 0 has 2b padding keys at its end (at least 2 real
// tokens), and with T > 64 the last sequence is shorter than T / 2, so the fused kernels
// skip whole key tiles. Padded: rows b*T + i, every row a query; packed: only the real
// tokens' rows exist. FP16/BF16 with head size 32, 64 or 128 run the fused tensor-core
// kernels (flash_attention.cu), every other case the GEMM path. repeat: the backward runs
// a second time into another buffer, which must hold the same bits (the fused backward sums
// dq's partials in a fixed order: no atomics, nothing that depends on timing).
// doc_len > 0: every sequence is packed documents (doc_bounds, kernels/backend.h) of about
// doc_len tokens: lengths doc_len + k % 5 with a one-token document every third, so that
// documents start inside key tiles and span them; a padded sequence's padding rows are one
// more run. Without dropout the result must equal the attention over the same rows with each
// document its own packed sequence (the offsets of the documents): the definition, on the
// same backend.
static void attention_case(int B, int T, int C, int NH, float p, bool packed = false, bool repeat = false,
                           int window = 0, int doc_len = 0) {
    std::vector<int> offsets(B + 1, 0);
    for (int b = 0; b < B; b++) {
        int len = T - b * 2 < 2 ? (T < 2 ? T : 2) : T - b * 2;
        if (T > 64 && B > 1 && b == B - 1) len = T / 2 - 5;
        offsets[b + 1] = offsets[b] + len;
    }
    int N = packed ? offsets[B] : B * T;
    std::vector<int> bounds, doc_offsets(1, 0);  // per row [lo, hi); the documents as packed sequences
    if (doc_len > 0)
        for (int b = 0; b < B; b++) {
            int len = offsets[b + 1] - offsets[b];
            for (int lo = 0, k = 0; lo < len; k++) {
                int hi = std::min(len, lo + (k % 3 == 1 ? 1 : doc_len + k % 5));
                for (int i = lo; i < hi; i++) bounds.push_back(lo), bounds.push_back(hi);
                doc_offsets.push_back(offsets[b] + hi);
                lo = hi;
            }
            for (int i = len; i < (packed ? len : T); i++) bounds.push_back(len), bounds.push_back(T);
        }
    // Whether position i of sequence b sees key j.
    auto sees = [=](int b, int i, int j) {
        size_t r = (size_t)(packed ? offsets[b] : b * T) + i;
        return j < offsets[b + 1] - offsets[b] && (!window || (i - j <= window && j - i <= window)) &&
               (!doc_len || (j >= bounds[2 * r] && j < bounds[2 * r + 1]));
    };
    add("attention", fmt("B=%d T=%d C=%d NH=%d p=%.1f %s%s%s", B, T, C, NH, p, packed ? "packed" : "padded",
                         window ? fmt(" window=%d", window).c_str() : "",
                         doc_len ? fmt(" documents=%d", doc_len).c_str() : ""), [=](ctx &x) {
        const backend_t *be = x.be;
        int *off = x.ints(offsets);
        const int *docs = doc_len ? x.ints(bounds) : nullptr;
        void *qkv = x.in(ACT, random_vec((size_t)N * 3 * C, 30, -1.5, 1.5));
        // The log-sum-exp is FP32 math on the same rounded inputs on both sides: ~1e-7 seen. With
        // a window, a padding query row may see no key: its lse is +inf (checked below), and the
        // other rows' are compared.
        void *out = x.out("out", ACT, (size_t)N * C);
        bool masked = window || doc_len;
        void *lse = masked ? x.make_buf(ACC, (size_t)B * NH * T).data() : x.out("lse", ACC, (size_t)B * NH * T, 1e-5);
        // The backend's own record of the dropout mask, from its forward to its backward, as
        // large as the backend asks (attention_keep_row_words; NULL when it keeps none, as the
        // model passes it): guarded, not compared. The CUDA backend keeps attention_keep_words(T)
        // words per row where its fused kernels run and T <= 512 (the fused backward's
        // clusters), and none past that, where the backward draws again; the CPU none.
        int HS = C / NH;
        int W = x.be->attention_keep_row_words ? x.be->attention_keep_row_words(T, C, NH) : 0;
        bool fused = x.be == gpu && prec != FP32 && (HS == 32 || HS == 64 || HS == 128);
        x.expect(fmt("keep record of %d words per query row", W), W == (fused && T <= 512 ? attention_keep_words(T) : 0));
        uint32_t *keep = W ? (uint32_t *)x.in(INT, std::vector<float>((size_t)B * NH * T * W, 0.0f)) : nullptr;
        dropout_t d = {p, 3, 17, 99, nullptr, 0, nullptr};
        TIMED(x, be->attention_forward(out, lse, keep, qkv, off, docs, packed, B, T, C, NH, window, d));
        if (masked) {
            std::vector<double> l = x.contents(lse);
            std::vector<float> seen((size_t)B * NH * T, 0.0f);
            bool inf_exactly_there = true;
            for (int b = 0; b < B; b++)
                for (int h = 0; h < NH; h++)
                    for (int i = 0; i < (packed ? offsets[b + 1] - offsets[b] : T); i++) {
                        size_t r = ((size_t)b * NH + h) * T + i;
                        bool none = true;  // no key within the window and the document
                        for (int j = 0; j < T && none; j++) none = !sees(b, i, j);
                        inf_exactly_there &= none ? std::isinf(l[r]) && l[r] > 0 : std::isfinite(l[r]);
                        seen[r] = none ? 0.0f : (float)l[r];
                    }
            x.expect("lse +inf exactly for the rows that see no key", inf_exactly_there);
            x.inout("lse of the rows that see keys", ACC, seen, 1e-5);
        }
        // The fused CUDA forward's record of the mask holds, bit for bit, the decisions the CPU
        // reference draws (dropout_keep of element ((b*NH + h)*T + i)*T + j) for every real key
        // of every query row (within its window, when there is one): the layout of flash_attention.cu, key tile k0's key k0 + j at bit
        // 8 (j / 16) + j % 8 of the row's word k0 / 32 + (j / 8) % 2. Exact: both are integers.
        if (W && p > 0.0f) {
            std::vector<uint32_t> bits((size_t)B * NH * T * W);
            be->download(bits.data(), keep, bits.size() * sizeof(uint32_t));
            size_t wrong = 0, checked = 0;
            for (int b = 0; b < B; b++) {
                int len = offsets[b + 1] - offsets[b];
                for (int h = 0; h < NH; h++)
                    for (int i = 0; i < (packed ? len : T); i++) {
                        uint64_t row = ((uint64_t)b * NH + h) * T + i;
                        for (int j = 0; j < len; j++) {
                            if (!sees(b, i, j)) continue;  // a tile it may skip
                            uint32_t word = bits[row * W + j / 64 * 2 + j / 8 % 2];
                            int got = (int)(word >> (j % 64 / 16 * 8 + j % 8) & 1u);
                            wrong += got != dropout_keep(d, row * T + j);
                            checked++;
                        }
                    }
            }
            x.expect(fmt("keep bits = the reference's mask (%zu of %zu keys differ)", wrong, checked), wrong == 0);
        }
        // Each backend uses its own saved output and log-sum-exp (as in the model). The key
        // bias aside, dq, dk and dv are all non-trivial; compare the three together.
        void *dout = x.cotangent(out, random_vec((size_t)N * C, 31, -1, 1)), *dqkv = x.out("dqkv", ACT, (size_t)N * 3 * C);
        TIMED(x, be->attention_backward(dqkv, dout, qkv, out, lse, keep, off, docs, packed, B, T, C, NH, window, d));
        x.gradient("dqkv", dqkv, qkv);
        // dq on its own too (the fused backward sums it across blocks; dk and dv outweigh it
        // in dqkv's norm): the q columns of each row, compared as one more output.
        std::vector<double> all = x.contents(dqkv);
        std::vector<float> dq((size_t)N * C);
        for (size_t r = 0; r < (size_t)N; r++)
            for (int c = 0; c < C; c++) dq[r * C + c] = (float)all[r * 3 * C + c];
        x.inout("dq", ACT, dq);
        // Padding keys get probability exactly 0, so their key and value gradients are exactly 0.
        if (!packed) {
            bool zero = true;
            for (int b = 0; b < B; b++)
                for (int j = offsets[b + 1] - offsets[b]; j < T; j++)
                    for (int e = C; e < 3 * C; e++) zero &= all[((size_t)b * T + j) * 3 * C + e] == 0.0;
            x.expect("padding keys: key and value gradients exactly 0", zero);
        }
        if (repeat) {
            void *again = x.out("dqkv again", ACT, (size_t)N * 3 * C);
            be->attention_backward(again, dout, qkv, out, lse, keep, off, docs, packed, B, T, C, NH, window, d);
            x.expect("backward bitwise repeatable", x.contents(dqkv) == x.contents(again));
        }
        // Documents are separate sequences: the same rows with the documents' offsets, packed
        // (the padded layout's real rows taken out), give the same out and dqkv to the
        // precision's tolerance (the sums run in other tiles and orders).
        if (doc_len && p == 0.0f) {
            int D = (int)doc_offsets.size() - 1, Nd = doc_offsets[D];
            std::vector<double> q_all = x.contents(qkv), o_all = x.contents(out), do_all = x.contents(dout);
            std::vector<float> q_real, do_real;
            std::vector<double> o_real, dq_real;
            for (int b = 0; b < B; b++)
                for (int i = 0; i < offsets[b + 1] - offsets[b]; i++) {
                    size_t r = (size_t)(packed ? offsets[b] : b * T) + i;
                    for (int e = 0; e < 3 * C; e++) q_real.push_back((float)q_all[r * 3 * C + e]);
                    for (int e = 0; e < 3 * C; e++) dq_real.push_back(all[r * 3 * C + e]);
                    for (int e = 0; e < C; e++) o_real.push_back(o_all[r * C + e]), do_real.push_back((float)do_all[r * C + e]);
                }
            int *doff = x.ints(doc_offsets);
            void *q2 = x.in(ACT, q_real), *dout2 = x.in(ACT, do_real);
            std::vector<float> zeros((size_t)Nd * 3 * C, 0.0f);
            void *out2 = x.in(ACT, std::vector<float>((size_t)Nd * C, 0.0f)), *dqkv2 = x.in(ACT, zeros);
            void *lse2 = x.in(ACC, std::vector<float>((size_t)D * NH * T, 0.0f));
            be->attention_forward(out2, lse2, nullptr, q2, doff, nullptr, 1, D, T, C, NH, window, d);
            be->attention_backward(dqkv2, dout2, q2, out2, lse2, nullptr, doff, nullptr, 1, D, T, C, NH, window, d);
            std::vector<double> o_docs = x.contents(out2), dq_docs = x.contents(dqkv2);
            double eo = rel_error(o_real.data(), o_docs.data(), o_real.size()),
                   eg = rel_error(dq_real.data(), dq_docs.data(), dq_real.size());
            double tol = tolerance > 0.0 ? tolerance : 1e-12;  // gradient mode (cpu64): the same sums in double
            x.expect(fmt("= the documents as separate sequences: out %.1e, dqkv %.1e (tolerance %.0e)", eo, eg, tol),
                     eo <= tol && eg <= tol);
        }
    });
}

static void pointwise_cases(int n, float p) {
    std::string params = fmt("n=%d p=%g", n, p);
    std::vector<float> xs = random_vec(n, 40, -4, 4), rs = random_vec(n, 41, -1, 1), douts = random_vec(n, 42, -1, 1);
    for (gelu_kind act : {GELU_ERF, GELU_TANH})
        add(act == GELU_TANH ? "gelu_tanh" : "gelu", params, [=](ctx &x) {
            void *in = x.in(ACT, xs);
            void *out = x.out("out", ACT, n), *dinp = x.out("dinp", ACT, n);
            TIMED(x, x.be->gelu_forward(out, in, n, act));
            void *dout = x.cotangent(out, douts);
            TIMED(x, x.be->gelu_backward(dinp, dout, in, n, act));
            x.gradient("dinp", dinp, in);
        });
    // tanh backward takes the forward's output: in compare mode both backends get the same
    // values, tanh on the host; in gradient mode the forward's own, as in the model.
    std::vector<float> ys(n);
    for (int i = 0; i < n; i++) ys[i] = round_act(tanhf(xs[i]));
    add("tanh", params, [=](ctx &x) {
        void *in = x.in(ACT, xs), *y = x.in(ACT, ys);
        void *out = x.out("out", ACT, n), *dinp = x.out("dinp", ACT, n);
        TIMED(x, x.be->tanh_forward(out, in, n));
        void *dout = x.cotangent(out, douts);
        TIMED(x, x.be->tanh_backward(dinp, dout, x.grad ? out : y, n));
        x.gradient("dinp", dinp, in);
    });
    // The dropped fraction: within 4 standard deviations of p (a fixed draw: the same verdict
    // every run; a wrong keep rule, such as keeping with probability p, lands far outside).
    dropout_t d = {p, 7, 5, 1234, nullptr, 0, nullptr};
    add("dropout", params, [=](ctx &x) {
        void *in = x.in(ACT, xs), *res = x.in(ACT, rs);
        void *out_res = x.out("dropout + residual", ACT, n), *out = x.out("dropout", ACT, n),
             *dinp = x.out("dropout backward", ACT, n);
        TIMED(x, x.be->dropout_residual_forward(out_res, in, res, n, d));
        TIMED(x, x.be->dropout_residual_forward(out, in, nullptr, n, d));
        void *dout = x.cotangent(out_res, douts);
        TIMED(x, x.be->dropout_backward(dinp, dout, n, d));
        x.gradient("dinp", dinp, in);
        x.gradient("dresidual", dout, res);  // out_res = dropout(in) + res
        std::vector<double> g = x.contents(dinp);
        double dropped = (double)std::count(g.begin(), g.end(), 0.0) / n, sd = sqrt(p * (1.0 - p) / n);
        x.expect(fmt("dropped fraction %.3f within %.3f of p", dropped, 4 * sd), fabs(dropped - p) <= 4 * sd);
    });
}

// The fused sublayer end of the encoder: res = dropout(inp) + residual, out = LN(res), and
// its backward with the dropout of the LayerNorm's input gradient. C = 30 takes the scalar
// path (not a whole number of 128-bit packs), 72 and 40 the vector path.
// row_map: the rows draw as rows 3r + 1 of a larger tensor (dropout_t's row map, the
// unpadded model's token rows).
// The CUDA forward saves its decisions as bits (keep_bits) and the backward reads them, where
// the CPU draws again: the backward's dinp against the CPU's checks the saved bits, and the
// bits are also checked one by one against philox.h's decisions at the keyed index.
// bias = false: a LayerNorm without bias (ModernBERT's: NULL bias and dbias).
static void residual_dropout_layernorm_case(int N, int C, float p, bool residual, bool row_map = false,
                                            bool bias = true) {
    std::vector<int> rows(N);
    for (int r = 0; r < N; r++) rows[r] = 3 * r + 1;
    add("residual_dropout_layernorm", fmt("N=%d C=%d p=%.1f residual=%d row_map=%d%s", N, C, p, residual, row_map,
                                          bias ? "" : " no bias"),
        [=](ctx &x) {
        const backend_t *be = x.be;
        size_t words = (size_t)N * dropout_keep_words(C);
        uint32_t *keep = (uint32_t *)x.make_buf(INT, words).data();
        dropout_t d = {p, 4, 9, 77, row_map ? x.ints(rows) : nullptr, C, keep};
        void *inp = x.in(ACT, random_vec((size_t)N * C, 100, -2, 2)), *r = x.in(ACT, random_vec((size_t)N * C, 101, -1, 3));
        void *w = x.in(ACT, random_vec(C, 102, 0.5, 1.5)), *b = bias ? x.in(ACT, random_vec(C, 103, -0.5, 0.5)) : nullptr;
        void *out = x.out("out", ACT, (size_t)N * C), *res = x.out("res", ACT, (size_t)N * C),
             *mean = x.out("mean", ACC, N), *rstd = x.out("rstd", ACC, N);
        TIMED(x, be->residual_dropout_layernorm_forward(out, res, mean, rstd, inp, residual ? r : nullptr, w, b, N, C,
                                                        1e-12f, d));
        if (be == gpu && p > 0.0f) {
            std::vector<uint32_t> bits(words);
            be->download(bits.data(), keep, words * sizeof(uint32_t));
            dropout_t drawn = {p, 4, 9, 77, nullptr, 0, nullptr};
            size_t wrong = 0;
            for (int n = 0; n < N; n++)
                for (int c = 0; c < C; c++) {
                    uint64_t keyed = (uint64_t)(row_map ? rows[n] : n) * C + c;
                    unsigned bit = bits[(size_t)n * dropout_keep_words(C) + c / 32] >> (c % 32) & 1u;
                    wrong += bit != (unsigned)dropout_keep(drawn, keyed);
                }
            x.expect(fmt("saved keep bits are the drawn decisions (%zu of %d wrong)", wrong, N * C), wrong == 0);
        }
        void *dout = x.cotangent(out, random_vec((size_t)N * C, 104, -1, 1));
        void *dres = x.out("dres", ACT, (size_t)N * C), *dinp = x.out("dinp", ACT, (size_t)N * C);
        std::vector<float> init_w = random_vec(C, 105, -1, 1, false), init_b = random_vec(C, 106, -1, 1, false);
        void *dw = x.inout("dweight", ACC, init_w), *db = bias ? x.inout("dbias", ACC, init_b) : nullptr;
        TIMED(x, be->layernorm_dropout_backward(dres, dinp, dw, db, dout, res, w, mean, rstd, N, C, d));
        x.gradient("dinp", dinp, inp);
        if (residual) x.gradient("dres", dres, r);
        x.gradient("dweight", dw, w, init_w);
        if (bias) x.gradient("dbias", db, b, init_b);
        // In place: dres = dout.
        void *g = x.inout("dres in place", ACT, random_vec((size_t)N * C, 104, -1, 1));
        void *dinp2 = x.out("dinp (dres in place)", ACT, (size_t)N * C);
        TIMED(x, be->layernorm_dropout_backward(g, dinp2, dw, db, g, res, w, mean, rstd, N, C, d));
        // dinp = dout, as the model's second LayerNorm of a layer calls it.
        void *h = x.inout("dinp in place", ACT, random_vec((size_t)N * C, 107, -1, 1));
        void *dres3 = x.out("dres (dinp in place)", ACT, (size_t)N * C);
        TIMED(x, be->layernorm_dropout_backward(dres3, h, dw, db, h, res, w, mean, rstd, N, C, d));
    });
}

// bias + GELU over [N,C], and its backward with the bias gradient (also in place); the erf
// GELU as "bias_gelu", the tanh form as "bias_gelu_tanh".
static void bias_gelu_case(int N, int C, gelu_kind act = GELU_ERF) {
    add(act == GELU_TANH ? "bias_gelu_tanh" : "bias_gelu", fmt("N=%d C=%d", N, C), [=](ctx &x) {
        const backend_t *be = x.be;
        void *inp = x.in(ACT, random_vec((size_t)N * C, 110, -3, 3)), *b = x.in(ACT, random_vec(C, 111, -1, 1));
        void *out = x.out("out", ACT, (size_t)N * C);
        TIMED(x, be->bias_gelu_forward(out, inp, b, N, C, act));
        void *dout = x.cotangent(out, random_vec((size_t)N * C, 112, -1, 1)), *dinp = x.out("dinp", ACT, (size_t)N * C);
        std::vector<float> init_b = random_vec(C, 113, -1, 1, false);
        void *db = x.inout("dbias", ACC, init_b);
        TIMED(x, be->bias_gelu_backward(dinp, db, dout, inp, b, N, C, act));
        x.gradient("dinp", dinp, inp);
        x.gradient("dbias", db, b, init_b);
        void *g = x.inout("dinp in place", ACT, random_vec((size_t)N * C, 112, -1, 1));
        TIMED(x, be->bias_gelu_backward(g, nullptr, g, inp, b, N, C, act));
    });
}

// The FFN's GEMMs with the tanh GELU in their epilogues (matmul_bias_gelu_forward,
// matmul_dgelu_backward) against the CPU reference's linear + GELU tanh: forward pre =
// inp W1^T + b1 (matmul_forward with the bias) and out = gelu(pre) (gelu_forward); backward
// of the next GEMM (W2[OC2,IC2], IC2 = the GELU's width) through the GELU: matmul_backward,
// then bias_gelu_backward on pre without a bias for dinp and the GELU's bias gradient. With
// widths that are not a multiple of 8 the CUDA op takes its streaming path (cuBLASLt's aux
// leading dimension is a multiple of 8).
static void matmul_gelu_case(int N, int IC, int OC, int OC2) {
    add("matmul_gelu", fmt("N=%d IC=%d OC=%d OC2=%d", N, IC, OC, OC2), [=](ctx &x) {
        const backend_t *be = x.be;
        void *inp = x.in(ACT, random_vec((size_t)N * IC, 120, -1, 1)),
             *w1 = x.in(ACT, random_vec((size_t)OC * IC, 121, -0.5, 0.5)), *b1 = x.in(ACT, random_vec(OC, 122, -1, 1));
        void *out = x.out("out", ACT, (size_t)N * OC), *pre = x.out("pre", ACT, (size_t)N * OC);
        if (be->matmul_bias_gelu_forward) {
            TIMED(x, be->matmul_bias_gelu_forward(out, pre, inp, w1, b1, N, IC, OC));
        } else {
            be->matmul_forward(pre, inp, w1, b1, N, IC, OC);
            be->gelu_forward(out, pre, N * OC, GELU_TANH);
        }
        // The backward of out W2^T with its own inputs: pre over [-3, 3], h = the GEMM's input.
        void *h = x.in(ACT, random_vec((size_t)N * OC, 123, -1, 1)), *pre2 = x.in(ACT, random_vec((size_t)N * OC, 124, -3, 3)),
             *w2 = x.in(ACT, random_vec((size_t)OC2 * OC, 125, -0.5, 0.5)),
             *dout = x.in(ACT, random_vec((size_t)N * OC2, 126, -1, 1));
        void *dinp = x.inout("dinp", ACT, random_vec((size_t)N * OC, 127, -1, 1));  // must be overwritten
        void *dw = x.inout("dweight", ACC, random_vec((size_t)OC2 * OC, 128, -1, 1, false)),
             *db = x.inout("dbias", ACC, random_vec(OC2, 129, -1, 1, false)),
             *dpre_b = x.inout("dbias of pre", ACC, random_vec(OC, 130, -1, 1, false));
        if (be->matmul_dgelu_backward) {
            TIMED(x, be->matmul_dgelu_backward(dinp, dw, db, dpre_b, dout, h, w2, pre2, N, OC, OC2));
        } else {
            be->matmul_backward(dinp, dw, db, dout, h, w2, nullptr, N, OC, OC2);
            be->bias_gelu_backward(dinp, dpre_b, dinp, pre2, nullptr, N, OC, GELU_TANH);
        }
    });
}

#ifdef TEST_OPS_CUDA
// The error bound of an FP32 kernel's gelu'(x), derived per point rather than stated: the
// kernel's formula (pointwise.cu) evaluated in double with a running error bound (Wilkinson's
// running error analysis): each value has a bound on its distance from the exact real
// value of the same formula with exact constants. Sources of error, each from its
// documentation: FP32 rounding of every operation, 2^-24 relative (an FMA the compiler
// contracts rounds once, within this); each FP32 constant's distance from its exact value;
// ex2.approx.ftz.f32 2 ulp (<= 2^-22 relative) and rcp.approx.ftz.f32 1 ulp (<= 2^-23), with
// results below 2^-126 flushed (PTX ISA, floating-point instructions; the emulation, sfu.cuh,
// errs by exactly that much). The check is |kernel - exact gelu'(x)| <= bound(x) at every
// point of the grid, so a wrong coefficient (the review's: an error of >= 1.15e-6) fails where
// the bound is small.
struct err_val {
    double v, e;  // value of the formula in exact arithmetic; bound on |FP32 result - v|
};
static const double u32 = 0x1p-24;
static err_val ev_input(float x) { return {x, 0.0}; }
static err_val ev_const(double exact) { return {exact, fabs((double)(float)exact - exact)}; }
static err_val ev_round(double v, double e) { return {v, e + u32 * (fabs(v) + e)}; }
static err_val operator*(err_val a, err_val b) {
    return ev_round(a.v * b.v, fabs(a.v) * b.e + fabs(b.v) * a.e + a.e * b.e);
}
static err_val operator+(err_val a, err_val b) { return ev_round(a.v + b.v, a.e + b.e); }
static err_val operator-(err_val a, err_val b) { return ev_round(a.v - b.v, a.e + b.e); }
static err_val ev_fma(err_val a, err_val b, err_val c) {  // one rounding
    return ev_round(a.v * b.v + c.v, fabs(a.v) * b.e + fabs(b.v) * a.e + a.e * b.e + c.e);
}
static err_val ev_exp2(err_val a) {  // ex2.approx.ftz.f32
    double v = exp2(a.v), prop = v * (exp2(a.e) - 1.0), e = prop + 0x1p-22 * (v + prop);
    return {v, e + 0x1p-126};
}
static err_val ev_rcp(err_val a) {  // rcp.approx.ftz.f32, |a.v| > a.e
    double v = 1.0 / a.v, prop = a.e / (fabs(a.v) * (fabs(a.v) - a.e));
    return {v, prop + 0x1p-23 * (fabs(v) + prop)};
}

// gelu_grad (the erf form): Phi(-|x|) by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7 on
// erfc, so 7.5e-8 on Phi, the approximation's own error added to the bound), P's
// coefficients A&S's halved, e = exp(-x^2/2) shared with the density.
static err_val gelu_erf_grad_bound(float x) {
    const double a[5] = {0.254829592 / 2, -0.284496736 / 2, 1.421413741 / 2, -1.453152027 / 2, 1.061405429 / 2};
    err_val X = ev_input(x), e = ev_exp2(X * X * ev_const(-0.5 / M_LN2));
    err_val t = ev_rcp(ev_fma(ev_const(0.3275911 / sqrt(2.0)), ev_input(fabsf(x)), ev_const(1.0)));
    err_val poly = ev_const(a[4]);
    for (int i = 3; i >= 0; i--) poly = ev_fma(poly, t, ev_const(a[i]));
    err_val tail = t * poly * e;
    err_val g = ev_fma(X * ev_const(1.0 / sqrt(2.0 * M_PI)), e, x >= 0.0f ? ev_const(1.0) - tail : tail);
    return {g.v, g.e + 7.5e-8};
}

// gelu_grad_of<GELU_TANH>: s = 1 / (1 + e), e = 2^min(-2 sqrt(2/pi) log2(e) u, 64),
// u = x (1 + 0.044715 x^2); gelu' = s + x du2 e s^2, du2 = 2 sqrt(2/pi) (1 + 0.134145 x^2).
// The cap at 64 changes the formula where it binds (x below about -7.6): there e s^2 <= 2^-64
// and s <= 2^-64, so the capped value is within |x du2| 2^-64 + 2^-64 of the uncapped one.
static err_val gelu_tanh_grad_bound(float x) {
    const double k = sqrt(2.0 / M_PI);
    err_val X = ev_input(x), u = X * ev_fma(ev_const(0.044715) * X, X, ev_const(1.0));
    err_val arg = u * ev_const(-2.0 * k / M_LN2);
    if (arg.v + arg.e >= 64.0) {  // the cap may bind: bound e s^2 and s by their capped sizes
        double xd = fabs((double)x) * 2 * k * (1 + 3 * 0.044715 * (double)x * x);
        return {0.0, 2 * (xd + 1) * 0x1p-64 + 0x1p-126};
    }
    err_val e = ev_exp2(arg), s = ev_rcp(ev_const(1.0) + e);
    err_val du2 = ev_fma(ev_const(2 * k * 3 * 0.044715) * X, X, ev_const(2 * k));
    return ev_fma(X * du2, e * s * s, s);
}

// gelu'(x) of the FP32 kernels on a dense grid, x = -12 + i / 4096 over [-12, 12), 98304
// points, dout = 1, against the exact derivative in double, each point within its derived
// bound: the erf form (Phi(x) + x phi(x) by erfc and exp) through gelu_backward (flat) and
// bias_gelu_backward (rows, zero bias); the tanh form (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi)
// (1 + 3 0.044715 x^2), t = tanh(u), u = sqrt(2/pi) (x + 0.044715 x^3)) through those two and
// matmul_dgelu_backward (an identity weight, so the GEMM's product is exactly dout = 1; in
// FP32 the streaming kernels after the GEMM, matmul.cu), whose bias gradient, the column
// sums of gelu', is checked against the double sums: 96 values each within its bound plus
// the FP32 sum's own rounding (96 x 2^-24 of the sum of magnitudes), so within 2e-5 of the
// sum of |gelu'| by a wide margin. FP32 only: FP16/BF16 outputs round to ~1e-3.
static void gelu_grad_grid_check() {
    const int N = 96, C = 1024, n = N * C;
    std::vector<float> xs(n), ones(n, 1.0f), zeros(C, 0.0f), eye((size_t)C * C, 0.0f);
    for (int i = 0; i < n; i++) xs[i] = -12.0f + (float)i / 4096.0f;
    for (int i = 0; i < C; i++) eye[(size_t)i * C + i] = 1.0f;
    auto exact_erf = [](double x) { return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI); };
    // 0.5 (1 + t) = sigmoid(2u) and 0.5 (1 - t^2) = 2 sigmoid(2u) sigmoid(-2u), exactly; in
    // double this form keeps its relative accuracy where 1 + t cancels (x below about -6).
    auto exact_tanh = [](double x) {
        const double k = sqrt(2.0 / M_PI), c = 0.044715, u = k * (x + c * x * x * x);
        const double s = 1 / (1 + exp(-2 * u)), sm = 1 / (1 + exp(2 * u));
        return s + x * 2 * s * sm * k * (1 + 3 * c * x * x);
    };
    buffer in = make(gpu, ACT, n), dout = make(gpu, ACT, n), dinp = make(gpu, ACT, n), b = make(gpu, ACT, C),
           db = make(gpu, ACC, C), w = make(gpu, ACT, (size_t)C * C), dw = make(gpu, ACC, (size_t)C * C);
    fill(in, xs), fill(dout, ones), fill(b, zeros), fill(w, eye);
    const char *names[] = {"gelu_backward", "bias_gelu_backward", "matmul_dgelu_backward"};
    for (int tanh_form = 0; tanh_form < 2; tanh_form++)
        for (int path = 0; path < (tanh_form ? 3 : 2); path++) {
            gelu_kind act = tanh_form ? GELU_TANH : GELU_ERF;
            fill(db, zeros);
            if (path == 0) gpu->gelu_backward(dinp.data(), dout.data(), in.data(), n, act);
            else if (path == 1) gpu->bias_gelu_backward(dinp.data(), db.data(), dout.data(), in.data(), b.data(), N, C, act);
            else
                gpu->matmul_dgelu_backward(dinp.data(), dw.data(), nullptr, db.data(), dout.data(), dout.data(), w.data(),
                                           in.data(), N, C, C);
            std::vector<double> got = read(dinp);
            // BERTPRE_TEST_DUMP_DIR=DIR (test-only): the raw FP32 outputs on the grid, for
            // tools/probe_gelu_tanh.py to tell which tanh the GPU's path computes.
            const char *dir = getenv("BERTPRE_TEST_DUMP_DIR");
            if (dir && tanh_form) {
                std::string file = std::string(dir) + "/tanh_gelu_grad_" + names[path] + ".f32";
                FILE *f = fopen(file.c_str(), "wb");
                std::vector<float> f32(got.begin(), got.end());
                if (!f || fwrite(f32.data(), sizeof(float), f32.size(), f) != f32.size() || fclose(f) != 0) {
                    fprintf(stderr, "%s: cannot write the dump: %s\n", file.c_str(), strerror(errno));
                    exit(1);
                }
            }
            double worst = 0, worst_ratio = 0, at = 0, bound_there = 0, max_bound = 0;
            std::vector<double> bounds(n);
            for (int i = 0; i < n; i++) {
                bounds[i] = (tanh_form ? gelu_tanh_grad_bound(xs[i]) : gelu_erf_grad_bound(xs[i])).e;
                double err = fabs(got[i] - (tanh_form ? exact_tanh(xs[i]) : exact_erf(xs[i])));
                worst = std::max(worst, err), max_bound = std::max(max_bound, bounds[i]);
                if (!(err <= worst_ratio * bounds[i])) worst_ratio = err / bounds[i], at = xs[i], bound_there = bounds[i];
            }
            report(worst_ratio <= 1.0,
                   fmt("%sgelu' on a grid of [-12, 12), %s, each point within its derived bound", tanh_form ? "tanh " : "",
                       names[path]),
                   fmt("max |error| %.2e; worst error / bound %.2f at x = %g (bound there %.2e; largest bound %.2e)",
                       worst, worst_ratio, at, bound_there, max_bound));
            if (path == 0) continue;
            std::vector<double> sums = read(db);
            double worst_sum = 0;
            for (int c = 0; c < C; c++) {
                double s = 0, mag = 0, allowed = 0;
                for (int r = 0; r < N; r++) {
                    double ex = tanh_form ? exact_tanh(xs[(size_t)r * C + c]) : exact_erf(xs[(size_t)r * C + c]);
                    s += ex, mag += fabs(ex), allowed += bounds[(size_t)r * C + c];
                }
                allowed += N * u32 * (mag + allowed);
                worst_sum = std::max(worst_sum, fabs(sums[c] - s) / allowed);
            }
            report(worst_sum <= 1.0, fmt("%sgelu' column sums, %s", tanh_form ? "tanh " : "", names[path]),
                   fmt("worst error / derived bound %.2f", worst_sum));
        }
    for (buffer *buf : {&in, &dout, &dinp, &b, &db, &w, &dw}) gpu->release(buf->base);
}

#endif

static void gather_case(int M, int C, std::vector<int> index) {
    int N = (int)index.size();
    add("gather", fmt("N=%d M=%d C=%d", N, M, C), [=](ctx &x) {
        int *idx = x.ints(index);
        void *inp = x.in(ACT, random_vec((size_t)M * C, 50, -1, 1));
        void *out = x.out("out", ACT, (size_t)N * C);
        void *dinp = x.inout("dinp", ACT, random_vec((size_t)M * C, 52, -1, 1));  // must be overwritten
        TIMED(x, x.be->gather_rows_forward(out, inp, idx, N, C));
        void *dout = x.cotangent(out, random_vec((size_t)N * C, 51, -1, 1));
        TIMED(x, x.be->gather_rows_backward(dinp, dout, index.data(), N, M, C));  // host index
        x.gradient("dinp", dinp, inp);
    });
}

// Vp > V: rows padded to Vp columns (the padded vocabulary), the padding holding a logit far
// above every class (60000, within FP16's range): it must change no loss, argmax or gradient
// (the CPU reference's padding rule is checked against the unpadded rows in ops_gradcheck).
static void crossentropy_case(int N, int V, int Vp, float smoothing = 0.0f) {
    std::vector<int> targets(N);
    for (int n = 0; n < N; n++) targets[n] = n % 5 == 3 ? -1 : (int)(philox_draw(9, 0, 2, n) % V);
    std::vector<float> logits = random_vec((size_t)N * Vp, 60, -6, 6);
    for (int n = 0; n < N; n += 4) logits[(size_t)n * Vp + targets[n] % V] = round_act(9.0f);  // some argmax hits
    // Ties for the maximum: the first index holding it wins (a miss where an earlier class
    // ties with the target, a hit where a later one does), across threads' spans and within one.
    for (int n = 1; n < N; n += 4) {
        int j = targets[n];
        if (j <= 0) continue;
        logits[(size_t)n * Vp + j] = logits[(size_t)n * Vp + (n % 8 == 1 ? j / 2 : j - 1)] = round_act(9.5f);
    }
    for (int n = 2; n < N; n += 4) {
        int j = targets[n];
        if (j < 0 || j + 1 >= V) continue;
        logits[(size_t)n * Vp + j] = logits[(size_t)n * Vp + (n % 8 == 2 ? j + (V - j) / 2 : j + 1)] = round_act(9.5f);
    }
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) logits[(size_t)n * Vp + v] = round_act(60000.0f);
    add("crossentropy", fmt("N=%d V=%d Vp=%d smoothing %g", N, V, Vp, smoothing), [=](ctx &x) {
        int *t = x.ints(targets);
        void *losses = x.out("losses", ACC, N);
        int *correct = x.out_ints("correct (argmax hits)", std::vector<int>(N, 7));
        void *lg = x.in(ACT, logits), *dx = x.out("dlogits", ACT, (size_t)N * Vp);
        TIMED(x, x.be->crossentropy_forward(losses, correct, lg, t, N, V, Vp, smoothing));
        x.loss(losses, 0.37);
        TIMED(x, x.be->crossentropy_backward(dx, lg, t, N, V, Vp, 0.37f, smoothing));
        x.gradient("dlogits", dx, lg);
        // In place, as the model calls it: the same bits.
        void *inplace = x.inout("dlogits in place", ACT, logits);
        TIMED(x, x.be->crossentropy_backward(inplace, inplace, t, N, V, Vp, 0.37f, smoothing));
        x.expect("backward in place = out of place, bitwise", x.contents(inplace) == x.contents(dx));
        // Row 0 against -sum_v q_v log softmax_v in double here, q = (1 - s) onehot + s / V:
        // the backend's own arithmetic (FP32, or double in cpu64) is the only error, relative
        // to the size of the logits (the loss is a difference of terms of that size).
        std::vector<double> loss = x.contents(losses);
        double m = *std::max_element(logits.begin(), logits.begin() + V), rest = -1.0, expect = 0.0, size = 0.0;
        for (int v = 0; v < V; v++) rest += exp(logits[v] - m), size = std::max(size, fabs((double)logits[v]));
        for (int v = 0; v < V; v++)
            expect -= ((v == targets[0]) * (1.0 - smoothing) + (double)smoothing / V) * (logits[v] - m - log1p(rest));
        double tol = x.be->acc_size == 8 ? 1e-12 : 1e-5;
        x.expect(fmt("row 0: the loss is -sum q log softmax (within %.0e of the logits' size)", tol),
                 fabs(loss[0] - expect) <= tol * (expect + size));
        if (N > 3) x.expect("row 3 (target -1): loss 0", loss[3] == 0.0);
        // The reference's padding rule: the same rows without their padding give the same losses,
        // hits and class gradients, exactly (CUDA's padded rows are compared with these above).
        if (Vp == V || x.be == gpu) return;
        std::vector<float> unpadded((size_t)N * V);
        for (int n = 0; n < N; n++)
            for (int v = 0; v < V; v++) unpadded[(size_t)n * V + v] = logits[(size_t)n * Vp + v];
        void *ul = x.in(ACT, unpadded), *ulosses = x.make_buf(ACC, N).data(), *udx = x.make_buf(ACT, (size_t)N * V).data();
        int *ucorrect = (int *)x.make_buf(INT, N).data();
        x.be->crossentropy_forward(ulosses, ucorrect, ul, t, N, V, V, smoothing);
        x.be->crossentropy_backward(udx, ul, t, N, V, V, 0.37f, smoothing);
        std::vector<double> ud = x.contents(udx), pd = x.contents(dx);
        bool same = x.contents(ulosses) == loss && x.contents(ucorrect) == x.contents(correct), pad_zero = true;
        for (int n = 0; n < N; n++)
            for (int v = 0; v < Vp; v++) {
                if (v < V) same &= ud[(size_t)n * V + v] == pd[(size_t)n * Vp + v];
                else pad_zero &= pd[(size_t)n * Vp + v] == 0.0;
            }
        x.expect("padded rows: the unpadded rows' losses, hits and class gradients, exactly", same);
        x.expect("padded rows: the padding columns' gradient 0", pad_zero);
    });
}

// The optimizers (LAMB, LARS, AdamW) are FP32 on every backend: tolerance 1e-5 (FP32
// arithmetic against the CPU's double sums over 5 steps; ~1e-7 expected). Tensors: decayed,
// not decayed, one spanning several chunks of the CUDA kernels, and an all-zero one (trust
// ratio 1); clipping in some steps; weight decay 0 too (LAMB then has no trust ratio). Then
// an overflow (inf in one gradient) must leave everything unchanged.
// decoupled: weight decay relative to a peak rate of 0.05 (adamw, stableadamw: decay_lr_ref).
static void optimizer_case(const std::string &which, double weight_decay, bool decoupled = false) {
    add(which.c_str(), fmt("5 steps, weight decay %g%s", weight_decay, decoupled ? " decoupled" : ""), [=](ctx &x) {
        std::vector<optim_tensor> tensors = {{0, 15, 1}, {16, 7, 0}, {24, 40000, 1}, {40024, 6, 1}, {40032, 33, 0}};
        size_t n = 40072;
        std::vector<float> w = random_vec(n, 80, -0.2f, 0.2f, false);
        for (size_t k = 40024; k < 40030; k++) w[k] = 0.0f;
        bool lars = which == "lars";
        float *params = (float *)x.inout("params", ACC, w, 1e-5);
        float *m = (float *)x.out(lars ? "momentum" : "m", ACC, n, 1e-5);
        float *v = lars ? nullptr : (float *)x.out("v", ACC, n, 1e-5);
        auto step = [&](void *grads, double lr, double max_norm, double grad_scale, long t) {
            adam_hyper h = {lr, 0.9, 0.999, 1e-6, weight_decay, max_norm, grad_scale, t, nullptr, decoupled ? 0.05 : 0.0};
            if (lars)
                return x.be->lars_step(params, m, grads, tensors.data(), (int)tensors.size(),
                                       lars_hyper{lr, 0.9, 0.02, 1e-8, weight_decay, max_norm, grad_scale, nullptr});
            if (which == "adamw") return x.be->adamw_step(params, m, v, grads, tensors.data(), (int)tensors.size(), h);
            if (which == "stableadamw")
                return x.be->stableadamw_step(params, m, v, grads, tensors.data(), (int)tensors.size(), h);
            return x.be->lamb_step(params, m, v, grads, tensors.data(), (int)tensors.size(), h);
        };
        for (int t = 1; t <= 5; t++) {
            std::vector<float> g = random_vec(n, 90 + t, -1, 1, false);
            for (size_t k = 40024; k < 40030; k++) g[k] = 0.0f;
            void *grads = x.in(ACC, g);
            // steps 1-2: the norm (~115 / 4) is clipped to 1; later steps: unclipped
            x.value(fmt("step %d grad norm", t), step(grads, 1e-2 * t, t <= 2 ? 1.0 : 1e3, 4.0, t), 1e-5);
        }
        std::vector<float> g(n, 0.5f);
        g[100] = INFINITY;
        void *grads = x.in(ACC, g);
        std::vector<double> before = x.contents(params), m_before = x.contents(m);
        double norm = step(grads, 1e-2, 1.0, 1.0, 6);
        x.expect("overflow: norm not finite, parameters and state unchanged",
                 x.contents(params) == before && x.contents(m) == m_before && !std::isfinite(norm));
    });
}

// The CUDA refresh of the compute copy against round-to-nearest on the host (the CPU
// backend has no separate compute copy), exactly.
static void params_to_compute_case(size_t n) {
    std::vector<float> master = random_vec(n, 70, -3, 3, false), rounded(n);
    for (size_t i = 0; i < n; i++) rounded[i] = round_act(master[i]);
    add("params_to_compute", fmt("n=%zu", n), [=](ctx &x) {
        const float *m = (const float *)x.in(ACC, master);
        void *out = x.out("out", ACT, n, 0.0);
        if (x.be->params_to_compute)
            TIMED(x, x.be->params_to_compute(out, m, n));
        else
            x.be->upload(out, rounded.data(), n * sizeof(float));  // FP32 on the CPU
    });
}

// zero over a range inside a buffer (from element `from`, `count` elements): those exactly 0,
// the rest as they were, nothing outside the buffer touched (its guard bytes).
static void zero_case(size_t n, size_t from, size_t count) {
    std::vector<float> v = random_vec(n, 71, -3, 3, false);
    for (float &f : v) f = round_act(f);  // the same values in both backends' types
    add("zero", fmt("n=%zu from=%zu count=%zu", n, from, count), [=](ctx &x) {
        char *p = (char *)x.inout("out", ACT, v, 0.0);
        TIMED(x, x.be->zero(p + from * x.be->act_size, count * x.be->act_size));
    });
}

static void add_cases(bool base) {
    // Small enough for the finite differences too (gradient mode).
    grad_sized = true;
    embeddings_case(2, 7, 6, 11, 0, false, -1);
    embeddings_case(3, 7, 6, 11, 0, true, -1);
    layernorm_case(5, 8);
    layernorm_case(3, 72);
    matmul_case(7, 5, 9, true, 0);
    matmul_case(7, 5, 9, false, 1);
    matmul_case(3, 72, 13, true, 2);
    attention_case(2, 7, 12, 3, 0.0f);
    attention_case(3, 5, 8, 2, 0.2f);
    attention_case(3, 5, 8, 2, 0.2f, true);
    attention_case(4, 9, 12, 3, 0.1f, true);
    pointwise_cases(333, 0.25f);
    residual_dropout_layernorm_case(4, 9, 0.2f, true);
    residual_dropout_layernorm_case(4, 9, 0.2f, false, true);
    bias_gelu_case(4, 9);
    bias_gelu_case(4, 9, GELU_TANH);
    gather_case(10, 3, {4, 0, 9, 4, 2});  // a repeated row accumulates
    // ModernBERT's ops and variants.
    layernorm_case(5, 8, false);
    layernorm_case(5, 8, false, 1);  // dinp_add == dinp (ModernBERT's residual gradients)
    layernorm_case(3, 72, true, 2);  // a separate dinp_add
    residual_dropout_layernorm_case(4, 9, 0.2f, true, true, false);
    token_embeddings_case(9, 9, 6, 11, -1);
    attention_case(2, 9, 12, 3, 0.0f, false, false, 2);  // a window of 2 each side: query rows of 3 to 5 keys
    attention_case(3, 9, 8, 2, 0.2f, true, false, 1);    // packed, lengths 9, 7, 5, with dropout
    attention_case(3, 9, 8, 2, 0.2f, false, false, 3);   // padded: the padding queries' windows hold no real key
    attention_case(3, 9, 8, 2, 0.0f, true, false, 0, 2);  // packed documents of 2 to 6 tokens, one of 1
    attention_case(2, 9, 12, 3, 0.2f, false, false, 2, 3); // padded documents with a window and dropout
    rope_case(6, 6, 8, 2, 10000.0f, false);
    rope_case(9, 5, 12, 3, 160000.0f, true);
    geglu_case(4, 7, GELU_ERF);
    geglu_case(4, 7, GELU_TANH);
    crossentropy_case(4, 2, 2);
    crossentropy_case(4, 37, 37);
    crossentropy_case(4, 2, 2, 0.1f);
    crossentropy_case(4, 37, 37, 0.25f);
    crossentropy_case(4, 37, 40);
    grad_sized = false;
    params_to_compute_case(1000);
    zero_case(1000, 0, 1000);
    zero_case(1001, 3, 997);
    for (const char *which : {"lamb", "lars", "adamw", "stableadamw"}) optimizer_case(which, 0.01);
    optimizer_case("adamw", 0.3, true);
    optimizer_case("stableadamw", 0.3, true);
    optimizer_case("lamb", 0.0);
    embeddings_case(2, 7, 72, 37);
    embeddings_case(3, 33, 40, 101);
    embeddings_case(4, 33, 136, 101, 3);
    embeddings_case(4, 33, 72, 101, 3, true);
    layernorm_case(14, 72);
    layernorm_case(99, 40);
    layernorm_case(9, 30);  // the scalar path (not a whole number of 128-bit packs)
    layernorm_case(37, 520);   // several warps per row
    layernorm_case(70, 1030);  // scalar, several columns per thread
    matmul_case(14, 72, 216, true, 0);
    matmul_case(14, 72, 216, true, 1);
    matmul_case(33, 40, 24, false, 2);
    matmul_case(7, 72, 37, true, 2);
    attention_case(2, 7, 72, 3, 0.0f);
    attention_case(2, 7, 72, 3, 0.3f);
    attention_case(3, 33, 40, 5, 0.1f);
    attention_case(2, 7, 96, 3, 0.3f);     // head size 32
    attention_case(3, 33, 192, 3, 0.1f, false, true);  // head size 64
    attention_case(2, 128, 384, 3, 0.1f);  // head size 128, a key tile skipped in sequence 1
    attention_case(1, 200, 128, 2, 0.1f);  // 4 key tiles, the last one partial: the online rescaling
    attention_case(1, 160, 64, 1, 0.1f);   // clusters of 3 (the fused backward: one block per 64 keys)
    attention_case(1, 384, 64, 1, 0.1f, false, true);  // clusters of 6
    attention_case(1, 512, 64, 1, 0.1f, false, true);  // the longest fused sequence: clusters of 8
    attention_case(1, 513, 64, 1, 0.1f);   // one more: no cluster, the backward draws the dropout again
    attention_case(2, 576, 64, 1, 0.1f, true, true);   // packed, 9 key tiles, T % 8 == 0: whole Philox calls
    // Packed (unpadded) sequences: T = 7, 33, 128, 512, fused and GEMM paths.
    attention_case(4, 7, 72, 3, 0.3f, true);  // lengths 7, 5, 3, 2
    attention_case(3, 7, 96, 3, 0.3f, true, true);
    attention_case(4, 33, 192, 3, 0.1f, true);
    attention_case(4, 33, 40, 5, 0.1f, true);
    attention_case(3, 128, 384, 3, 0.1f, true, true);
    attention_case(3, 128, 72, 3, 0.1f, true);
    attention_case(3, 512, 64, 1, 0.1f, true, true);
    attention_case(2, 512, 40, 1, 0.1f, true);
    // Sliding windows (ModernBERT's local layers): key tiles skipped by the fused forward and
    // split backward, masked by the fused backward; packed; the GEMM path; a window wider than
    // the sequence.
    attention_case(1, 200, 128, 2, 0.1f, false, true, 20);  // head size 64, 4 key tiles
    attention_case(2, 128, 384, 3, 0.1f, false, false, 64); // head size 128
    attention_case(3, 160, 96, 3, 0.1f, true, true, 33);    // head size 32, packed
    attention_case(1, 512, 64, 1, 0.1f, false, true, 64);   // 8 key tiles, clusters of 8
    attention_case(2, 33, 40, 5, 0.1f, false, false, 5);    // head size 8: the GEMM path
    attention_case(1, 513, 64, 1, 0.1f, false, false, 64);  // past 512: split, drawn again
    attention_case(1, 1024, 64, 1, 0.1f, false, true, 64);  // ModernBERT's local layers at 1,024: 16 tiles, 3 each
    attention_case(2, 33, 192, 3, 0.1f, true, false, 100);  // a window wider than the sequence
    // Documents packed in a row (doc_bounds): key tiles skipped outside each block's documents,
    // masked inside; with a window; padded and packed; the fused and split backwards; the
    // GEMM path.
    attention_case(2, 200, 128, 2, 0.0f, true, true, 0, 37);   // head size 64, documents across tiles
    attention_case(2, 200, 128, 2, 0.1f, false, false, 0, 37); // padded, with dropout
    attention_case(1, 512, 64, 1, 0.1f, true, true, 0, 100);   // clusters of 8
    attention_case(1, 640, 64, 1, 0.0f, false, false, 16, 150); // past 512 (split), a window within documents
    attention_case(2, 160, 96, 3, 0.1f, true, false, 9, 20);   // head size 32, window and documents
    attention_case(2, 33, 40, 5, 0.0f, true, false, 0, 6);     // head size 8: the GEMM path
    attention_case(2, 33, 40, 5, 0.1f, false, false, 3, 6);    // the GEMM path, padded, a window
    // Their other ops at model widths: the vector and the scalar paths.
    layernorm_case(14, 72, false);
    layernorm_case(14, 72, false, 1);  // dinp_add: in place, the vector path
    layernorm_case(9, 30, true, 2);    // separate, the scalar path
    layernorm_case(37, 520, false, 1); // several warps per row
    residual_dropout_layernorm_case(37, 520, 0.2f, true, true, false);
    token_embeddings_case(70, 33, 72, 101, 3);
    rope_case(40, 20, 192, 3, 10000.0f, false);   // head size 64
    rope_case(64, 33, 768, 12, 160000.0f, true);  // ModernBERT-base's width and base
    rope_case(9, 9, 24, 2, 10000.0f, true);       // head size 12: odd pair counts
    geglu_case(14, 72, GELU_ERF);
    geglu_case(9, 30, GELU_TANH);  // the scalar path
    geglu_case(33, 1152, GELU_ERF);  // ModernBERT-base's intermediate size
    pointwise_cases(1000, 0.1f);
    pointwise_cases(77, 0.5f);
    residual_dropout_layernorm_case(14, 72, 0.1f, true);
    residual_dropout_layernorm_case(33, 40, 0.3f, false);
    residual_dropout_layernorm_case(9, 30, 0.2f, true);
    residual_dropout_layernorm_case(5, 72, 0.0f, true);
    residual_dropout_layernorm_case(37, 520, 0.2f, false);
    residual_dropout_layernorm_case(70, 1030, 0.1f, true);
    residual_dropout_layernorm_case(14, 72, 0.1f, true, true);
    residual_dropout_layernorm_case(9, 30, 0.2f, true, true);
    residual_dropout_layernorm_case(37, 520, 0.2f, false, true);
    residual_dropout_layernorm_case(70, 1030, 0.1f, true, true);
    residual_dropout_layernorm_case(21, 1024, 0.1f, true, true);  // BERT-large's width, 5 row groups
    bias_gelu_case(14, 72);
    bias_gelu_case(7, 30);
    bias_gelu_case(99, 40);
    bias_gelu_case(14, 72, GELU_TANH);
    bias_gelu_case(7, 30, GELU_TANH);
    bias_gelu_case(99, 40, GELU_TANH);
    matmul_gelu_case(14, 40, 72, 24);  // the epilogues (widths multiples of 8)
    matmul_gelu_case(33, 24, 144, 40);
    matmul_gelu_case(7, 16, 30, 12);   // width 30: the streaming path
    gather_case(14, 72, {3, 0, 13, 7, 7, 1});
    gather_case(40, 24, {5, 10, 15, 20, 25, 30, 35, 0, 39});
    {
        std::vector<int> many(75);  // row 7 taken 50 times: a run split into pieces
        for (int i = 0; i < 75; i++) many[i] = i % 3 ? 7 : (i * 5) % 40;
        gather_case(40, 136, many);
    }
    crossentropy_case(9, 37, 37);
    crossentropy_case(9, 37, 40);
    crossentropy_case(6, 1000, 1000);
    crossentropy_case(9, 37, 37, 0.1f);
    crossentropy_case(9, 37, 40, 0.2f);
    crossentropy_case(6, 1000, 1000, 0.2f);
    if (base) {
        // BERT-base shapes (GPU suite): B=4 T=128 C=768 NH=12 I=3072 V=30528.
        embeddings_case(4, 128, 768, 30528, 7);
        layernorm_case(512, 768);
        matmul_case(512, 768, 2304, true, 0);
        matmul_case(512, 3072, 768, true, 1);
        matmul_case(512, 768, 3072, true, 2);
        attention_case(4, 128, 768, 12, 0.1f, false, true);
        pointwise_cases(512 * 3072, 0.1f);
        residual_dropout_layernorm_case(512, 768, 0.1f, true);
        bias_gelu_case(512, 3072);
        bias_gelu_case(512, 3072, GELU_TANH);
        matmul_gelu_case(512, 768, 3072, 768);
        gather_case(512, 768, {1, 5, 9, 100, 200, 300, 400, 511, 0, 128, 256, 384});
        crossentropy_case(80, 30522, 30528);
    }
}

// After a full run: each op of the table that `exempt` does not name was called by a case.
static void report_uncalled(const backend_t *be, const std::set<std::string> &exempt, const std::string &what) {
    std::string missing;
#define UNCALLED(member) \
    if (be->member && !exempt.count(#member) && !called_ops.count(#member)) missing += " " #member;
    BACKEND_OPS(UNCALLED)
#undef UNCALLED
    report(missing.empty(), what, missing.empty() ? fmt("%zu ops", called_ops.size()) : "not called:" + missing);
}

#ifdef TEST_OPS_CUDA
static const char *usage = "usage: %s fp32|fp16|bf16 [--base] [-o OP[,OP...]] [--past-positions cpu|cuda]\n";
#else
static const char *usage = "usage: %s grad [-o OP[,OP...]]\n";
#endif

int main(int argc, char **argv) {
    const char *past_positions = nullptr;
    if (argc < 2) {
        fprintf(stderr, usage, argv[0]);
        return 2;
    }
    bool base = false;
    std::set<std::string> only;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--base")) {
            base = true;
        } else if (!strcmp(argv[i], "--past-positions") && i + 1 < argc) {
            past_positions = argv[++i];
        } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
            std::string list = argv[++i];
            for (size_t start = 0, end; start <= list.size(); start = end + 1) {
                end = list.find(',', start);
                if (end == std::string::npos) end = list.size();
                if (end > start) only.insert(list.substr(start, end - start));
            }
        } else {
            fprintf(stderr, usage, argv[0]);
            return 2;
        }
    }
    std::string p = argv[1];
#ifdef TEST_OPS_CUDA
    if (p == "fp32") prec = FP32, tolerance = 1e-5;
    else if (p == "fp16") prec = FP16, tolerance = 5e-3;
    else if (p == "bf16") prec = BF16, tolerance = 4e-2;
    else {
        fprintf(stderr, "unknown precision '%s' (fp32, fp16 or bf16)\n", p.c_str());
        return 2;
    }
#else
    if (p != "grad" || base || past_positions) {
        fprintf(stderr, usage, argv[0]);
        return 2;
    }
    prec = FP32;
#endif
    add_cases(base);
    std::set<std::string> known;
    for (const op_case &c : cases) known.insert(c.op);
    for (const std::string &op : only)
        if (!known.count(op)) {
            std::string names;
            for (const std::string &k : known) names += " " + k;
            fprintf(stderr, "-o: no op named '%s' (ops:%s)\n", op.c_str(), names.c_str());
            return 2;
        }
#ifndef TEST_OPS_CUDA
    const backend_t *be = watch_ops(&backend_cpu64);
    printf("backend %s against finite differences (h = %g)\n", be->name, GRAD_H);
    for (const op_case &c : cases)
        if (c.grad && (only.empty() || only.count(c.op))) run_grad(c, be);
    // The ops with no gradient to take: memory, and the optimizers (tested by `dump optim` against timm and torch).
    if (only.empty())
        report_uncalled(be, {"upload", "download", "zero", "params_to_compute", "lamb_step", "lars_step", "adamw_step",
                             "stableadamw_step"},
                        "every differentiable op of the table is called by a gradient case");
#else
#ifdef TEST_REAL_GPU
    if (int status = gpu_missing_exit_status()) return status;
    const backend_t *tables[] = {&backend_cuda_fp32, &backend_cuda_fp16, &backend_cuda_bf16};
#else
    const backend_t *tables[] = {&backend_cuda_emu_fp32, &backend_cuda_emu_fp16, &backend_cuda_emu_bf16};
#endif
    gpu = watch_ops(tables[prec]);
    if (past_positions) {
        const backend_t *be = !strcmp(past_positions, "cpu") ? cpu : gpu;
        const int B = 2, T = 9, P = 8, C = 16, N = B * T;
        std::vector<int> ids(N, 5), seg(N, 0);
        buffer id = make(be, INT, N), sg = make(be, INT, N), out = make(be, ACT, (size_t)N * C);
        buffer table = make(be, ACT, (size_t)(16 + P + 2 + 64) * C);  // wte, wpe, wtt and what follows
        fill(id, std::vector<float>(ids.begin(), ids.end())), fill(sg, std::vector<float>(seg.begin(), seg.end()));
        char *w = (char *)table.data();
        size_t row = (size_t)C * table.elem();
        be->embeddings_forward(out.data(), (const int *)id.data(), (const int *)sg.data(), nullptr, w, w + 16 * row,
                               w + (16 + P) * row, N, T, P, C);
        printf("embeddings_forward of T = %d on a table of %d rows on %s returned: it read past the table\n", T, P,
               be->name);
        return 3;
    }
    printf("backend %s against %s\n", gpu->name, cpu->name);
    if (base) {
        timing = true;
        sync_buf = make(gpu, INT, 1);
    }
    for (const op_case &c : cases)
        if (only.empty() || only.count(c.op)) run_compare(c);
    if (prec == FP32 && (only.empty() || only.count("gelu") || only.count("matmul_gelu"))) gelu_grad_grid_check();
    if (base) gpu->release(sync_buf.base);
    if (only.empty()) report_uncalled(gpu, {}, "every op of the backend table (BACKEND_OPS) is called by a case");
    // Every case released its buffers; the backend's shutdown frees what it keeps (workspaces,
    // and on a GPU cuBLASLt's handle, plans and workspace, streams, staging): nothing may be
    // left of the device memory (the ledger of device.h counts every allocation).
    size_t live_bytes = 0, live = gpu->shutdown(&live_bytes);
    report(live == 0, "device memory after the backend's shutdown",
           fmt("%zu allocation%s live, %zu bytes", live, live == 1 ? "" : "s", live_bytes));
#endif
    printf("%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
