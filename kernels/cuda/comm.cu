// The device collectives of data-parallel training (backend.h: backend_comm) over NCCL: one
// communicator per job, bootstrapped from a unique id that the engine broadcasts over MPI,
// and every collective on the communication stream after the work queued so far on the
// compute stream. The emulated build compiles this same file against the NCCL emulation
// (emu/nccl_emu.h), which runs it over MPI in CI. A CUDA build without NCCL has no table:
// its ranks sum through host MPI.
#include <stdio.h>
#include <stdlib.h>
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

int device_choose(int rank, int local_rank, int local_size, int devices, const char *variable) {
    if (devices == 1) return 0;                       // per-task binding: the rank's own GPU
    if (devices >= local_size) return local_rank;     // node-wide visibility
    const char *visible = getenv(variable);
    fprintf(stderr,
            "bertpre: error: rank %d is local rank %d of %d ranks on its node, but %d GPU%s visible to it (%s=%s): "
            "let every rank see all of the node's GPUs (local rank k takes GPU k) or exactly one (per-task binding, "
            "e.g. SLURM's --gpus-per-task=1), or start at most %d ranks per node\n",
            rank, local_rank, local_size, devices, devices == 1 ? " is" : "s are", variable,
            visible ? visible : "(unset)", devices);
    exit(1);
}

#if BERTPRE_COMM_NCCL
static_assert(sizeof(ncclUniqueId) == COMM_ID_BYTES, "COMM_ID_BYTES is NCCL's unique id size");

namespace {
ncclComm_t comm = nullptr;
int my_rank = 0, ranks = 1;

// A failed call ends this rank with NCCL's message; the launcher then ends the job.
void nccl_check_result(ncclResult_t result, const char *call) {
    if (result == ncclSuccess) return;
    fprintf(stderr, "bertpre: error: rank %d of %d: %s failed: %s (%s)\n", my_rank, ranks, call,
            ncclGetErrorString(result), comm ? ncclGetLastError(comm) : "no communicator");
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
    exit(1);
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

void destroy() {
    if (comm) NCCL_CHECK(ncclCommDestroy(comm));
    comm = nullptr;
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

void all_reduce(float *buf, size_t n) {
    cudaStream_t s = after_compute();
    NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, s));
}

void reduce_scatter(float *buf, size_t shard) {
    cudaStream_t s = after_compute();
    NCCL_CHECK(ncclReduceScatter(buf, buf + (size_t)my_rank * shard, shard, ncclFloat, ncclSum, comm, s));
}

void all_gather(void *buf, size_t shard_bytes) {
    cudaStream_t s = after_compute();
    NCCL_CHECK(ncclAllGather((char *)buf + (size_t)my_rank * shard_bytes, buf, shard_bytes, ncclUint8, comm, s));
}

int done(char *err, size_t len) {
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
        snprintf(err, len, "NCCL reports %s (%s)", ncclGetErrorString(async), ncclGetLastError(comm));
        return -1;
    }
    return device_stream_done(device_comm_stream());
}

void join() { device_stream_wait(device_stream(), device_comm_stream()); }

const backend_comm table = {unique_id, init,   destroy, abort_comm, all_reduce,
                            reduce_scatter, all_gather, done, join};
}  // namespace

const backend_comm *comm_ops() { return &table; }
#else
const backend_comm *comm_ops() { return nullptr; }
#endif

}  // namespace CUDA_NS
