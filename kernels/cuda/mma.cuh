// Tensor cores for the CUDA ops: one warp-level matrix product, D = A B + D with A 16x16
// (row-major), B 16x8 (column-major), FP16 or BF16 inputs and FP32 accumulation
// (mma.sync.aligned.m16n8k16.row.col.f32). Under nvcc it is the PTX instruction (sm_80 and
// later); in the emulated build it is emu::mma_m16n8k16, which takes each lane's fragment
// registers exactly as the hardware lays them out (the layouts are written down in
// emu/mma_emu.cpp), so a kernel that indexes a fragment wrongly fails in the emulated tests.
// Every lane of the warp must call it together (.aligned).
// Fragments come from shared memory by ldmatrix_x4: four 8x8 matrices of 16-bit elements per
// instruction, lane l giving the address of row l % 8 of matrix l / 8 (rows 16 bytes, 16-byte
// aligned); lane l receives in register m the pair (row l / 4, columns 2 (l % 4), +1) of
// matrix m, which is an mma fragment register, or with TRANS the pair (rows 2 (l % 4), +1,
// column l / 4): a B fragment from a row-major k x n tile. Under nvcc the PTX instruction,
// in the emulated build emu::ldmatrix_x4 (the same layouts, emu/mma_emu.cpp).
#pragma once
#include <string.h>
#include "kernels/cuda/common.cuh"

namespace CUDA_NS {

// Two 16-bit elements in one 32-bit register, `lo` in the lower half (element order of the
// fragments).
template <typename T>
__device__ __forceinline__ uint32_t pack_pair(T lo, T hi) {
    uint16_t l, h;
    memcpy(&l, &lo, 2);
    memcpy(&h, &hi, 2);
    return (uint32_t)l | (uint32_t)h << 16;
}
template <typename T>
__device__ __forceinline__ uint32_t pack_pair_float(float lo, float hi) {
    return pack_pair<T>(from_float<T>(lo), from_float<T>(hi));
}
// Two consecutive 16-bit elements at a 4-byte aligned address, and the store of two: one
// 32-bit access on the GPU (a memcpy from a 2-byte type compiles to byte loads and stores
// there), a memcpy in the emulation, which checks the 4-byte alignment the GPU's access needs.
template <typename T>
__device__ __forceinline__ uint32_t load_pair(const T *p) {
#ifdef __CUDA_ARCH__
    return *reinterpret_cast<const uint32_t *>(p);
#else
    access_aligned(p, 4, "a 32-bit load of a pair");
    uint32_t r;
    memcpy(&r, p, 4);
    return r;
#endif
}
template <typename T>
__device__ __forceinline__ void store_pair(T *p, uint32_t v) {
#ifdef __CUDA_ARCH__
    *reinterpret_cast<uint32_t *>(p) = v;
#else
    access_aligned(p, 4, "a 32-bit store of a pair");
    memcpy((void *)p, &v, 4);
#endif
}

template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);

template <bool TRANS, typename T>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const T *row) {
#ifdef BERTPRE_CUDA_EMULATION
    ::emu::ldmatrix_x4(TRANS, r, row);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 750
    __trap();
#else
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#endif
}

#ifdef BERTPRE_CUDA_EMULATION
template <>
__device__ __forceinline__ void mma_m16n8k16<f16>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    float c[4] = {d[0], d[1], d[2], d[3]};
    ::emu::mma_m16n8k16(::emu::MMA_F16, d, a, b, c);
}
template <>
__device__ __forceinline__ void mma_m16n8k16<bf16>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    float c[4] = {d[0], d[1], d[2], d[3]};
    ::emu::mma_m16n8k16(::emu::MMA_BF16, d, a, b, c);
}
#else
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define BERTPRE_MMA(type) __trap();
#else
#define BERTPRE_MMA(type)                                                                                   \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." type "." type                                     \
                 ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                              \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
template <>
__device__ __forceinline__ void mma_m16n8k16<f16>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    BERTPRE_MMA("f16")
}
template <>
__device__ __forceinline__ void mma_m16n8k16<bf16>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    BERTPRE_MMA("bf16")
}
#undef BERTPRE_MMA
#endif

}  // namespace CUDA_NS
