// Asynchronous copies from global to shared memory (cp.async, sm_80 and later): a thread
// issues copies of 16 or 4 bytes that complete in the background while it computes, groups
// them with copy_async_commit, and waits with copy_async_wait<N> until at most N of its most
// recent groups are still in flight; a __syncthreads after the wait makes every thread's
// copies visible to the block. A copy whose `real` is false writes zeros and reads nothing
// (its source must still be a valid address). Before sm_80 the copies are plain loads and
// stores. In the emulated build a copy completes only at the wait that covers its group
// (emu::copy_async), the latest moment the hardware may: a read before its wait sees the
// old contents and fails the tests (BERTPRE_EMU_CP_ASYNC=early lands it at issue instead, the
// earliest moment, which a refill issued too soon fails), and a thread that exits with copies never waited for
// stops the kernel with an error.
#pragma once
#include <string.h>
#include "kernels/cuda/common.cuh"

namespace CUDA_NS {

template <int BYTES>
__device__ __forceinline__ void copy_async(void *shared_dst, const void *global_src, bool real) {
    static_assert(BYTES == 4 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes; 4 and 16 are used");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned dst = (unsigned)__cvta_generic_to_shared(shared_dst);
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
                     "r"(real ? 16 : 0));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(global_src),
                     "r"(real ? 4 : 0));
#elif defined(BERTPRE_CUDA_EMULATION)
    ::emu::copy_async(shared_dst, global_src, BYTES, real);
#else
    if (real)
        memcpy(shared_dst, global_src, BYTES);
    else
        memset(shared_dst, 0, BYTES);
#endif
}

__device__ __forceinline__ void copy_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#elif defined(BERTPRE_CUDA_EMULATION)
    ::emu::copy_async_commit();
#endif
}

template <int N>
__device__ __forceinline__ void copy_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#elif defined(BERTPRE_CUDA_EMULATION)
    ::emu::copy_async_wait(N);
#endif
}

}  // namespace CUDA_NS
