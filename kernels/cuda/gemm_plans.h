// The GEMM plan cache of device.h, the same in both builds (host code only): which GEMMs
// share a plan, how many plans are kept, and the rules every GEMM call must meet. A plan is
// what device_gpu.cu makes with one cuBLASLt heuristic query (descriptors, layouts, the
// chosen algorithm); the emulation keeps the same cache with empty plans, so that its counts
// are the GPU's, and checks each call against the same rules (gemm_check), so that a call
// cuBLASLt would refuse fails in the emulated tests too.
//
// Under unpadding every micro-batch has another row count, and a plan per exact shape meant
// one heuristic query per GEMM per micro-batch, kept for the whole run. So a dimension that
// follows the row count is rounded up to a bucket, eight per octave (at most 12.5% above the
// real count; up to 16 exact): the heuristic is asked once per bucket, for the bucket's
// size, and the plan runs with the real dimensions. Only a dimension that is a column count
// of every operand it spans is bucketed: n when B is not transposed (the tokens of a forward
// or input-gradient GEMM), k when A is not and B is (the reduction of a weight-gradient
// GEMM). A row count is never bucketed, since cuBLASLt requires ld >= rows of each layout
// and a bucket above the leading dimension is a layout it refuses. At most GEMM_PLANS_MAX
// plans are kept; past that the least recently used goes.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <map>
#include <tuple>
#include <utility>
#include "kernels/common/check.h"

namespace CUDA_NS {

enum dtype_t { DTYPE_F32, DTYPE_F16, DTYPE_BF16 };

// The epilogues of device_gemm (device.h) beyond the plain bias: the two GELU epilogues, and
// the bias gradient of B alone (BGRADB).
enum gemm_gelu { GEMM_NO_GELU, GEMM_GELU_AUX_BIAS, GEMM_DGELU_BGRAD, GEMM_BGRADB };
static inline bool gemm_is_gelu(int e) { return e == GEMM_GELU_AUX_BIAS || e == GEMM_DGELU_BGRAD; }

// The bucket of a row-dependent dimension (batch 1 only: a batched GEMM's strides are
// sized for its exact dimensions): x itself up to 16, above that x rounded up to a
// multiple of 2^(floor(log2 x) - 3).
static inline int gemm_rows_bucket(int x) {
    if (x <= 16) return x;
    int e = 31 - __builtin_clz((unsigned)x);
    long long step = 1ll << (e - 3);
    long long r = (x + step - 1) / step * step;
    return r > 0x7fffffff ? x : (int)r;
}

struct gemm_key {
    bool trans_a, trans_b, bias;
    int gelu;  // gemm_gelu
    int m, n, k, lda, ldb, ldc, ld_aux, batch;  // n and k: their buckets
    long long stride_a, stride_b, stride_c;
    int ab_type, c_type;
    uint32_t align_a, align_b, align_c, align_aux, align_vector;  // align_vector: the bias or bias gradient's
    bool operator<(const gemm_key &o) const {
        return std::tie(trans_a, trans_b, bias, gelu, m, n, k, lda, ldb, ldc, ld_aux, batch, stride_a, stride_b,
                        stride_c, ab_type, c_type, align_a, align_b, align_c, align_aux, align_vector) <
               std::tie(o.trans_a, o.trans_b, o.bias, o.gelu, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.ld_aux, o.batch,
                        o.stride_a, o.stride_b, o.stride_c, o.ab_type, o.c_type, o.align_a, o.align_b, o.align_c,
                        o.align_aux, o.align_vector);
    }
};

// The largest power of two up to 256 that divides the address (cuBLASLt's alignment
// preferences and its rules are in bytes).
static inline uint32_t gemm_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t align = 256;
    while (align > 1 && a % align) align /= 2;
    return align;
}

static inline int gemm_type_bytes(int type) { return type == DTYPE_F32 ? 4 : 2; }

// Which of n and k a key buckets (see the top of this file): only a column count.
static inline bool gemm_buckets_n(bool trans_b, int batch) { return batch == 1 && !trans_b; }
static inline bool gemm_buckets_k(bool trans_a, bool trans_b, int batch) { return batch == 1 && !trans_a && trans_b; }

// The key of a GEMM call of device.h (aux ld and alignment 0 without a GELU epilogue, the
// vector's alignment 0 without one): n and k by their buckets where gemm_buckets_* say so.
static inline gemm_key gemm_plan_key(bool trans_a, bool trans_b, bool bias, int gelu, int m, int n, int k, int lda,
                                     int ldb, int ldc, int ld_aux, int batch, long long stride_a, long long stride_b,
                                     long long stride_c, int ab_type, int c_type, uint32_t align_a, uint32_t align_b,
                                     uint32_t align_c, uint32_t align_aux, uint32_t align_vector = 0) {
    return gemm_key{trans_a, trans_b, bias, gelu, m, gemm_buckets_n(trans_b, batch) ? gemm_rows_bucket(n) : n,
                    gemm_buckets_k(trans_a, trans_b, batch) ? gemm_rows_bucket(k) : k, lda, ldb, ldc,
                    gemm_is_gelu(gelu) ? ld_aux : 0, batch, stride_a, stride_b, stride_c, ab_type, c_type, align_a,
                    align_b, align_c, gemm_is_gelu(gelu) ? align_aux : 0, align_vector};
}

// The first rule that a call with key g at dimensions n and k breaks, written into why; 0
// when it meets them all. beta, and whether the call passes the epilogue's vector (bias, or
// the bias gradient of DGELU_BGRAD) and aux matrix, are the call's. The rules:
// - cublasLt.h, CUBLASLT_MATRIX_LAYOUT_LD: ld >= rows for each column-major layout (A is
//   k x m transposed or m x k, B n x k or k x n, C and D m x n), so that no two elements
//   share memory; dimensions and leading dimensions positive;
// - every pointer aligned to its element's size, the aux matrix to 16 bytes;
// - CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD (GELU_AUX_BIAS, DGELU_BGRAD): ld_aux a multiple of
//   8 and >= m; device.h adds batch 1, beta 0 and one type for A, B, C and aux, as the
//   epilogues are used here, the bias required by GELU_AUX_BIAS and the bias gradient
//   written by DGELU_BGRAD;
// - a bias only where C has A's type (the bias takes the output's type, device.h);
// - CUBLASLT_EPILOGUE_BGRADB: the bias gradient (the output's type, written, not added), of
//   length n, the sums of op(B) over k; device.h adds batch 1, no bias and no aux, as used here;
// - the matrices of a strided batch of C must not overlap (each element written once).
static inline bool gemm_rule_broken(const gemm_key &g, int n, int k, float beta, bool has_vector, bool has_aux,
                                    char *why, size_t size) {
    int a_rows = g.trans_a ? k : g.m, b_rows = g.trans_b ? n : k;
    uint32_t ab_bytes = (uint32_t)gemm_type_bytes(g.ab_type), c_bytes = (uint32_t)gemm_type_bytes(g.c_type);
    if (g.m <= 0 || n <= 0 || k <= 0 || g.batch <= 0)
        snprintf(why, size, "every dimension must be positive");
    else if (a_rows > g.lda)
        snprintf(why, size, "A%s has %d rows and leading dimension %d (cuBLASLt: ld >= rows)", g.trans_a ? "^T" : "",
                 a_rows, g.lda);
    else if (b_rows > g.ldb)
        snprintf(why, size, "B%s has %d rows and leading dimension %d (cuBLASLt: ld >= rows)", g.trans_b ? "^T" : "",
                 b_rows, g.ldb);
    else if (g.m > g.ldc)
        snprintf(why, size, "C has %d rows and leading dimension %d (cuBLASLt: ld >= rows)", g.m, g.ldc);
    else if (g.batch > 1 && g.stride_c < (long long)g.ldc * n)
        snprintf(why, size, "the batch's C matrices overlap: stride %lld < ldc %d x n %d", g.stride_c, g.ldc, n);
    else if ((g.align_a && g.align_a < ab_bytes) || (g.align_b && g.align_b < ab_bytes) ||
             (g.align_c && g.align_c < c_bytes))
        snprintf(why, size, "a matrix pointer is aligned to %u bytes, less than its %u-byte elements",
                 g.align_a < ab_bytes ? g.align_a : g.align_b < ab_bytes ? g.align_b : g.align_c,
                 g.align_a < ab_bytes || g.align_b < ab_bytes ? ab_bytes : c_bytes);
    else if (g.bias && g.c_type != g.ab_type)
        snprintf(why, size, "a bias with C in another type than A and B");
    else if (has_vector && g.align_vector && g.align_vector < c_bytes)
        snprintf(why, size, "the bias vector is aligned to %u bytes, less than its %u-byte elements", g.align_vector,
                 c_bytes);
    else if (g.gelu == GEMM_BGRADB && (g.batch != 1 || g.bias || has_aux || !has_vector))
        snprintf(why, size, "the BGRADB epilogue needs batch 1, its bias gradient, and no bias or aux (batch %d)",
                 g.batch);
    else if (gemm_is_gelu(g.gelu) && (g.batch != 1 || beta != 0.0f || g.c_type != g.ab_type))
        snprintf(why, size, "a GELU epilogue needs batch 1, beta 0 and C in A's type (batch %d, beta %g)", g.batch,
                 beta);
    else if (gemm_is_gelu(g.gelu) && (!has_aux || !has_vector))
        snprintf(why, size, "a GELU epilogue needs its aux matrix and its %s",
                 g.gelu == GEMM_GELU_AUX_BIAS ? "bias" : "bias gradient");
    else if (gemm_is_gelu(g.gelu) && (g.ld_aux < g.m || g.ld_aux % 8))
        snprintf(why, size, "the GELU epilogue's aux leading dimension %d is not a multiple of 8 at least m = %d",
                 g.ld_aux, g.m);
    else if (gemm_is_gelu(g.gelu) && g.align_aux && g.align_aux < 16)
        snprintf(why, size, "the GELU epilogue's aux matrix is aligned to %u bytes, not 16", g.align_aux);
    else
        return false;
    return true;
}

// Exits naming the GEMM and the rule when the call breaks one, at the dimensions its plan's
// heuristic is asked for (the key's buckets) and at its real ones. `who` starts the message
// ("" on a GPU, "CUDA emulation: " in the emulated build).
static inline void gemm_check(const gemm_key &g, int n, int k, float beta, bool has_vector, bool has_aux,
                              const char *who) {
    char why[200];
    const int dims[2][2] = {{g.n, g.k}, {n, k}};
    for (const auto &d : dims)
        if (gemm_rule_broken(g, d[0], d[1], beta, has_vector, has_aux, why, sizeof why))
            fatal("%sa GEMM outside what cuBLASLt takes (device.h): m=%d n=%d k=%d%s (%s%s, lda %d, "
                  "ldb %d, ldc %d, batch %d): %s",
                  who, g.m, d[0], d[1], d[0] != n || d[1] != k ? ", the plan's bucket" : "", g.trans_a ? "T" : "N",
                  g.trans_b ? "T" : "N", g.lda, g.ldb, g.ldc, g.batch, why);
}

static const size_t GEMM_PLANS_MAX = 256;

// Counts since the process started (or the last reset): queries are plans made (one
// heuristic query each on a GPU), lookups every GEMM call.
struct gemm_plan_stats {
    long long lookups, queries, evictions;
    size_t live;
};

// Plans by key, least recently used evicted past GEMM_PLANS_MAX (destroy(plan) frees one).
template <typename Plan>
struct gemm_plan_cache {
    struct entry {
        Plan plan;
        unsigned long long used;
    };
    std::map<gemm_key, entry> plans;
    unsigned long long clock = 0;
    gemm_plan_stats stats = {0, 0, 0, 0};

    // The plan for key, made by make(key) when there is none.
    template <typename Make, typename Destroy>
    Plan &get(const gemm_key &key, Make make, Destroy destroy) {
        stats.lookups++;
        auto it = plans.find(key);
        if (it == plans.end()) {
            if (plans.size() >= GEMM_PLANS_MAX) {
                auto oldest = plans.begin();
                for (auto i = plans.begin(); i != plans.end(); ++i)
                    if (i->second.used < oldest->second.used) oldest = i;
                destroy(oldest->second.plan);
                plans.erase(oldest);
                stats.evictions++;
            }
            stats.queries++;
            it = plans.emplace(key, entry{make(key), 0}).first;
        }
        it->second.used = ++clock;
        stats.live = plans.size();
        return it->second.plan;
    }
    template <typename Destroy>
    void clear(Destroy destroy) {
        for (auto &e : plans) destroy(e.second.plan);
        plans.clear();
        stats.live = 0;
    }
};

}  // namespace CUDA_NS
