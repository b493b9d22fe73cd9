// The device collectives of data-parallel training (backend.h: backend_comm) over NCCL: one
// communicator per job, bootstrapped from a unique id that the engine broadcasts over MPI,
// and every collective on the communication stream after the work queued so far on the
// compute stream. The emulated build compiles this same file against the NCCL emulation
// (emu/nccl_emu.h), which runs it over MPI in CI. A CUDA build without NCCL has no table:
// its ranks sum through host MPI.
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include "bertpre_config.h"
#include "kernels/cuda/ops.cuh"
#ifdef BERTPRE_CUDA_EMULATION
#include "kernels/cuda/emu/nccl_emu.h"
#define BERTPRE_COMM_NCCL 1
#elif BERTPRE_HAVE_NCCL
#include <nccl.h>
#define BERTPRE_COMM_NCCL 1
#else
#define BERTPRE_COMM_NCCL 0
#endif

namespace CUDA_NS {

#if BERTPRE_COMM_NCCL
static_assert(sizeof(ncclUniqueId) == COMM_ID_BYTES, "COMM_ID_BYTES is NCCL's unique id size");

namespace {
ncclComm_t comm = nullptr;
int my_rank = 0, ranks = 1;

// A failed call ends the job with NCCL's message, through fatal(): the communicator aborted
// here, then fatal's abort of the job (MPI_Abort on several ranks).
void nccl_check_result(ncclResult_t result, const char *call) {
    if (result == ncclSuccess) return;
    char detail[512];
    snprintf(detail, sizeof detail, "%s", comm ? ncclGetLastError(comm) : "no communicator");
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
    fatal("rank %d of %d: %s failed: %s (%s)", my_rank, ranks, call, ncclGetErrorString(result), detail);
}
#define NCCL_CHECK(call) nccl_check_result((call), #call)

void unique_id(void *id) { NCCL_CHECK(ncclGetUniqueId((ncclUniqueId *)id)); }

void init(const void *id, int rank, int world) {
    my_rank = rank;
    ranks = world;
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    NCCL_CHECK(ncclCommInitRank(&comm, world, uid, rank));
}

void release_narrow();  // the buffers of the BF16 and FP16 sums (below)

void destroy() {
    if (comm) NCCL_CHECK(ncclCommDestroy(comm));
    comm = nullptr;
    release_narrow();
}

void abort_comm() {
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
}

// The collective waits for the compute stream's queued work (the gradients it reads).
cudaStream_t after_compute() {
    cudaStream_t s = device_comm_stream();
    device_stream_wait(s, device_stream());
    return s;
}

// A sum in BF16 or FP16: the FP32 values rounded into a buffer of their own (one per
// collective of the step, kept for the next steps), and the range of the result that join
// casts back into the FP32 buffer.
struct narrow_sum {
    void *half = nullptr;
    size_t capacity = 0;  // elements
    float *dst = nullptr;
    size_t offset = 0, n = 0;  // the range of half to cast back into dst
    comm_dtype type = COMM_FP32;
};
std::vector<narrow_sum> narrow;
size_t n_narrow = 0;  // in use since the last join

template <typename T>
__global__ void narrow_kernel(T *dst, const float *src, float scale, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = from_float<T>(src[i] * scale);
}

template <typename T>
__global__ void widen_kernel(float *dst, const T *src, float scale, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_float(src[i]) * scale;
}

// FP16 sums the values scaled by 1 / ranks; join scales back.
float narrow_scale(comm_dtype type) { return type == COMM_FP16 ? 1.0f / (float)ranks : 1.0f; }

// buf[count] rounded (on the compute stream) into a buffer of `type`; returns it.
void *narrow_for_sum(float *buf, size_t count, comm_dtype type) {
    if (n_narrow == narrow.size()) narrow.emplace_back();
    narrow_sum &ns = narrow[n_narrow++];
    if (ns.capacity < count) {
        device_free(ns.half);
        ns.half = device_alloc(count * 2);
        ns.capacity = count;
    }
    ns.type = type;
    if (count == 0) return ns.half;
    float scale = narrow_scale(type);
    if (type == COMM_FP16)
        LAUNCH(ceil_div(count, 256), 256, 0, device_stream(), narrow_kernel<f16>)((f16 *)ns.half, buf, scale, count);
    else
        LAUNCH(ceil_div(count, 256), 256, 0, device_stream(), narrow_kernel<bf16>)((bf16 *)ns.half, buf, scale,
                                                                                   count);
    CHECK_LAUNCH("narrow_kernel");
    return ns.half;
}

void widen_sums() {
    for (size_t i = 0; i < n_narrow; i++) {
        narrow_sum &ns = narrow[i];
        if (ns.n == 0) continue;
        float scale = 1.0f / narrow_scale(ns.type);
        if (ns.type == COMM_FP16)
            LAUNCH(ceil_div(ns.n, 256), 256, 0, device_stream(), widen_kernel<f16>)(
                ns.dst, (const f16 *)ns.half + ns.offset, scale, ns.n);
        else
            LAUNCH(ceil_div(ns.n, 256), 256, 0, device_stream(), widen_kernel<bf16>)(
                ns.dst, (const bf16 *)ns.half + ns.offset, scale, ns.n);
        CHECK_LAUNCH("widen_kernel");
    }
    n_narrow = 0;
}

void release_narrow() {
    for (narrow_sum &ns : narrow) device_free(ns.half);
    narrow.clear();
    n_narrow = 0;
}

ncclDataType_t nccl_type(comm_dtype type) {
    return type == COMM_FP16 ? ncclFloat16 : type == COMM_BF16 ? ncclBfloat16 : ncclFloat;
}

void all_reduce(float *buf, size_t n, comm_dtype type) {
    if (type == COMM_FP32) {
        NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, after_compute()));
        return;
    }
    void *half = narrow_for_sum(buf, n, type);
    narrow[n_narrow - 1].dst = buf;
    narrow[n_narrow - 1].offset = 0;
    narrow[n_narrow - 1].n = n;
    NCCL_CHECK(ncclAllReduce(half, half, n, nccl_type(type), ncclSum, comm, after_compute()));
}

void reduce_scatter(float *buf, size_t shard, comm_dtype type) {
    size_t mine = (size_t)my_rank * shard;
    if (type == COMM_FP32) {
        NCCL_CHECK(ncclReduceScatter(buf, buf + mine, shard, ncclFloat, ncclSum, comm, after_compute()));
        return;
    }
    char *half = (char *)narrow_for_sum(buf, (size_t)ranks * shard, type);
    narrow[n_narrow - 1].dst = buf + mine;
    narrow[n_narrow - 1].offset = mine;
    narrow[n_narrow - 1].n = shard;
    NCCL_CHECK(ncclReduceScatter(half, half + mine * 2, shard, nccl_type(type), ncclSum, comm, after_compute()));
}

void all_gather(void *buf, size_t shard_bytes) {
    cudaStream_t s = after_compute();
    NCCL_CHECK(ncclAllGather((char *)buf + (size_t)my_rank * shard_bytes, buf, shard_bytes, ncclUint8, comm, s));
}

// The piece [lo, hi) of [offset, offset + n) in slot r of `shard` elements (lo == hi: none).
void owned_piece(size_t offset, size_t n, size_t shard, int r, size_t *lo, size_t *hi) {
    size_t a = (size_t)r * shard, b = a + shard;
    *lo = offset > a ? offset : a;
    *hi = offset + n < b ? offset + n : b;
    if (*hi < *lo) *hi = *lo;
}

void reduce_owned(float *buf, size_t offset, size_t n, size_t shard, comm_dtype type) {
    char *half = nullptr;
    if (type != COMM_FP32) {
        half = (char *)narrow_for_sum(buf + offset, n, type);
        size_t lo, hi;
        owned_piece(offset, n, shard, my_rank, &lo, &hi);
        narrow[n_narrow - 1].dst = buf + lo;
        narrow[n_narrow - 1].offset = lo - offset;
        narrow[n_narrow - 1].n = hi - lo;
    }
    cudaStream_t s = after_compute();
    NCCL_CHECK(ncclGroupStart());
    for (int r = (int)(offset / shard); r < ranks; r++) {
        size_t lo, hi;
        owned_piece(offset, n, shard, r, &lo, &hi);
        if (hi == lo) break;
        if (half)
            NCCL_CHECK(ncclReduce(half + (lo - offset) * 2, half + (lo - offset) * 2, hi - lo, nccl_type(type),
                                  ncclSum, r, comm, s));
        else
            NCCL_CHECK(ncclReduce(buf + lo, buf + lo, hi - lo, ncclFloat, ncclSum, r, comm, s));
    }
    NCCL_CHECK(ncclGroupEnd());
}

void broadcast_owned(void *buf, size_t offset, size_t n, size_t shard_bytes, int slot) {
    cudaStream_t s = after_compute();
    NCCL_CHECK(ncclGroupStart());
    for (int r = (int)(offset / shard_bytes); r < ranks; r++) {
        size_t lo, hi;
        owned_piece(offset, n, shard_bytes, r, &lo, &hi);
        if (hi == lo) break;
        NCCL_CHECK(ncclBroadcast((char *)buf + lo, (char *)buf + lo, hi - lo, ncclUint8, r, comm, s));
    }
    NCCL_CHECK(ncclGroupEnd());
    device_stream_mark(s, slot);
}

// -1 with the message in err on NCCL's asynchronous error, else 0.
int async_failed(char *err, size_t len) {
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
        snprintf(err, len, "NCCL reports %s (%s)", ncclGetErrorString(async), ncclGetLastError(comm));
        return -1;
    }
    return 0;
}

int done(char *err, size_t len) {
    return async_failed(err, len) ? -1 : device_stream_done(device_comm_stream());
}

int mark_done(int slot, char *err, size_t len) { return async_failed(err, len) ? -1 : device_mark_done(slot); }

void join() {
    device_stream_wait(device_stream(), device_comm_stream());
    widen_sums();
}

const backend_comm table = {unique_id,  init, destroy,      abort_comm,      all_reduce, reduce_scatter,
                            all_gather, done, join, reduce_owned, broadcast_owned, mark_done};
}  // namespace

const backend_comm *comm_ops() { return &table; }
#else
const backend_comm *comm_ops() { return nullptr; }
#endif

}  // namespace CUDA_NS
