// Shared by every CUDA op file: the build switch between real CUDA and the host emulation,
// the launch and check macros, the activation types and their FP32 conversions, and warp /
// block reductions. Kernels do their arithmetic in FP32 whatever the storage type.
#pragma once
#ifdef BERTPRE_CUDA_EMULATION
#include "kernels/cuda/emu/cuda_emu.h"
#define CUDA_NS cuda_emu
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define CUDA_NS cuda_gpu
#define BERTPRE_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#define BERTPRE_DYNAMIC_SHARED(type, name)                  \
    extern __shared__ __align__(16) unsigned char name##_raw[]; \
    type *name = (type *)name##_raw
#define BERTPRE_ERROR_STRING(err) cudaGetErrorString(err)
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/common/philox.h"
#include "kernels/cuda/device.h"

namespace CUDA_NS {

// Launch a kernel on a stream, then check the launch (kernel name, file and line on error).
#define LAUNCH(grid, block, smem, stream, ...) BERTPRE_LAUNCH(grid, block, smem, stream, __VA_ARGS__)
#define CHECK_LAUNCH(what) device_check_launch(what, __FILE__, __LINE__)

// The emulation's check of an access of `bytes` (4, 8 or 16) at p, which PTX requires to be
// aligned to its size (emu::check_aligned stops the kernel naming `what`); nothing on the GPU.
__device__ __forceinline__ void access_aligned(const void *p, size_t bytes, const char *what) {
#ifdef BERTPRE_CUDA_EMULATION
    ::emu::check_aligned(p, bytes, what);
#else
    (void)p, (void)bytes, (void)what;
#endif
}

// Storage types of activations: one of these per precision.
typedef __half f16;
typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(f16 x) { return __half2float(x); }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ f16 from_float<f16>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }

// Sum or maximum over the 32 lanes of a warp, in a fixed butterfly order (deterministic).
template <bool MAX>
__device__ __forceinline__ float warp_reduce(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_xor_sync(0xffffffffu, v, offset);
        v = MAX ? fmaxf(v, other) : v + other;
    }
    return v;
}
__device__ __forceinline__ float warp_sum(float v) { return warp_reduce<false>(v); }
__device__ __forceinline__ float warp_max(float v) { return warp_reduce<true>(v); }

// Sum or maximum over a block whose size is a multiple of 32 (at most 1024); every thread
// gets the result. `scratch` is 32 floats of shared memory; the call ends with a barrier so
// that the scratch can be reused right away.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float *scratch) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_reduce<MAX>(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : (MAX ? -INFINITY : 0.0f);
    v = warp_reduce<MAX>(v);
    __syncthreads();
    return v;
}
__device__ __forceinline__ float block_sum(float v, float *scratch) { return block_reduce<false>(v, scratch); }
__device__ __forceinline__ float block_max(float v, float *scratch) { return block_reduce<true>(v, scratch); }

inline unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

// An environment variable that names one of two choices: -1 when it is unset, 0 for `a`, 1
// for `b`; any other value ends the process naming the variable and both choices.
inline int env_choice(const char *name, const char *a, const char *b) {
    const char *env = getenv(name);
    if (!env) return -1;
    if (!strcmp(env, a)) return 0;
    if (!strcmp(env, b)) return 1;
    fatal("environment variable %s is '%s': use %s or %s", name, env, a, b);
}

// Once per kernel, before its first launch (the emulation checks both at launch): lets it
// launch with up to `dynamic_smem` bytes of dynamic shared memory (CUDA requires this opt-in
// above 48 KB), and asks for the largest shared-memory carveout, so that the blocks per SM
// its design counts on fit (left to the driver, the carveout can be smaller while other
// kernels stay resident on the SM). Exits naming the kernel when CUDA refuses.
template <typename F>
void kernel_shared_memory(F *kernel, const char *name, size_t dynamic_smem) {
    cudaError_t err = cudaSuccess;
    if (dynamic_smem > 48 * 1024)
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dynamic_smem);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   (int)cudaSharedmemCarveoutMaxShared);
    if (err != cudaSuccess)
        fatal("%s with %zu bytes of dynamic shared memory and the largest carveout: %s",
              name, dynamic_smem, BERTPRE_ERROR_STRING(err));
}

// Every op is a template over the activation type T (float, f16, bf16) and is instantiated
// for the three by INSTANTIATE_OPS at the end of its file.
#define INSTANTIATE_OPS(ops) \
    template struct ops<float>; \
    template struct ops<f16>;   \
    template struct ops<bf16>;

}  // namespace CUDA_NS
