// CUDA emulation: runs the kernels of kernels/cuda/ on the host, so that every kernel is
// executed and checked in CI on machines without a GPU (docs/ARCHITECTURE.md §4).
//
// Each CUDA thread of a block is a fiber (ucontext) on one OS thread. A block runs in passes:
// every runnable thread runs until it finishes or waits at a barrier (__syncthreads, or a
// warp-level operation: shuffles, votes, __syncwarp); a barrier opens when every thread it
// names is waiting at it. Threads that can never meet (a __syncthreads reached by part of a
// block, a shuffle whose mask names an exited lane) are reported as an error instead of
// hanging, which is stricter than the hardware and catches those bugs. Blocks run one after
// another, so `__shared__` variables are plain statics and atomics are plain read-modify-
// writes. A launch with thread-block clusters (launcher::cluster, cudaLaunchKernelEx's
// cluster dimension) runs each cluster's blocks together, co-scheduled as the hardware
// guarantees: their fibers take turns, cluster_sync (barrier.cluster.arrive + wait) is a
// meeting of every thread of the cluster, and cluster_map_shared (mapa) gives the same
// offset in another block's dynamic shared memory. Each block has its own dynamic shared
// memory; static `__shared__` is one for all, so a kernel launched in clusters keeps its
// shared memory dynamic (run_grid refuses static __shared__ there). Both start every block
// as 0xff bytes. BERTPRE_EMU_ORDER and BERTPRE_EMU_CP_ASYNC choose other thread orders and
// cp.async landing moments (scheduler.cpp). Mapping into a block that has exited, or a cluster barrier that an
// exited thread never reaches, stops the kernel with an error; an exited block's shared
// memory turns to NaN for readers that mapped it earlier. `half` and `__nv_bfloat16` come from CUDA's own headers, which work in host code.
// Only the kernel side of CUDA is emulated; memory, streams and GEMMs go through
// kernels/cuda/device.h, whose emulated implementation is emu/device_emu.cpp.
#pragma once
#ifndef BERTPRE_CUDA_EMULATION
#error "cuda_emu.h is only for the emulated build (BERTPRE_CUDA_EMULATION)"
#endif

// Execution-space keywords mean nothing on the host; CUDA's host_defines.h keeps these.
#define __host__
#define __device__
#define __global__
#define __shared__ static
#define __launch_bounds__(...)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <functional>

namespace emu {

uint3 &thread_idx();
uint3 &block_idx();
dim3 &block_dim();
dim3 &grid_dim();
void *dynamic_shared();

void syncthreads();
void syncwarp(unsigned mask);
// Thread-block clusters: the calling block's rank in its cluster (%cluster_ctarank: x
// fastest), the cluster's shape, barrier.cluster.arrive followed by barrier.cluster.wait
// (release and acquire at cluster scope), and mapa: the address at the same offset of block
// `rank`'s dynamic shared memory (address must lie in the caller's).
unsigned cluster_ctarank();
dim3 &cluster_dim();
void cluster_sync();
void *cluster_map_shared(const void *address, unsigned rank);
// Every lane named in mask deposits `size` bytes and receives those of lane src_lane.
void exchange(unsigned mask, const void *value, void *result, size_t size, int src_lane);
unsigned ballot(unsigned mask, int predicate);
// Every lane named in mask deposits `size` bytes (at most 64) and receives all lanes'
// deposits, lane l's at all + l * size.
void warp_gather(unsigned mask, const void *value, size_t size, void *all);
// The warp-level matrix product mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: each
// lane passes its A (4 registers), B (2) and C/D (4 floats) fragments in the PTX ISA's
// layout; d = A B + c (emu/mma_emu.cpp).
enum mma_input { MMA_F16, MMA_BF16 };
void mma_m16n8k16(mma_input type, float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l passes the address of row l % 8
// of matrix l / 8 (16 bytes, 16-byte aligned); register m of each lane receives its pair of
// matrix m (emu/mma_emu.cpp).
void ldmatrix_x4(bool trans, uint32_t r[4], const void *row);
// cp.async (kernels/cuda/copy_async.cuh): a copy is issued now and done at the
// copy_async_wait that covers its group, the latest moment the hardware may finish it (or at
// issue, the earliest, with BERTPRE_EMU_CP_ASYNC=early), so a
// read of its destination before that wait sees the old contents; a thread that exits with
// copies never waited for is an error. Groups are committed by copy_async_commit;
// copy_async_wait(n) completes every committed group but the newest n (scheduler.cpp).
void copy_async(void *dst, const void *src, size_t bytes, bool real);
// A memory access of `bytes` (4, 8 or 16: cp.async, vector loads and stores) at an address
// aligned to less stops the kernel with an error naming `what` and the address: PTX requires
// the alignment, and the hardware's result without it is undefined or a fault.
void check_aligned(const void *p, size_t bytes, const char *what);
void copy_async_commit();
void copy_async_wait(int n);
int lane_id();

// A launch of `kernel` (its address names it among the attributes set for it), checked first
// against CUDA's limits as the hardware enforces them (scheduler.cpp): block and grid
// dimensions, a cluster of at most 8 blocks that divides the grid, dynamic shared memory
// above 48 KB only up to what the kernel opted in to with cudaFuncSetAttribute.
void run_grid(const char *name, const void *kernel, dim3 grid, dim3 block, size_t dynamic_smem, dim3 cluster,
              const std::function<void()> &body);

cudaError_t func_set_attribute(const void *kernel, cudaFuncAttribute attr, int value);
const char *error_string(cudaError_t err);  // cudaGetErrorString's words for the codes above

template <typename F>
struct launcher {
    const char *name;
    F *kernel;
    dim3 grid, block;
    size_t smem;
    dim3 cluster_blocks;
    // The same launch in clusters of `blocks` (which must divide the grid).
    launcher with_cluster(dim3 blocks) const {
        launcher l = *this;
        l.cluster_blocks = blocks;
        return l;
    }
    template <typename... Args>
    void operator()(Args... args) const {
        F *k = kernel;
        run_grid(name, (const void *)k, grid, block, smem, cluster_blocks, [&]() { k(args...); });
    }
};
template <typename F>
launcher<F> make_launcher(const char *name, F *kernel, dim3 grid, dim3 block, size_t smem) {
    return launcher<F>{name, kernel, grid, block, smem, dim3(1, 1, 1)};
}

template <typename T>
T shuffle_from(unsigned mask, T value, int src_lane) {
    T result;
    exchange(mask, &value, &result, sizeof(T), src_lane);
    return result;
}

}  // namespace emu

// cudaFuncSetAttribute on a kernel (scheduler.cpp's emu::func_set_attribute):
// MaxDynamicSharedMemorySize up to 227 KB (sm_90's opt-in limit), recorded per kernel for
// run_grid's check; PreferredSharedMemoryCarveout from -1 to 100. Anything else, or a value
// out of range, is cudaErrorInvalidValue, as on the hardware.
template <typename F>
inline cudaError_t cudaFuncSetAttribute(F *kernel, cudaFuncAttribute attr, int value) {
    return emu::func_set_attribute((const void *)kernel, attr, value);
}

#define threadIdx (::emu::thread_idx())
#define blockIdx (::emu::block_idx())
#define blockDim (::emu::block_dim())
#define gridDim (::emu::grid_dim())
#define warpSize 32

#define __syncthreads() ::emu::syncthreads()
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::syncwarp(mask); }

template <typename T>
inline T __shfl_sync(unsigned mask, T value, int src, int width = 32) {
    int lane = emu::lane_id();
    return emu::shuffle_from(mask, value, (lane & ~(width - 1)) + (src & (width - 1)));
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
    int lane = emu::lane_id();
    int src = lane ^ lane_mask;
    if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
    return emu::shuffle_from(mask, value, src);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    int lane = emu::lane_id();
    int src = lane + (int)delta;
    if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
    return emu::shuffle_from(mask, value, src);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    int lane = emu::lane_id();
    int src = lane - (int)delta;
    if (src < 0 || (src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
    return emu::shuffle_from(mask, value, src);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) { return emu::ballot(mask, predicate) & mask; }
inline int __any_sync(unsigned mask, int predicate) { return (emu::ballot(mask, predicate) & mask) != 0; }
inline int __all_sync(unsigned mask, int predicate) { return (emu::ballot(mask, predicate) & mask) == mask; }

// Blocks run one at a time and fibers switch only at barriers, so an atomic is a plain
// read-modify-write here.
template <typename T>
inline T atomicAdd(T *address, T value) {
    T old = *address;
    *address = old + value;
    return old;
}
template <typename T>
inline T atomicMax(T *address, T value) {
    T old = *address;
    if (value > old) *address = value;
    return old;
}
inline unsigned atomicOr(unsigned *address, unsigned value) {
    unsigned old = *address;
    *address = old | value;
    return old;
}
inline int atomicOr(int *address, int value) {
    int old = *address;
    *address = old | value;
    return old;
}

// Device math intrinsics with their host equivalents.
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
template <typename T>
inline T __ldg(const T *p) { return *p; }

#define BERTPRE_LAUNCH(grid, block, smem, stream, ...) \
    ((void)(stream), ::emu::make_launcher(#__VA_ARGS__, __VA_ARGS__, dim3(grid), dim3(block), (smem)))
#define BERTPRE_LAUNCH_CLUSTER(grid, block, smem, stream, cluster, ...) \
    ((void)(stream), ::emu::make_launcher(#__VA_ARGS__, __VA_ARGS__, dim3(grid), dim3(block), (smem)).with_cluster(dim3(cluster)))
#define BERTPRE_DYNAMIC_SHARED(type, name) type *name = (type *)::emu::dynamic_shared()
#define BERTPRE_ERROR_STRING(err) ::emu::error_string(err)
