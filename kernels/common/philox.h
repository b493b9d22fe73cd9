// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11) shared by host and
// device code, so that the CPU and GPU backends draw identical dropout masks and masking
// decisions. A draw is keyed by (seed, step, site, element): no generator state exists,
// which makes resume and cross-backend comparison exact.
#pragma once
#include <stdint.h>

#if defined(__CUDACC__)
#define BERTPRE_HD __host__ __device__
#else
#define BERTPRE_HD
#endif

typedef struct { uint32_t v[4]; } philox4x32;

static BERTPRE_HD inline philox4x32 philox4x32_10(philox4x32 ctr, uint32_t key0, uint32_t key1) {
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)M0 * ctr.v[0];
        uint64_t p1 = (uint64_t)M1 * ctr.v[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        philox4x32 next = {{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
        ctr = next;
        key0 += W0;
        key1 += W1;
    }
    return ctr;
}

// One 32-bit draw per element: the counter is (element / 4, site, step, element_hi) and the
// lane element % 4 of the block is used, so four neighbouring elements share one Philox call
// when a kernel wants to amortise it.
static BERTPRE_HD inline uint32_t philox_draw(uint64_t seed, uint32_t step, uint32_t site, uint64_t element) {
    philox4x32 ctr = {{(uint32_t)(element >> 2), site, step, (uint32_t)(element >> 34)}};
    philox4x32 out = philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
    return out.v[element & 3];
}

// Uniform in [0, 1) with 24 bits, exactly representable in FP32 on every backend.
static BERTPRE_HD inline float philox_uniform(uint64_t seed, uint32_t step, uint32_t site, uint64_t element) {
    return (float)(philox_draw(seed, step, site, element) >> 8) * (1.0f / 16777216.0f);
}

// Dropout site: which dropout in the model, at which optimizer step, with which seed.
// p == 0 means the identity (evaluation, or dropout disabled).
typedef struct {
    float p;
    uint32_t step;
    uint32_t site;
    uint64_t seed;
} dropout_t;

static BERTPRE_HD inline int dropout_keep(dropout_t d, uint64_t element) {
    return d.p <= 0.0f || philox_uniform(d.seed, d.step, d.site, element) >= d.p;
}
