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
    // (e / 4, site, step, e >> 34) and key (seed low, seed high); the four-at-a-time helpers
    // give the same draws and keep decisions as the per-element ones.
    int layout_ok = 1, keep_ok = 1;
    const uint64_t seed = 0x123456789abcdefULL, bases[] = {0, 4093, (1ULL << 34) - 6, 3ULL << 40};
    dropout_t d = {0.3f, 11, 5, seed};
    for (int b = 0; b < 4; b++)
        for (uint64_t e = bases[b]; e < bases[b] + 64; e++) {
            philox4x32 c = {{(uint32_t)(e >> 2), 5, 11, (uint32_t)(e >> 34)}};
            uint32_t expect = philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32)).v[e & 3];
            layout_ok &= philox_draw(seed, 11, 5, e) == expect && philox_draw4(seed, 11, 5, e >> 2).v[e & 3] == expect;
            keep_ok &= (int)((dropout_keep4(d, e >> 2) >> (e & 3)) & 1) == dropout_keep(d, e);
            keep_ok &= dropout_keep(d, e) == (((expect >> 8) / 16777216.0f) >= 0.3f);
        }
    expect_true("element layout: counter (e/4, site, step, e>>34), lane e%4; philox_draw4 the same", layout_ok);
    expect_true("dropout_keep4 bits equal dropout_keep per element (p = 0.3)", keep_ok);
    dropout_walk w = dropout_walk_start();
    int walk_ok = 1;
    for (uint64_t e = 4093; e < 4093 + 37; e++) walk_ok &= dropout_walk_keep(&w, d, e) == dropout_keep(d, e);
    expect_true("dropout_walk from an element not a multiple of 4 equals dropout_keep", walk_ok);
    // The integer keep test at and around its threshold, for probabilities exact and inexact
    // in binary, tiny, and 1 or more (keep nothing).
    static const float ps[] = {0.1f, 0.3f, 0.5f, 1e-7f, 0.999999f, 1.0f, 1.5f, 0.0999999f};
    int threshold_ok = 1;
    for (int i = 0; i < (int)(sizeof ps / sizeof ps[0]); i++) {
        uint32_t thr = philox_keep_threshold(ps[i]);
        for (int64_t u = (int64_t)thr - 3; u <= (int64_t)thr + 3; u++) {
            if (u < 0 || u > 0xffffff) continue;
            for (uint32_t low = 0; low < 256; low += 255) {
                uint32_t x = (uint32_t)u << 8 | low;
                threshold_ok &= ((x >> 8) >= thr) == (philox_bits_to_uniform(x) >= ps[i]);
            }
        }
        threshold_ok &= (0xffffffffu >> 8 >= thr) == (philox_bits_to_uniform(0xffffffffu) >= ps[i]);
    }
    expect_true("integer keep threshold agrees with uniform >= p around it (8 probabilities)", threshold_ok);
    d.p = 0.0f;
    expect_true("dropout_keep4 keeps all four at p = 0", dropout_keep4(d, 7) == 15u);
    return test_failures ? 1 : 0;
}
