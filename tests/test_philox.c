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
    return test_failures ? 1 : 0;
}
