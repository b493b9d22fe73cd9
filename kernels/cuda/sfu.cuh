// Special-function-unit math for the streaming kernels: one MUFU instruction each on the GPU,
// the libm equivalent in the emulation.
#pragma once
#include "kernels/cuda/common.cuh"

namespace CUDA_NS {

// 2^x and 1/x by the special-function unit alone (ex2/rcp.approx.ftz: relative error about
// 2^-22, subnormal inputs and results flushed to zero), without the subnormal scaling that
// exp2f and __fdividef add around it; exp2f and 1/x in the emulation.
__device__ __forceinline__ float sfu_exp2(float x) {
#if defined(__CUDA_ARCH__) && !defined(BERTPRE_CUDA_EMULATION)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}
__device__ __forceinline__ float sfu_rcp(float x) {
#if defined(__CUDA_ARCH__) && !defined(BERTPRE_CUDA_EMULATION)
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return 1.0f / x;
#endif
}

}  // namespace CUDA_NS
