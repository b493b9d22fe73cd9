// The counter-based generator against the published known-answer vectors of Philox4x32-10
// (Random123's kat_vectors: counter, key -> output), and the statistics of its uniforms.
#include "kernels/common/philox.h"
#include "tests/test_util.h"

int main(void) {
    static const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        philox4x32 c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
        philox4x32 o = philox4x32_10(c, kat[i].key[0], kat[i].key[1]);
        int ok = 1;
        for (int k = 0; k < 4; k++) ok &= o.v[k] == kat[i].out[k];
        char what[64];
        snprintf(what, sizeof what, "Philox4x32-10 known-answer vector %d", i);
        expect_true(what, ok);
    }
    // Uniforms: mean 1/2 and variance 1/12 within 5 standard errors over 1e6 draws.
    double sum = 0.0, sq = 0.0;
    const int n = 1000000;
    for (int i = 0; i < n; i++) {
        double u = philox_uniform(42, 7, 3, (uint64_t)i);
        sum += u, sq += u * u;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    printf("     mean %.6f, variance %.6f\n", mean, var);
    expect_true("uniform mean within 5 standard errors of 1/2", fabs(mean - 0.5) < 5 * sqrt(1.0 / 12 / n));
    expect_true("uniform variance within 1% of 1/12", fabs(var - 1.0 / 12) < 0.01 / 12);
    expect_true("different steps give different draws", philox_draw(1, 0, 0, 0) != philox_draw(1, 1, 0, 0));
    // The element layout: element e is lane e % 4 of the call with counter
    // (e / 4, site, step, e >> 34) and key (seed low, seed high); philox_draw4 gives the same.
    // Dropout: element e's 16 bits are half e % 2 (low half first) of word (e / 2) % 4 of the
    // call for group e / 8, kept when they are >= p * 2^16; the eight-, four-at-a-time and
    // walking helpers give the same decisions as the per-element one.
    int layout_ok = 1, keep_ok = 1, keep8_ok = 1;
    const uint64_t seed = 0x123456789abcdefULL, bases[] = {0, 4093, (1ULL << 34) - 6, 3ULL << 40};
    dropout_t d = {.p = 0.3f, .step = 11, .site = 5, .seed = seed};
    long kept = 0, decided = 0;
    for (int b = 0; b < 4; b++)
        for (uint64_t e = bases[b]; e < bases[b] + 64; e++) {
            philox4x32 c = {{(uint32_t)(e >> 2), 5, 11, (uint32_t)(e >> 34)}};
            uint32_t expect = philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32)).v[e & 3];
            layout_ok &= philox_draw(seed, 11, 5, e) == expect && philox_draw4(seed, 11, 5, e >> 2).v[e & 3] == expect;
            philox4x32 c8 = {{(uint32_t)(e >> 3), 5, 11, (uint32_t)(e >> 35)}};
            uint32_t word = philox4x32_10(c8, (uint32_t)seed, (uint32_t)(seed >> 32)).v[(e >> 1) & 3];
            uint32_t u16 = (e & 1 ? word >> 16 : word) & 0xffffu;
            int keep = (double)u16 / 65536.0 >= 0.3;
            keep_ok &= dropout_keep(d, e) == keep;
            keep_ok &= (int)((dropout_keep4(d, e >> 2) >> (e & 3)) & 1) == keep;
            keep8_ok &= (int)((dropout_keep8(d, e >> 3) >> (e & 7)) & 1) == keep;
            kept += keep, decided++;
        }
    expect_true("element layout: counter (e/4, site, step, e>>34), lane e%4; philox_draw4 the same", layout_ok);
    expect_true("dropout_keep and dropout_keep4: 16 bits of word (e/2)%4 of call e/8 >= p * 2^16 (p = 0.3)", keep_ok);
    expect_true("dropout_keep8 bits equal the per-element decisions", keep8_ok);
    printf("     kept %ld of %ld at p = 0.3\n", kept, decided);
    dropout_walk w = dropout_walk_start();
    int walk_ok = 1;
    for (uint64_t e = 4093; e < 4093 + 37; e++) walk_ok &= dropout_walk_keep(&w, d, e) == dropout_keep(d, e);
    expect_true("dropout_walk from an element not a multiple of 8 equals dropout_keep", walk_ok);
    // The keep rate over 2^20 elements at p = 0.1: within 5 standard errors of 0.9.
    d.p = 0.1f;
    long kept_all = 0;
    const long m = 1L << 20;
    for (long g = 0; g < m / 8; g++) kept_all += __builtin_popcount(dropout_keep8(d, (uint64_t)g));
    double rate = (double)kept_all / m;
    printf("     keep rate %.5f at p = 0.1\n", rate);
    expect_true("keep rate within 5 standard errors of 1 - p (p = 0.1)", fabs(rate - 0.9) < 5 * sqrt(0.09 / m));
    // The integer threshold: u >= dropout_threshold(p) exactly when u / 2^16 >= p, for every
    // u near it, for probabilities exact and inexact in binary, tiny, and 1 or more (keep
    // nothing).
    static const float ps[] = {0.1f, 0.3f, 0.5f, 1e-7f, 0.999999f, 1.0f, 1.5f, 0.0999999f};
    int threshold_ok = 1;
    for (int i = 0; i < (int)(sizeof ps / sizeof ps[0]); i++) {
        uint32_t thr = dropout_threshold(ps[i]);
        for (int64_t u = (int64_t)thr - 3; u <= (int64_t)thr + 3; u++)
            if (u >= 0 && u <= 0xffff) threshold_ok &= ((uint32_t)u >= thr) == ((double)u / 65536.0 >= (double)ps[i]);
        threshold_ok &= (0xffffu >= thr) == (65535.0 / 65536.0 >= (double)ps[i]);
    }
    expect_true("integer keep threshold agrees with u / 2^16 >= p around it (8 probabilities)", threshold_ok);
    // The host-computed schedule (a kernel's parameter) gives the same numbers and decisions
    // as the per-call key: the known-answer vectors, and dropout_keep8_keyed over seeds with
    // high bits set, groups past 2^32 and p from 0.1 to 1.
    int sched_ok = 1;
    for (int i = 0; i < 3; i++) {
        philox4x32 c = {{kat[i].ctr[0], kat[i].ctr[1], kat[i].ctr[2], kat[i].ctr[3]}};
        philox_keys ks = philox_key_schedule((uint64_t)kat[i].key[1] << 32 | kat[i].key[0]);
        philox4x32 o = philox4x32_10_scheduled(c, &ks);
        for (int k = 0; k < 4; k++) sched_ok &= o.v[k] == kat[i].out[k];
    }
    const float sched_ps[] = {0.1f, 0.5f, 0.9f, 1.0f};
    for (int i = 0; i < 4; i++) {
        dropout_t ds = {sched_ps[i], 11u + i, 3u, 0x9e3779b97f4a7c15ull * (i + 1), NULL, 0};
        dropout_schedule s = dropout_schedule_of(ds);
        for (uint64_t g = 0; g < 2000; g++) {
            uint64_t group = g * 0x10001ull + (i > 1 ? 0x123456789ull : 0);
            sched_ok &= dropout_keep8_scheduled(&s, group) == dropout_keep8_keyed(ds, group);
        }
    }
    expect_true("the precomputed key schedule gives the same draws and keep decisions", sched_ok);
    d.p = 0.0f;
    expect_true("dropout_keep4 keeps all four at p = 0", dropout_keep4(d, 7) == 15u);
    expect_true("dropout_keep8 keeps all eight at p = 0", dropout_keep8(d, 7) == 255u);
    return test_failures ? 1 : 0;
}
