// NCCL emulation for the emulated CUDA build: the NCCL calls the engine makes, with nccl.h's
// signatures, implemented over MPI on host memory, so that kernels/cuda/comm.cu runs the same
// code under mpirun in CI as it runs with NCCL on GPUs.
//
// Each rank of a communicator is an MPI process. A collective copies this rank's
// contribution, posts non-blocking sends of it to every other rank and receives for theirs,
// and returns at once, like a launch on a stream: it is in flight until progressed
// (nccl_emu_progress, called when the engine polls the communication stream). When every
// message has arrived it writes its result, the contributions summed in rank order, so every
// rank gets bitwise the same sums. A rank that died or hangs leaves the collective in flight:
// the engine's wait gives up after its timeout and calls ncclCommAbort. MPI errors become
// the communicator's asynchronous error (ncclCommGetAsyncError), as NCCL reports a broken
// connection. A reduce sends only to its root and a broadcast only from its root. Only the
// sum is implemented (all-reduce, reduce-scatter, reduce to a root; all-gather and broadcast
// move bytes), for float, double, half and bfloat16 (the narrow types added in FP32 and
// rounded after each addition; the engine needs nothing else); group calls are accepted and
// change nothing, since nothing here blocks. BERTPRE_EMU_NCCL_FAIL_AFTER=N makes the
// collective after a rank's first N fail (ncclSystemError), for the tests of the error exits.
#pragma once
#include <stddef.h>
#include "kernels/cuda/common.cuh"

namespace CUDA_NS {

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0, ncclUint8 = 1, ncclInt32 = 2, ncclInt = 2, ncclUint32 = 3, ncclInt64 = 4,
    ncclUint64 = 5, ncclFloat16 = 6, ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8,
    ncclDouble = 8, ncclBfloat16 = 9,
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef struct ncclComm *ncclComm_t;

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
// Only the root's recvbuff receives the sum (ncclReduce); every rank's recvbuff receives the
// root's sendbuff (ncclBroadcast).
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

// The emulated communication stream (emu/device_emu.cpp): progress the collectives in flight
// and return 1 when none is left; or finish them all, waiting as long as it takes.
int nccl_emu_progress();
void nccl_emu_finish_all();

}  // namespace CUDA_NS
