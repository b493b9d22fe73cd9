// Special-function-unit math for the streaming kernels: one MUFU instruction each on the GPU.
// The emulation gives each the largest error PTX documents for it (ex2.approx.f32: 2 ulp;
// rcp.approx.f32: 1 ulp; .ftz: subnormal inputs and results flushed to zero), rounding away
// from the exact value in a direction fixed by the input's bits, so that a tolerance that
// holds in the emulation was derived for the hardware's accuracy, not for libm's.
#pragma once
#include "kernels/cuda/common.cuh"
#ifdef BERTPRE_CUDA_EMULATION
#include <float.h>
#include <math.h>
#include <string.h>
#endif

namespace CUDA_NS {

#ifdef BERTPRE_CUDA_EMULATION
// exact (in double) rounded to FP32 toward a side chosen by a hash of the input's bits, then
// moved ulps - 1 further that way: an error in (ulps - 1, ulps] ulp; results below FP32's
// normal range flushed to zero as .ftz does.
static inline float sfu_emulated(double exact, float input, int ulps) {
    uint32_t bits;
    memcpy(&bits, &input, sizeof bits);
    bool up = ((bits * 0x9E3779B1u) >> 31) != 0;
    float y = (float)exact;
    if (isinf(y)) return y;  // beyond FP32's range: the instruction gives inf too
    if (up ? (double)y < exact : (double)y > exact) y = nextafterf(y, up ? INFINITY : -INFINITY);
    for (int i = 1; i < ulps; i++) y = nextafterf(y, up ? INFINITY : -INFINITY);
    return fabsf(y) < FLT_MIN ? copysignf(0.0f, y) : y;
}
#endif

// 2^x and 1/x by the special-function unit alone (ex2/rcp.approx.ftz), without the subnormal
// scaling that exp2f and __fdividef add around it.
__device__ __forceinline__ float sfu_exp2(float x) {
#if defined(BERTPRE_CUDA_EMULATION)
    if (fabsf(x) < FLT_MIN) x = 0.0f;
    if (isinf(x) || isnan(x)) return exp2f(x);
    return sfu_emulated(exp2((double)x), x, 2);
#elif defined(__CUDA_ARCH__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);  // nvcc's host pass: never called
#endif
}
__device__ __forceinline__ float sfu_rcp(float x) {
#if defined(BERTPRE_CUDA_EMULATION)
    if (fabsf(x) < FLT_MIN) x = copysignf(0.0f, x);
    if (x == 0.0f || isinf(x) || isnan(x)) return 1.0f / x;
    return sfu_emulated(1.0 / (double)x, x, 1);
#elif defined(__CUDA_ARCH__)
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return 1.0f / x;  // nvcc's host pass: never called
#endif
}

}  // namespace CUDA_NS
