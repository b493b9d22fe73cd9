// 128-bit memory access for the streaming kernels: a pack is 16 bytes of activations
// (4 FP32 or 8 FP16/BF16) moved by one int4 load or store. A kernel handles W elements per
// thread (or per lane): W = pack_size<Act>() on the vector path, which the host picks when
// every pointer is 16-byte aligned and rows are whole packs, else W = 1 (scalar path).
// In the emulation the same int4 accesses are plain 16-byte copies, each address checked
// for the 16-byte alignment the hardware requires (vec_aligned).
#pragma once
#include <stdint.h>
#include <string.h>
#include <initializer_list>
#include "kernels/cuda/common.cuh"

namespace CUDA_NS {

template <typename Act>
__host__ __device__ constexpr int pack_size() {
    return (int)(16 / sizeof(Act));
}

inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
// Every non-NULL pointer 16-byte aligned (the host's test for the vector path).
inline bool all_aligned(std::initializer_list<const void *> ptrs) {
    for (const void *p : ptrs)
        if (p && !aligned16(p)) return false;
    return true;
}

// The emulation's check of a 16-byte access (nothing on the GPU, which needs the alignment).
__device__ __forceinline__ void vec_aligned(const void *p, const char *what) { access_aligned(p, 16, what); }

// W values starting at p (W == 1, or a multiple of the pack size with p 16-byte aligned).
template <int W, typename Act>
__device__ __forceinline__ void load_span(float (&dst)[W], const Act *p) {
    if constexpr (W == 1) {
        dst[0] = to_float(p[0]);
    } else {
        constexpr int P = pack_size<Act>();
        for (int k = 0; k < W; k += P) {
            vec_aligned(p + k, "a vector load");
            int4 raw = *reinterpret_cast<const int4 *>(p + k);
            Act v[P];
            memcpy((void *)v, &raw, 16);
            for (int j = 0; j < P; j++) dst[k + j] = to_float(v[j]);
        }
    }
}

// W activations at p as stored, unconverted (W == 1, or whole packs with p 16-byte
// aligned): a prefetch that holds half the registers of converted floats.
template <int W, typename Act>
__device__ __forceinline__ void load_raw(Act (&dst)[W], const Act *p) {
    if constexpr (W == 1) {
        dst[0] = p[0];
    } else {
        constexpr int P = pack_size<Act>();
        for (int k = 0; k < W; k += P) {
            vec_aligned(p + k, "a vector load");
            int4 raw = *reinterpret_cast<const int4 *>(p + k);
            memcpy((void *)(dst + k), &raw, 16);
        }
    }
}

template <int W, typename Act>
__device__ __forceinline__ void store_span(Act *p, const float (&src)[W]) {
    if constexpr (W == 1) {
        p[0] = from_float<Act>(src[0]);
    } else {
        constexpr int P = pack_size<Act>();
        for (int k = 0; k < W; k += P) {
            Act v[P];
            for (int j = 0; j < P; j++) v[j] = from_float<Act>(src[k + j]);
            int4 raw;
            memcpy(&raw, (const void *)v, 16);
            vec_aligned(p + k, "a vector store");
            *reinterpret_cast<int4 *>(p + k) = raw;
        }
    }
}

// Keep decisions of the W elements starting at flat index first, as bits: one Philox call
// per eight elements when first is a multiple of 8 and W of 8 (FP16/BF16 vectors), per four
// when both are multiples of 4 (FP32 vectors), else one per element.
template <int W>
__device__ __forceinline__ unsigned dropout_keep_span(dropout_t d, uint64_t first) {
    unsigned bits = 0;
    if (W % 8 == 0 && first % 8 == 0) {
        for (int g = 0; g < W / 8; g++) bits |= dropout_keep8(d, first / 8 + g) << (8 * g);
    } else if (W % 4 == 0 && first % 4 == 0) {
        for (int g = 0; g < W / 4; g++) bits |= dropout_keep4(d, first / 4 + g) << (4 * g);
    } else {
        for (int k = 0; k < W; k++) bits |= (unsigned)dropout_keep(d, first + k) << k;
    }
    return bits;
}

// Keep decisions of the W elements whose keyed indices start at first (a multiple of W, or
// of 8 for W > 8), as bits: elements a row kernel keys from dropout_row_first. One Philox
// call per eight elements; W of 1, 2 or 4 take their bits from one call.
template <int W>
__device__ __forceinline__ unsigned dropout_keep_span_keyed(dropout_t d, uint64_t first) {
    static_assert(W % 8 == 0 || 8 % W == 0, "a span is part of a group of eight or whole groups");
    if constexpr (W % 8 == 0) {
        unsigned bits = 0;
        for (int g = 0; g < W / 8; g++) bits |= dropout_keep8_unmapped(d, first / 8 + g) << (8 * g);
        return bits;
    } else {
        return dropout_keep8_unmapped(d, first / 8) >> (first % 8) & ((1u << W) - 1u);
    }
}

}  // namespace CUDA_NS
