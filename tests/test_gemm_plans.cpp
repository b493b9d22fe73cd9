// The GEMM plan cache (kernels/cuda/gemm_plans.h), on the emulated build, whose device_gemm
// keeps and counts the same plans as the GPU's:
// - buckets: x <= bucket(x) <= 1.125 x (exact up to 16), non-decreasing, bucket(bucket(x)) ==
//   bucket(x), for every x up to 2^20;
// - device_gemm asks one plan per bucket of n (counted by device_gemm_plan_stats), none
//   again for a bucket it has seen, and computes with the real n (its output against a
//   product in double, 1e-6: FP32 sums of 8 products of values in [-1, 1]);
// - at most GEMM_PLANS_MAX plans live, the least recently used evicted;
// - the unpadded runs of docs/PERFORMANCE.md: micro-batches of rows drawn from the length
//   histograms given as arguments (seq 128: 256 rows; seq 512: 32 rows), each calling the 12
//   token-wise GEMM shapes of a BERT-large layer (4 forward, 8 backward) for each of its 24
//   layers: plans made with exact keys (as before buckets: 12 per distinct N_real) against
//   bucketed keys, and the host time of a lookup (printed; the cuBLASLt heuristic query
//   itself needs a GPU);
// - the layout rules (gemm_check, cublasLt.h: ld >= rows of every column-major layout): the
//   GEMMs of the op tests and of BERT whose feature count is an operand's row count (the
//   input-gradient and weight-gradient GEMMs of a linear layer with 216, 37 or BERT's 30,528
//   outputs, the GEMM-path attention at T = 513) meet them with their keys' buckets, and
//   break them under the rule written here as it stood before (n and k both bucketed at
//   batch 1), which is what cuBLASLt would have been asked; the emulated device_gemm exits
//   naming the rule for a layout with more rows than its leading dimension and for a
//   pointer not aligned to its elements;
// - BERTPRE_TEST_EMU_GELU_EPILOGUE=none: device_gemm returns false for a GELU epilogue and
//   writes nothing (the callers' fallback, as when cuBLASLt has no algorithm);
// - the BGRADB epilogue (the weight gradient's GEMM, beta 1, B transposed): D as without it,
//   and the bias gradient the sums over k of op(B)'s columns, against sums in double (1e-6:
//   FP32 sums of 24 values in [-1, 1]), written, not added; with batch 2, or without its
//   vector, the emulated device_gemm exits naming the rule.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <random>
#include <set>
#include <string>
#include <vector>
#include "kernels/common/clock.h"
#include "kernels/cuda/common.cuh"

using namespace CUDA_NS;

static int failures = 0;
static void expect(bool ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failures++;
}

static void check_buckets() {
    bool ok = true;
    int prev = 0;
    for (int x = 1; x <= (1 << 20) && ok; x++) {
        int b = gemm_rows_bucket(x);
        ok = b >= x && (x <= 16 ? b == x : b <= x + x / 8) && b >= prev && gemm_rows_bucket(b) == b;
        prev = b;
    }
    expect(ok, "buckets: x <= bucket(x) <= 1.125 x, exact to 16, non-decreasing, idempotent, x up to 2^20");
}

static void check_device_gemm() {
    const int m = 16, k = 8, n_max = 400;
    std::vector<float> A((size_t)m * k), B((size_t)k * n_max), C((size_t)m * n_max);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float &v : A) v = u(rng);
    for (float &v : B) v = u(rng);
    device_gemm_plan_stats(true);
    long long before = device_gemm_plan_stats(false).queries;
    std::set<int> buckets;
    double worst = 0;
    for (int n = 17; n <= n_max; n++) {
        // C[m,n] = A[m,k] B[k,n], column-major
        device_gemm(false, false, m, n, k, 1.0f, A.data(), m, 0, B.data(), k, 0, 0.0f, C.data(), m, 0, 1, DTYPE_F32,
                    DTYPE_F32, nullptr);
        buckets.insert(gemm_rows_bucket(n));
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double s = 0;
                for (int p = 0; p < k; p++) s += (double)A[(size_t)p * m + i] * B[(size_t)j * k + p];
                worst = fmax(worst, fabs(C[(size_t)j * m + i] - s));
            }
    }
    gemm_plan_stats s = device_gemm_plan_stats(false);
    char what[200];
    snprintf(what, sizeof what, "device_gemm over n = 17..%d: %lld plans made for %zu buckets (%d row counts)", n_max,
             s.queries - before, buckets.size(), n_max - 16);
    expect(s.queries - before == (long long)buckets.size(), what);
    snprintf(what, sizeof what, "each run with its real n: max |error| %.2e against double (1e-6)", worst);
    expect(worst <= 1e-6, what);
    for (int n = 17; n <= n_max; n += 37)
        device_gemm(false, false, m, n, k, 1.0f, A.data(), m, 0, B.data(), k, 0, 0.0f, C.data(), m, 0, 1, DTYPE_F32,
                    DTYPE_F32, nullptr);
    expect(device_gemm_plan_stats(false).queries == s.queries, "no plan made again for a bucket already seen");
}

// Distinct shapes by m (never bucketed).
static gemm_key key_of(int m) {
    return gemm_plan_key(false, false, false, 0, m, 512, 1024, m, 1024, m, 0, 1, 0, 0, 0, 1, 1, 256, 256, 256, 0);
}

static void check_lru() {
    gemm_plan_cache<int> cache;
    int destroyed = 0;
    auto make = [](const gemm_key &g) { return g.n; };
    auto destroy = [&](int &) { destroyed++; };
    std::vector<gemm_key> keys;
    for (int i = 0; i < 300; i++) keys.push_back(key_of(1024 + i));
    for (const gemm_key &k : keys) cache.get(k, make, destroy);
    char what[200];
    snprintf(what, sizeof what, "300 distinct plans: %zu live (max %zu), %lld evicted, %d destroyed", cache.plans.size(),
             GEMM_PLANS_MAX, cache.stats.evictions, destroyed);
    expect(cache.plans.size() == GEMM_PLANS_MAX && cache.stats.evictions == 44 && destroyed == 44, what);
    long long q = cache.stats.queries;
    cache.get(keys[299], make, destroy);
    cache.get(keys[44], make, destroy);  // the oldest still kept
    expect(cache.stats.queries == q, "the 256 most recently used are kept");
    cache.get(keys[0], make, destroy);
    expect(cache.stats.queries == q + 1 && cache.plans.count(keys[45]) == 0,
           "a key evicted is made again, and the least recently used (not the oldest made) goes");
    cache.clear(destroy);
    expect(destroyed == 45 + 256 && cache.plans.empty(), "clear destroys every plan left");
}

// The 12 token-wise GEMMs of a BERT-large layer (C = 1024, I = 4096) for N rows, as
// matmul.cu calls them: forward out^T = W x inp^T, backward dinp and dweight.
static void layer_keys(int N, bool bucketed, std::vector<gemm_key> &out) {
    const int C = 1024, I = 4096;
    const int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, I}, {I, C}};  // IC, OC
    for (auto &s : shapes) {
        int IC = s[0], OC = s[1];
        gemm_key f = gemm_plan_key(true, false, true, 0, OC, N, IC, IC, IC, OC, 0, 1, 0, 0, 0, 1, 1, 256, 256, 256, 0);
        gemm_key d = gemm_plan_key(false, false, false, 0, IC, N, OC, IC, OC, IC, 0, 1, 0, 0, 0, 1, 1, 256, 256, 256, 0);
        gemm_key w = gemm_plan_key(false, true, false, 0, IC, OC, N, IC, OC, IC, 0, 1, 0, 0, 0, 1, 0, 256, 256, 256, 0);
        for (gemm_key *k : {&f, &d, &w}) {
            if (!bucketed) {
                if (k->trans_b) k->k = N;
                else k->n = N;
            }
            out.push_back(*k);
        }
    }
}

static std::vector<long> read_histogram(const char *path, int *T) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "test_gemm_plans: cannot open %s\n", path);
        exit(2);
    }
    std::vector<long> count;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        int L;
        long c;
        if (line[0] == '#' || sscanf(line, "%d %ld", &L, &c) != 2) continue;
        if ((int)count.size() <= L) count.resize(L + 1);
        count[L] = c;
    }
    fclose(f);
    *T = (int)count.size() - 1;
    return count;
}

static void simulate(const char *path, int rows, int micro_batches) {
    int T;
    std::vector<long> hist = read_histogram(path, &T);
    std::discrete_distribution<int> length(hist.begin(), hist.end());
    std::mt19937_64 rng(11);
    gemm_plan_cache<int> exact, bucketed;
    auto make = [](const gemm_key &) { return 0; };
    auto destroy = [](int &) {};
    std::set<int> distinct;
    int lo = 1 << 30, hi = 0;
    std::vector<gemm_key> keys;
    double t_exact = 0, t_bucketed = 0;
    for (int mb = 0; mb < micro_batches; mb++) {
        int N = 0;
        for (int r = 0; r < rows; r++) N += length(rng);
        distinct.insert(N);
        lo = std::min(lo, N), hi = std::max(hi, N);
        for (int pass = 0; pass < 2; pass++) {
            keys.clear();
            layer_keys(N, pass == 1, keys);
            gemm_plan_cache<int> &c = pass ? bucketed : exact;
            double t0 = now_seconds();
            for (int layer = 0; layer < 24; layer++)
                for (const gemm_key &k : keys) c.get(k, make, destroy);
            (pass ? t_bucketed : t_exact) += now_seconds() - t0;
        }
    }
    printf("%s: %d micro-batches of %d rows, %zu distinct N_real (%d-%d)\n", path, micro_batches, rows,
           distinct.size(), lo, hi);
    printf("  exact keys, every plan kept (before this cache): %zu plans made and live\n", 12 * distinct.size());
    printf("  exact keys, at most %zu kept: %lld plans made, %lld evicted, %zu live; %.0f ns per lookup\n",
           GEMM_PLANS_MAX, exact.stats.queries, exact.stats.evictions, exact.plans.size(), t_exact / exact.stats.lookups * 1e9);
    printf("  bucketed:   %lld plans made (heuristic queries), %lld evicted, %zu live; %.0f ns per lookup\n",
           bucketed.stats.queries, bucketed.stats.evictions, bucketed.plans.size(),
           t_bucketed / bucketed.stats.lookups * 1e9);
    std::set<int> buckets;
    for (int N : distinct) buckets.insert(gemm_rows_bucket(N));
    char what[200];
    snprintf(what, sizeof what, "bucketed: 12 plans per bucket of N_real (%zu buckets), none evicted",
             buckets.size());
    expect(bucketed.stats.queries == 12 * (long long)buckets.size() && bucketed.stats.evictions == 0, what);
    snprintf(what, sizeof what, "exact keys: every distinct N_real a new plan per shape, held to %zu live",
             GEMM_PLANS_MAX);
    expect(exact.stats.queries >= 12 * (long long)distinct.size() && exact.plans.size() <= GEMM_PLANS_MAX, what);
}

// A GEMM by its row-major roles, as the callers make it (matmul.cu, attention.cu).
struct gemm_call {
    std::string name;
    bool ta, tb;
    int m, n, k, lda, ldb, ldc;
};

static void check_layout_rules() {
    std::vector<gemm_call> calls;
    auto linear = [&](const std::string &what, int N, int IC, int OC) {
        calls.push_back({what + " forward", true, false, OC, N, IC, IC, IC, OC});
        calls.push_back({what + " dinp", false, false, IC, N, OC, IC, OC, IC});
        calls.push_back({what + " dweight", false, true, IC, OC, N, IC, OC, IC});
    };
    linear("linear N=14 IC=72 OC=216", 14, 72, 216);
    linear("linear N=7 IC=72 OC=37", 7, 72, 37);
    linear("MLM decoder N=5120 C=1024 Vp=30528", 5120, 1024, 30528);
    // The GEMM-path attention of one (sequence, head), T = 513, HS = 64 (attention.cu).
    const int T = 513, HS = 64;
    calls.push_back({"attention T=513 scores", true, false, T, T, HS, HS, HS, T});
    calls.push_back({"attention T=513 context", false, false, HS, T, T, HS, T, HS});
    calls.push_back({"attention T=513 dv", false, true, HS, T, T, HS, T, HS});
    calls.push_back({"attention T=513 dq", false, false, HS, T, T, HS, T, HS});
    char why[200];
    int broken_before = 0;
    for (const gemm_call &c : calls) {
        gemm_key key = gemm_plan_key(c.ta, c.tb, false, 0, c.m, c.n, c.k, c.lda, c.ldb, c.ldc, 0, 1, 0, 0, 0, 1, 1,
                                     256, 256, 256, 0);
        bool bucket_ok = !gemm_rule_broken(key, key.n, key.k, 0.0f, false, false, why, sizeof why);
        bool real_ok = !gemm_rule_broken(key, c.n, c.k, 0.0f, false, false, why, sizeof why);
        char what[300];
        snprintf(what, sizeof what, "%s: its plan's bucket (n %d, k %d) and its real size meet cuBLASLt's rules",
                 c.name.c_str(), key.n, key.k);
        expect(bucket_ok && real_ok, what);
        // The rule before: n and k rounded up whatever their role.
        gemm_key before = key;
        before.n = gemm_rows_bucket(c.n);
        before.k = gemm_rows_bucket(c.k);
        if (gemm_rule_broken(before, before.n, before.k, 0.0f, false, false, why, sizeof why)) {
            broken_before++;
            printf("     with n and k both bucketed: %s\n", why);
        }
    }
    // dinp and dweight of the three linear layers; the attention's context, dv and dq.
    char what[200];
    snprintf(what, sizeof what, "%d of these GEMMs broke ld >= rows with n and k both bucketed (expected 9)",
             broken_before);
    expect(broken_before == 9, what);
}

// Runs f in a child process; its exit status (or 128 + a signal), and what it wrote to
// stderr in err.
template <typename F>
static int in_child(F f, std::string &err) {
    int fds[2];
    if (pipe(fds)) return -1;
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        alarm(20);
        f();
        _exit(0);
    }
    close(fds[1]);
    char buf[1024];
    ssize_t got;
    err.clear();
    while ((got = read(fds[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)got);
    close(fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void check_emulated_refusals() {
    static float A[64 * 64], B[64 * 64], C[64 * 64];
    std::string err;
    // B is k x n = 16 x 8 with leading dimension 8.
    int rc = in_child([] { device_gemm(false, false, 8, 8, 16, 1.0f, A, 8, 0, B, 8, 0, 0.0f, C, 8, 0, 1, DTYPE_F32,
                                       DTYPE_F32, nullptr); }, err);
    expect(rc == 1 && err.find("B has 16 rows and leading dimension 8") != std::string::npos,
           "emulated device_gemm: B with 16 rows and ld 8 exits 1 naming the rule");
    if (rc != 1) printf("     exit %d: %s", rc, err.c_str());
    rc = in_child([] { device_gemm(false, false, 8, 8, 8, 1.0f, (const char *)A + 2, 8, 0, B, 8, 0, 0.0f, C, 8, 0, 1,
                                   DTYPE_F32, DTYPE_F32, nullptr); }, err);
    expect(rc == 1 && err.find("aligned to 2 bytes") != std::string::npos,
           "emulated device_gemm: an FP32 operand at a 2-byte offset exits 1 naming the alignment");
    rc = in_child([] {
        setenv("BERTPRE_TEST_EMU_GELU_EPILOGUE", "none", 1);
        static float bias[16], aux[16 * 8];
        for (float &c : C) c = 7.0f;
        bool ran = device_gemm(true, false, 16, 8, 8, 1.0f, A, 8, 0, B, 8, 0, 0.0f, C, 16, 0, 1, DTYPE_F32, DTYPE_F32,
                               bias, nullptr, GEMM_GELU_AUX_BIAS, aux, 16);
        bool untouched = true;
        for (float c : C) untouched = untouched && c == 7.0f;
        _exit(!ran && untouched ? 0 : 3);
    }, err);
    expect(rc == 0, "BERTPRE_TEST_EMU_GELU_EPILOGUE=none: a GELU epilogue GEMM returns false and writes nothing");

    // BGRADB as weight_grads calls it: D[m=IC, n=OC] += op(A)[IC,k] op(B)[k,OC], B stored
    // as [OC, k] (ld OC), transposed; the bias gradient of length OC.
    const int IC = 6, OC = 5, K = 24;
    std::vector<float> a(IC * K), b(OC * K), d(IC * OC, 0.5f), d_plain(IC * OC, 0.5f), sums(OC, 9.0f);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float &x : a) x = u(rng);
    for (float &x : b) x = u(rng);
    bool ran = device_gemm(false, true, IC, OC, K, 1.0f, a.data(), IC, 0, b.data(), OC, 0, 1.0f, d.data(), IC, 0, 1,
                           DTYPE_F32, DTYPE_F32, nullptr, nullptr, GEMM_BGRADB, nullptr, 0, sums.data());
    device_gemm(false, true, IC, OC, K, 1.0f, a.data(), IC, 0, b.data(), OC, 0, 1.0f, d_plain.data(), IC, 0, 1,
                DTYPE_F32, DTYPE_F32, nullptr);
    double worst = 0.0;
    for (int col = 0; col < OC; col++) {
        double want = 0.0;
        for (int kk = 0; kk < K; kk++) want += b[(size_t)kk * OC + col];
        worst = fmax(worst, fabs(sums[col] - want));
    }
    char what[160];
    snprintf(what, sizeof what,
             "BGRADB: D equal to the plain GEMM's, the bias gradient the column sums of op(B) (worst %.1e, 1e-6)", worst);
    expect(ran && d == d_plain && worst <= 1e-6, what);
    rc = in_child([] {
        static float v[16];
        device_gemm(false, true, 4, 4, 4, 1.0f, A, 4, 16, B, 4, 16, 1.0f, C, 4, 16, 2, DTYPE_F32, DTYPE_F32, nullptr,
                    nullptr, GEMM_BGRADB, nullptr, 0, v);
    }, err);
    expect(rc == 1 && err.find("the BGRADB epilogue needs batch 1") != std::string::npos,
           "emulated device_gemm: BGRADB over a batch of 2 exits 1 naming the rule");
    rc = in_child([] {
        device_gemm(false, true, 4, 4, 4, 1.0f, A, 4, 0, B, 4, 0, 1.0f, C, 4, 0, 1, DTYPE_F32, DTYPE_F32, nullptr,
                    nullptr, GEMM_BGRADB, nullptr, 0, nullptr);
    }, err);
    expect(rc == 1 && err.find("the BGRADB epilogue needs") != std::string::npos,
           "emulated device_gemm: BGRADB without its bias-gradient vector exits 1 naming the rule");
}

int main(int argc, char **argv) {
    check_layout_rules();
    check_emulated_refusals();
    check_buckets();
    check_device_gemm();
    check_lru();
    // Histogram paths: seq 128 (256 rows per micro-batch), then seq 512 (32 rows).
    const int rows[2] = {256, 32}, micro_batches[2] = {20000, 20000};
    for (int i = 1; i < argc && i <= 2; i++) simulate(argv[i], rows[i - 1], micro_batches[i - 1]);
    size_t live_bytes = 0;
    device_release(&live_bytes);
    device_gemm_plan_stats(true);
    expect(device_gemm_plan_stats(false).live == 0, "the backend's shutdown leaves no plan");
    printf("%s\n", failures ? "FAIL" : "all checks passed");
    return failures ? 1 : 0;
}
