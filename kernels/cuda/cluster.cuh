// Thread-block clusters (sm_90): blocks launched together on one GPC, which can wait for
// one another (barrier.cluster) and read one another's shared memory (distributed shared
// memory, mapa). LAUNCH_CLUSTER(grid, block, smem, stream, cluster, kernel)(args...) launches
// with clusters of `cluster` blocks (a dim3 that divides the grid; at most 8 blocks, the
// portable size) through cudaLaunchKernelEx; check it with CHECK_LAUNCH as any launch. The
// emulated build runs a cluster's blocks together (emu/cuda_emu.h), with these same calls.
// Only dynamic shared memory may be mapped across the cluster (the emulation's rule).
#pragma once
#include "kernels/cuda/common.cuh"

namespace CUDA_NS {

#ifdef BERTPRE_CUDA_EMULATION
#define LAUNCH_CLUSTER(grid, block, smem, stream, cluster, ...) \
    BERTPRE_LAUNCH_CLUSTER(grid, block, smem, stream, cluster, __VA_ARGS__)
#else
template <typename... Params>
struct cluster_launcher {
    void (*kernel)(Params...);
    dim3 grid, block, cluster;
    size_t smem;
    cudaStream_t stream;
    // The launch error, if any, is left for cudaGetLastError (CHECK_LAUNCH), as <<< >>>'s is.
    template <typename... Args>
    void operator()(Args... args) const {
        cudaLaunchAttribute attr;
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = cluster.x, attr.val.clusterDim.y = cluster.y, attr.val.clusterDim.z = cluster.z;
        cudaLaunchConfig_t config = {};
        config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = smem, config.stream = stream;
        config.attrs = &attr, config.numAttrs = 1;
        (void)cudaLaunchKernelEx(&config, kernel, args...);
    }
};
template <typename... Params>
cluster_launcher<Params...> make_cluster_launcher(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                                  cudaStream_t stream, dim3 cluster) {
    return cluster_launcher<Params...>{kernel, grid, block, cluster, smem, stream};
}
#define LAUNCH_CLUSTER(grid, block, smem, stream, cluster, ...) \
    make_cluster_launcher(__VA_ARGS__, dim3(grid), dim3(block), (smem), (stream), dim3(cluster))
#endif

// How many clusters of `cluster` blocks of `block` threads with `smem` bytes of dynamic
// shared memory each the device can hold at once (cudaOccupancyMaxActiveClusters, after the
// kernel's shared-memory opt-in): 0 where one cannot be resident at all, as on a small MIG
// slice, where the launch would fail, or where the query itself fails; *why then says which
// (CUDA's error string for a failed query). The emulation co-schedules any legal cluster: 1,
// unless BERTPRE_TEST_EMU_CLUSTER_OCCUPANCY (test-only) gives the answer, so that the callers'
// path for 0 runs in the emulated tests.
template <typename... Params>
int cluster_occupancy(void (*kernel)(Params...), dim3 cluster, dim3 block, size_t smem, const char **why) {
    *why = "the device holds none at once";
#ifdef BERTPRE_CUDA_EMULATION
    (void)kernel, (void)cluster, (void)block, (void)smem;
    const char *env = getenv("BERTPRE_TEST_EMU_CLUSTER_OCCUPANCY");
    if (env) *why = "BERTPRE_TEST_EMU_CLUSTER_OCCUPANCY says so";
    return env ? atoi(env) : 1;
#else
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster.x, attr.val.clusterDim.y = cluster.y, attr.val.clusterDim.z = cluster.z;
    cudaLaunchConfig_t config = {};
    config.gridDim = cluster, config.blockDim = block, config.dynamicSmemBytes = smem;
    config.attrs = &attr, config.numAttrs = 1;
    int clusters = 0;
    cudaError_t err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
    if (err != cudaSuccess) {
        cudaGetLastError();  // not a sticky error: the caller decides what runs instead
        *why = cudaGetErrorString(err);
        return 0;
    }
    return clusters;
#endif
}

// This block's rank in its cluster (%cluster_ctarank: x fastest).
__device__ __forceinline__ unsigned cluster_rank() {
#ifdef BERTPRE_CUDA_EMULATION
    return ::emu::cluster_ctarank();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
#else
    return 0;
#endif
}

// Every thread of every block of the cluster: arrive (release) and wait (acquire) at the
// cluster barrier, so that shared and global writes before it are seen by the whole
// cluster after it. Also a barrier for the block's own threads.
__device__ __forceinline__ void cluster_sync() {
#ifdef BERTPRE_CUDA_EMULATION
    ::emu::cluster_sync();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}

// The generic address of `p` (in this block's shared memory) in block `rank`'s shared
// memory (mapa): plain loads and stores through it reach the other block's.
template <typename T>
__device__ __forceinline__ T *cluster_map(T *p, unsigned rank) {
#ifdef BERTPRE_CUDA_EMULATION
    return (T *)::emu::cluster_map_shared(p, rank);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint64_t out;
    asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(out) : "l"((uint64_t)p), "r"(rank));
    return (T *)out;
#else
    __trap();
    return p;
#endif
}

}  // namespace CUDA_NS
