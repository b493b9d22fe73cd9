// The warp-level matrix product of cuda_emu.h, mma.sync.aligned.m16n8k16.row.col.f32 with
// FP16 or BF16 inputs, as a warp-collective: every lane deposits its fragments, receives
// all 32 lanes' deposits, reassembles A (16x16), B (16x8) and C (16x8) with the fragment
// layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"),
// and computes the four elements of D that its own fragment holds. With groupID g = lane / 4
// and t = lane % 4, the 16-bit elements packed two per 32-bit register (lower half first):
//   A: register r holds row g + 8 (r & 1), columns 2t + 8 (r >> 1) and the next one
//   B: register r holds rows 2t + 8 r and the next one, column g
//   C, D: element i is row g + 8 (i >> 1), column 2t + (i & 1)
// The products of 16-bit inputs are exact in FP32; they are summed in FP32 in k order after
// the accumulator (the hardware's internal order and rounding are unspecified, so tests
// compare with tolerances, as against cuBLAS).
// Also ldmatrix.m8n8.x4 (PTX ISA "Warp-level matrix load instruction: ldmatrix"): four 8x8
// matrices of 16-bit elements, lane l giving the address of row l % 8 of matrix l / 8; lane
// l receives in register m the elements (row l / 4, columns 2 (l % 4) and the next) of
// matrix m, or with .trans (rows 2 (l % 4) and the next, column l / 4), lower half first.
#include "kernels/cuda/emu/cuda_emu.h"
#include <stdio.h>
#include <stdlib.h>

namespace emu {

namespace {
struct fragments {
    uint32_t a[4], b[2];
    float c[4];  // deposited too, so that the exchange is the whole fragment set
};

float element(mma_input type, uint32_t reg, int half) {
    uint16_t bits = (uint16_t)(half ? reg >> 16 : reg & 0xffffu);
    if (type == MMA_F16) {
        __half_raw raw;
        raw.x = bits;
        return __half2float(__half(raw));
    }
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
}
}  // namespace

void mma_m16n8k16(mma_input type, float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    fragments mine, all[32];
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, sizeof mine.b);
    memcpy(mine.c, c, sizeof mine.c);
    warp_gather(0xffffffffu, &mine, sizeof mine, all);
    // This lane's D elements need rows g and g + 8 of A and columns 2t, 2t + 1 of B: every
    // lane's deposit is decoded with the layouts above and only those entries are kept.
    int lane = lane_id(), g = lane / 4, t = lane % 4;
    float A[2][16], B[16][2];
    for (int src = 0; src < 32; src++) {
        int sg = src / 4, st = src % 4;
        for (int r = 0; r < 4; r++)
            for (int half = 0; half < 2; half++) {
                int row = sg + 8 * (r & 1), col = 2 * st + 8 * (r >> 1) + half;
                if (row == g || row == g + 8) A[row == g + 8][col] = element(type, all[src].a[r], half);
            }
        for (int r = 0; r < 2; r++)
            for (int half = 0; half < 2; half++) {
                int row = 2 * st + 8 * r + half, col = sg;
                if (col == 2 * t || col == 2 * t + 1) B[row][col - 2 * t] = element(type, all[src].b[r], half);
            }
    }
    for (int i = 0; i < 4; i++) {
        // c[i] is this lane's own C element: row g + 8 (i >> 1), column 2t + (i & 1).
        float acc = c[i];
        for (int k = 0; k < 16; k++) acc += A[i >> 1][k] * B[k][i & 1];
        d[i] = acc;
    }
}

void ldmatrix_x4(bool trans, uint32_t r[4], const void *row) {
    if ((uintptr_t)row % 16 != 0) {
        fprintf(stderr, "ldmatrix: lane %d's row address %p is not 16-byte aligned\n", lane_id(), row);
        abort();
    }
    const void *rows[32];
    warp_gather(0xffffffffu, &row, sizeof row, rows);
    int lane = lane_id();
    for (int m = 0; m < 4; m++) {
        uint16_t e[2];
        for (int i = 0; i < 2; i++) {
            int mrow = trans ? 2 * (lane % 4) + i : lane / 4, mcol = trans ? lane / 4 : 2 * (lane % 4) + i;
            memcpy(&e[i], (const char *)rows[m * 8 + mrow] + 2 * mcol, 2);
        }
        r[m] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
    }
}

}  // namespace emu
