// The GEMM plan cache of device.h, the same in both builds (host code only): which GEMMs
// share a plan, and how many plans are kept. A plan is what device_gpu.cu makes with one
// cuBLASLt heuristic query (descriptors, layouts, the chosen algorithm); the emulation keeps
// the same cache with empty plans, so that its counts are the GPU's.
//
// Under unpadding every micro-batch has another row count, and a plan per exact shape meant
// one heuristic query per GEMM per micro-batch, kept for the whole run. So the dimensions
// that follow the row count (n and k: the tokens of a forward or input-gradient GEMM, the
// reduction of a weight-gradient GEMM; m is always a feature count) are rounded up to a
// bucket, eight per octave (at most 12.5% above the real count; up to 16 exact): the
// heuristic is asked once per bucket, for the bucket's size, and the plan runs with the real
// dimensions. At most GEMM_PLANS_MAX plans are kept; past that the least recently used goes.
#pragma once
#include <stdint.h>
#include <map>
#include <tuple>
#include <utility>

namespace CUDA_NS {

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
    uint32_t align_a, align_b, align_c, align_aux;
    bool operator<(const gemm_key &o) const {
        return std::tie(trans_a, trans_b, bias, gelu, m, n, k, lda, ldb, ldc, ld_aux, batch, stride_a, stride_b,
                        stride_c, ab_type, c_type, align_a, align_b, align_c, align_aux) <
               std::tie(o.trans_a, o.trans_b, o.bias, o.gelu, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.ld_aux, o.batch,
                        o.stride_a, o.stride_b, o.stride_c, o.ab_type, o.c_type, o.align_a, o.align_b, o.align_c,
                        o.align_aux);
    }
};

// The key of a GEMM call of device.h (aux ld and alignment 0 without a GELU epilogue): n and
// k by their buckets when batch is 1.
static inline gemm_key gemm_plan_key(bool trans_a, bool trans_b, bool bias, int gelu, int m, int n, int k, int lda,
                                     int ldb, int ldc, int ld_aux, int batch, long long stride_a, long long stride_b,
                                     long long stride_c, int ab_type, int c_type, uint32_t align_a, uint32_t align_b,
                                     uint32_t align_c, uint32_t align_aux) {
    bool bucket = batch == 1;
    return gemm_key{trans_a, trans_b, bias, gelu, m, bucket ? gemm_rows_bucket(n) : n,
                    bucket ? gemm_rows_bucket(k) : k, lda, ldb, ldc, gelu ? ld_aux : 0, batch, stride_a, stride_b,
                    stride_c, ab_type, c_type, align_a, align_b, align_c, gelu ? align_aux : 0};
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
