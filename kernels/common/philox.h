// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11) shared by host and
// device code, so that the CPU and GPU backends draw identical dropout masks and masking
// decisions. A draw is keyed by (seed, step, site, element): no generator state exists,
// which makes resume and cross-backend comparison exact.
#pragma once
#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define BERTPRE_HD __host__ __device__
#else
#define BERTPRE_HD
#endif

typedef struct { uint32_t v[4]; } philox4x32;

// The high 32 bits of the 64-bit product a * b: one multiply-high instruction on the GPU.
// Written as a 64-bit product, nvcc keeps the rounds' values in 64-bit registers (64-bit
// multiplies, xors and masks in its PTX), several times the instructions per round.
static BERTPRE_HD inline uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return (uint32_t)(((uint64_t)a * b) >> 32);
#endif
}

#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

// One round with the round's key (key0, key1).
static BERTPRE_HD inline philox4x32 philox_round(philox4x32 ctr, uint32_t key0, uint32_t key1) {
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
    uint32_t hi0 = philox_mulhi(M0, ctr.v[0]), lo0 = M0 * ctr.v[0];
    uint32_t hi1 = philox_mulhi(M1, ctr.v[2]), lo1 = M1 * ctr.v[2];
    philox4x32 next = {{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
    return next;
}

static BERTPRE_HD inline philox4x32 philox4x32_10(philox4x32 ctr, uint32_t key0, uint32_t key1) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int round = 0; round < 10; round++) {
        ctr = philox_round(ctr, key0, key1);
        key0 += PHILOX_W0;
        key1 += PHILOX_W1;
    }
    return ctr;
}

// The ten rounds' keys of one key (round r: key + r * (W0, W1)), computed once for every
// call that shares the key: a kernel that takes them as a parameter reads them as operands
// instead of adding them again in each call.
typedef struct { uint32_t k[10][2]; } philox_keys;

static BERTPRE_HD inline philox_keys philox_key_schedule(uint64_t key) {
    philox_keys s;
    uint32_t key0 = (uint32_t)key, key1 = (uint32_t)(key >> 32);
    for (int round = 0; round < 10; round++) {
        s.k[round][0] = key0, s.k[round][1] = key1;
        key0 += PHILOX_W0;
        key1 += PHILOX_W1;
    }
    return s;
}

// philox4x32_10 with the key's schedule: the same numbers.
static BERTPRE_HD inline philox4x32 philox4x32_10_scheduled(philox4x32 ctr, const philox_keys *s) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int round = 0; round < 10; round++) ctr = philox_round(ctr, s->k[round][0], s->k[round][1]);
    return ctr;
}

// The counter of a draw: (group, site, step, group_hi).
static BERTPRE_HD inline philox4x32 philox_counter(uint32_t step, uint32_t site, uint64_t group) {
    philox4x32 ctr = {{(uint32_t)group, site, step, (uint32_t)(group >> 32)}};
    return ctr;
}

// The four draws of elements 4*group .. 4*group+3 from one Philox call, counter
// (group, site, step, group_hi): what a kernel uses when it handles four neighbouring
// elements, one Philox call for the four.
static BERTPRE_HD inline philox4x32 philox_draw4(uint64_t seed, uint32_t step, uint32_t site, uint64_t group) {
    return philox4x32_10(philox_counter(step, site, group), (uint32_t)seed, (uint32_t)(seed >> 32));
}

// One 32-bit draw per element: lane element % 4 of the call for group element / 4, so
// philox_draw(..., 4*g + i) == philox_draw4(..., g).v[i] and the per-element and the
// four-at-a-time code paths give the same numbers.
static BERTPRE_HD inline uint32_t philox_draw(uint64_t seed, uint32_t step, uint32_t site, uint64_t element) {
    return philox_draw4(seed, step, site, element >> 2).v[element & 3];
}

// Uniform in [0, 1) with 24 bits, exactly representable in FP32 on every backend.
static BERTPRE_HD inline float philox_bits_to_uniform(uint32_t bits) { return (float)(bits >> 8) * (1.0f / 16777216.0f); }
static BERTPRE_HD inline float philox_uniform(uint64_t seed, uint32_t step, uint32_t site, uint64_t element) {
    return philox_bits_to_uniform(philox_draw(seed, step, site, element));
}

// Dropout site: which dropout in the model, at which optimizer step, with which seed.
// p == 0 means the identity (evaluation, or dropout disabled).
// row_map (backend memory, may be NULL): the op's tensor is rows of row_len elements, and
// row r stands for row row_map[r] of the tensor the decisions are keyed by, so element
// r * row_len + c draws as element row_map[r] * row_len + c. The unpadded model passes the
// padded row of each real token, so that it draws exactly the padded model's masks.
// keep_bits (backend memory, may be NULL): where the CUDA LayerNorm + dropout forward of a
// [rows, C] tensor stores its decisions, 1 bit per element (row r's bits from word
// r * dropout_keep_words(C), column c in byte c / 8, bit c % 8), and where its backward
// reads them instead of drawing again. The CPU backend draws again (the same decisions).
typedef struct {
    float p;
    uint32_t step;
    uint32_t site;
    uint64_t seed;
    const int *row_map;
    int row_len;
    uint32_t *keep_bits;
} dropout_t;

// 32-bit words of keep bits per row of C elements (dropout_t's keep_bits).
static BERTPRE_HD inline int dropout_keep_words(int C) { return (C + 31) / 32; }

// The element index that element 0 of row `row` of a [rows, row_len] op is keyed by: row
// times row_len, or through the row map (whose row_len is the op's). A kernel that walks a
// row reads the map once here, and keys column c as this + c, without a division.
static BERTPRE_HD inline uint64_t dropout_row_first(dropout_t d, uint64_t row, int row_len) {
    return (uint64_t)(d.row_map ? (uint64_t)d.row_map[row] : row) * (uint64_t)row_len;
}

// The element index the decision of `element` is keyed by (itself without a row map).
static BERTPRE_HD inline uint64_t dropout_keyed_element(dropout_t d, uint64_t element) {
    if (!d.row_map) return element;
    // A 32-bit division where the index allows (every activation of today's models): a 64-bit
    // one is a long inlined routine on the GPU.
    uint64_t r = element <= 0xffffffffu ? (uint64_t)((uint32_t)element / (uint32_t)d.row_len)
                                        : element / (uint64_t)d.row_len;
    return (uint64_t)d.row_map[r] * (uint64_t)d.row_len + (element - r * (uint64_t)d.row_len);
}

// Dropout decisions take 16 bits of a draw, so that one Philox call decides eight
// neighbouring elements: element e uses the call for group e / 8 (philox_draw4's counter),
// word (e / 2) % 4, its low half for even e and its high half for odd e. Read as an integer
// u in [0, 2^16), the element is kept when u >= ceil(p * 2^16), which is u / 2^16 >= p
// exactly (p * 2^16 is exact in FP32; a threshold of 2^16 keeps nothing). The resolution
// of p is 2^-16: p = 0.1 drops with probability 6554 / 65536 = 0.100006.
static BERTPRE_HD inline uint32_t dropout_threshold(float p) {
    float t = ceilf(p * 65536.0f);
    return t >= 65536.0f ? 65536u : (uint32_t)t;
}

// The keep decisions of the eight elements of one Philox call's output as bits 0-7.
static BERTPRE_HD inline unsigned dropout_bits8(philox4x32 r, uint32_t threshold) {
    unsigned bits = 0;
    for (int i = 0; i < 8; i++)
        if ((r.v[i >> 1] >> (16 * (i & 1)) & 0xffffu) >= threshold) bits |= 1u << i;
    return bits;
}

// The keep decisions of keyed elements 8*group .. 8*group+7 as bits 0-7: one Philox call.
static BERTPRE_HD inline unsigned dropout_keep8_keyed(dropout_t d, uint64_t group) {
    return dropout_bits8(philox_draw4(d.seed, d.step, d.site, group), dropout_threshold(d.p));
}

// The keep decisions of elements 8*group .. 8*group+7 as bits 0-7: one Philox call, also
// through a row map whose rows are whole groups of eight (row_len % 8 == 0, every model
// width); rows of other lengths take one call per element.
// One Philox call site serves both common cases, and the per-element loop is not unrolled on
// the device: every inlined copy of a Philox call costs a kernel about 110 instructions.
static BERTPRE_HD inline unsigned dropout_keep8(dropout_t d, uint64_t group) {
    if (d.p <= 0.0f) return 255u;
    if (!d.row_map || d.row_len % 8 == 0)
        return dropout_keep8_keyed(d, d.row_map ? dropout_keyed_element(d, group * 8) / 8 : group);
    unsigned bits = 0;
#ifdef __CUDA_ARCH__
#pragma unroll 1
#endif
    for (int i = 0; i < 8; i++) {
        uint64_t e = dropout_keyed_element(d, group * 8 + i);
        bits |= (dropout_keep8_keyed(d, e / 8) >> (e & 7) & 1u) << i;
    }
    return bits;
}

// dropout_keep8 for a group of elements given by their keyed index, never through a row map:
// an op whose elements are keyed by their own index (the attention probabilities, keyed by
// the padded (b, h, i, j) in both layouts), or a row kernel that keys its columns from
// dropout_row_first. The row-map paths are left out of the kernel's code.
static BERTPRE_HD inline unsigned dropout_keep8_unmapped(dropout_t d, uint64_t group) {
    return d.p <= 0.0f ? 255u : dropout_keep8_keyed(d, group);
}

// What every draw of one dropout site shares, computed once on the host: the seed's key
// schedule, the step, the site and the threshold. A kernel that draws many groups takes it as
// a parameter (dropout_keep8_scheduled): the same decisions as dropout_keep8_keyed.
typedef struct {
    philox_keys keys;
    uint32_t step, site, threshold;
} dropout_schedule;

static BERTPRE_HD inline dropout_schedule dropout_schedule_of(dropout_t d) {
    dropout_schedule s;
    s.keys = philox_key_schedule(d.seed);
    s.step = d.step, s.site = d.site, s.threshold = dropout_threshold(d.p);
    return s;
}

static BERTPRE_HD inline unsigned dropout_keep8_scheduled(const dropout_schedule *s, uint64_t group) {
    return dropout_bits8(philox4x32_10_scheduled(philox_counter(s->step, s->site, group), &s->keys), s->threshold);
}

// One element's decision (1: kept), and elements 4*group .. 4*group+3 as bits 0-3 (half of
// a call's eight; a kernel that handles four elements at a time).
static BERTPRE_HD inline int dropout_keep(dropout_t d, uint64_t element) {
    return (int)(dropout_keep8(d, element >> 3) >> (element & 7) & 1u);
}
static BERTPRE_HD inline unsigned dropout_keep4(dropout_t d, uint64_t group) {
    return dropout_keep8(d, group >> 1) >> (4 * (group & 1)) & 15u;
}

// Keep decisions for elements visited in increasing order (a row that need not start on a
// multiple of eight): one Philox call per group of eight, reused while the group lasts.
typedef struct {
    uint64_t group;
    unsigned bits;
} dropout_walk;

static BERTPRE_HD inline dropout_walk dropout_walk_start(void) {
    dropout_walk w = {UINT64_MAX, 0u};
    return w;
}

static BERTPRE_HD inline int dropout_walk_keep(dropout_walk *w, dropout_t d, uint64_t element) {
    if (element / 8 != w->group) {
        w->group = element / 8;
        w->bits = dropout_keep8(d, w->group);
    }
    return (int)((w->bits >> (element & 7)) & 1u);
}
