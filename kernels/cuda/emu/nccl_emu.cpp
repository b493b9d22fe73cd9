// The NCCL emulation over MPI (nccl_emu.h has the design). A communicator is an MPI
// communicator duplicated from MPI_COMM_WORLD; its collectives in flight are a queue that
// finishes in order.
#include "kernels/cuda/emu/nccl_emu.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <deque>
#include <vector>
#include "bertpre_config.h"
#if BERTPRE_HAVE_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace CUDA_NS {

namespace {
enum op_kind { OP_ALL_REDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_REDUCE, OP_BROADCAST };

size_t type_size(ncclDataType_t t) {
    switch (t) {
        case ncclInt8: case ncclUint8: return 1;
        case ncclFloat16: case ncclBfloat16: return 2;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        default: return 8;
    }
}

struct collective {
    op_kind kind;
    ncclDataType_t type;
    void *recv;
    size_t piece;                             // bytes each rank sends to each other rank
    int root;                                 // OP_REDUCE, OP_BROADCAST: the rank that gets or gives
    std::vector<char> mine;                   // this rank's contribution, copied at the call
    std::vector<std::vector<char>> incoming;  // [rank]: what that rank sent
#if BERTPRE_HAVE_MPI
    std::vector<MPI_Request> requests;
#endif
};

// recv = sum over ranks in rank order of the `count` elements each contributes.
template <typename T>
void sum_in_rank_order(void *recv, const std::vector<const char *> &parts, size_t count) {
    T *out = (T *)recv;
    for (size_t i = 0; i < count; i++) {
        T acc = ((const T *)parts[0])[i];
        for (size_t r = 1; r < parts.size(); r++) acc += ((const T *)parts[r])[i];
        out[i] = acc;
    }
}

// The same in FP16 or BF16 as NCCL sums them: each addition in FP32, rounded to the type.
template <typename T>
void sum_narrow_in_rank_order(void *recv, const std::vector<const char *> &parts, size_t count) {
    T *out = (T *)recv;
    for (size_t i = 0; i < count; i++) {
        T acc = ((const T *)parts[0])[i];
        for (size_t r = 1; r < parts.size(); r++)
            acc = from_float<T>(to_float(acc) + to_float(((const T *)parts[r])[i]));
        out[i] = acc;
    }
}
}  // namespace

}  // namespace CUDA_NS

struct CUDA_NS::ncclComm {
    int rank, size;
    ncclResult_t async_error = ncclSuccess;
    char last_error[512] = "";
    std::deque<collective> queue;
#if BERTPRE_HAVE_MPI
    MPI_Comm mpi = MPI_COMM_NULL;
#endif
};

namespace CUDA_NS {

namespace {
// Communicators in use: the emulated stream progresses all of them.
std::vector<ncclComm_t> comms;

void finish(ncclComm_t comm, collective &c) {
    if (c.kind == OP_BROADCAST) {
        if (comm->rank != c.root) memcpy(c.recv, c.incoming[c.root].data(), c.piece);
        else if (c.recv != c.mine.data()) memcpy(c.recv, c.mine.data(), c.piece);
        return;
    }
    if (c.kind == OP_REDUCE && comm->rank != c.root) return;  // only the root gets the sum
    std::vector<const char *> parts(comm->size);
    for (int r = 0; r < comm->size; r++) parts[r] = r == comm->rank ? c.mine.data() : c.incoming[r].data();
    if (c.kind == OP_ALL_GATHER) {
        for (int r = 0; r < comm->size; r++) memcpy((char *)c.recv + (size_t)r * c.piece, parts[r], c.piece);
        return;
    }
    if (c.kind == OP_REDUCE_SCATTER) parts[comm->rank] += (size_t)comm->rank * c.piece;  // its own shard
    size_t count = c.piece / type_size(c.type);
    if (c.type == ncclFloat) sum_in_rank_order<float>(c.recv, parts, count);
    else if (c.type == ncclFloat16) sum_narrow_in_rank_order<f16>(c.recv, parts, count);
    else if (c.type == ncclBfloat16) sum_narrow_in_rank_order<bf16>(c.recv, parts, count);
    else sum_in_rank_order<double>(c.recv, parts, count);
}

// 1 when the oldest collectives finished up to an empty queue, 0 while one waits.
int progress(ncclComm_t comm) {
    while (!comm->queue.empty()) {
        collective &c = comm->queue.front();
#if BERTPRE_HAVE_MPI
        if (!c.requests.empty()) {
            int done = 0;
            int err = MPI_Testall((int)c.requests.size(), c.requests.data(), &done, MPI_STATUSES_IGNORE);
            if (err != MPI_SUCCESS) {
                char text[MPI_MAX_ERROR_STRING];
                int len = 0;
                MPI_Error_string(err, text, &len);
                comm->async_error = ncclRemoteError;
                snprintf(comm->last_error, sizeof comm->last_error, "rank %d: MPI under the NCCL emulation: %s",
                         comm->rank, text);
                return 0;
            }
            if (!done) return 0;
        }
#endif
        finish(comm, c);
        comm->queue.pop_front();
    }
    return 1;
}

// BERTPRE_EMU_NCCL_FAIL_AFTER=N: the collective after this rank's first N fails with
// ncclSystemError, as a broken connection does (for the tests of the error exits).
bool injected_failure(ncclComm_t comm) {
    static long posted = 0, fail_after = -2;
    if (fail_after == -2) {
        const char *v = getenv("BERTPRE_EMU_NCCL_FAIL_AFTER");
        char *end = nullptr;
        fail_after = v && *v ? strtol(v, &end, 10) : -1;
        if (v && *v && (*end || fail_after < 0))
            fatal("environment variable BERTPRE_EMU_NCCL_FAIL_AFTER = '%s': expected a count of collectives", v);
    }
    if (fail_after < 0 || posted++ < fail_after) return false;
    snprintf(comm->last_error, sizeof comm->last_error,
             "a failure injected by BERTPRE_EMU_NCCL_FAIL_AFTER=%ld on rank %d", fail_after, comm->rank);
    return true;
}

ncclResult_t post(ncclComm_t comm, op_kind kind, const void *send, size_t send_bytes, void *recv, size_t piece,
                  ncclDataType_t type, ncclRedOp_t op, int root = -1) {
    if (!comm || comm->async_error != ncclSuccess) return ncclInvalidUsage;
    if (injected_failure(comm)) return ncclSystemError;
    if ((kind == OP_REDUCE || kind == OP_BROADCAST) && (root < 0 || root >= comm->size)) {
        snprintf(comm->last_error, sizeof comm->last_error, "root %d is not a rank of the %d", root, comm->size);
        return ncclInvalidArgument;
    }
    if (kind != OP_ALL_GATHER && kind != OP_BROADCAST && (op != ncclSum || (type != ncclFloat && type != ncclDouble &&
                                                     type != ncclFloat16 && type != ncclBfloat16))) {
        snprintf(comm->last_error, sizeof comm->last_error,
                 "the NCCL emulation sums float, double, half and bfloat16 only");
        return ncclInvalidArgument;
    }
    if (piece > (size_t)INT_MAX) {
        snprintf(comm->last_error, sizeof comm->last_error,
                 "the NCCL emulation sends at most 2^31 - 1 bytes per rank and collective (got %zu)", piece);
        return ncclInvalidArgument;
    }
    comm->queue.emplace_back();
    collective &c = comm->queue.back();
    c.kind = kind;
    c.type = type;
    c.recv = recv;
    c.piece = piece;
    c.root = root;
    c.mine.assign((const char *)send, (const char *)send + send_bytes);
    c.incoming.resize(comm->size);
#if BERTPRE_HAVE_MPI
    for (int r = 0; r < comm->size; r++) {
        if (r == comm->rank) continue;
        // A reduce sends to its root only, a broadcast from its root only.
        int sends = kind == OP_REDUCE ? r == root : kind == OP_BROADCAST ? comm->rank == root : 1;
        int receives = kind == OP_REDUCE ? comm->rank == root : kind == OP_BROADCAST ? r == root : 1;
        if (!sends && !receives) continue;
        c.incoming[r].resize(piece);
        // A reduce-scatter sends each rank its own shard of this rank's contribution.
        const char *out = c.mine.data() + (kind == OP_REDUCE_SCATTER ? (size_t)r * piece : 0);
        MPI_Request request;
        if (sends) {
            MPI_Isend(out, (int)piece, MPI_BYTE, r, 0, comm->mpi, &request);
            c.requests.push_back(request);
        }
        if (receives) {
            MPI_Irecv(c.incoming[r].data(), (int)piece, MPI_BYTE, r, 0, comm->mpi, &request);
            c.requests.push_back(request);
        }
    }
#endif
    progress(comm);
    return ncclSuccess;
}
}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "bertpre-nccl-emulation %ld", (long)time(NULL));
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    if (nranks < 1 || rank < 0 || rank >= nranks || strncmp(id.internal, "bertpre-nccl-emulation", 22) != 0)
        return ncclInvalidArgument;
    ncclComm_t comm = new ncclComm;
    comm->rank = rank;
    comm->size = nranks;
#if BERTPRE_HAVE_MPI
    int initialized = 0, size = 1;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != nranks) {
        delete comm;
        return ncclInvalidUsage;  // the emulation's ranks are MPI_COMM_WORLD's
    }
    if (initialized) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comm->mpi);
        MPI_Comm_set_errhandler(comm->mpi, MPI_ERRORS_RETURN);
    }
#else
    if (nranks != 1) {
        delete comm;
        return ncclInvalidUsage;  // more than one rank needs MPI underneath
    }
#endif
    comms.push_back(comm);
    *out = comm;
    return ncclSuccess;
}

static void forget(ncclComm_t comm) {
    for (size_t i = 0; i < comms.size(); i++)
        if (comms[i] == comm) comms.erase(comms.begin() + (long)i--);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    while (!progress(comm) && comm->async_error == ncclSuccess) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
#if BERTPRE_HAVE_MPI
    if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
#endif
    forget(comm);
    delete comm;
    return ncclSuccess;
}

// Abandons what is in flight without waiting (its requests are left to MPI_Abort).
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    forget(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *error) {
    if (!comm) return ncclInvalidArgument;
    progress(comm);
    *error = comm->async_error;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error";
        case ncclSystemError: return "unhandled system error";
        case ncclInternalError: return "internal error";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

const char *ncclGetLastError(ncclComm_t comm) { return comm ? comm->last_error : ""; }

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
    size_t bytes = count * type_size(type);
    return post(comm, OP_ALL_REDUCE, send, bytes, recv, bytes, type, op);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
    size_t bytes = recvcount * type_size(type);
    return post(comm, OP_REDUCE_SCATTER, send, comm ? bytes * comm->size : 0, recv, bytes, type, op);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t) {
    size_t bytes = sendcount * type_size(type);
    return post(comm, OP_ALL_GATHER, send, bytes, recv, bytes, type, ncclSum);
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t) {
    size_t bytes = count * type_size(type);
    return post(comm, OP_REDUCE, send, bytes, recv, bytes, type, op, root);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t) {
    size_t bytes = count * type_size(type);
    // Only the root's send buffer is read (NCCL's rule); the others may pass anything.
    return post(comm, OP_BROADCAST, comm && comm->rank == root ? send : recv, bytes, recv, bytes, type, ncclSum, root);
}

ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

int nccl_emu_progress() {
    int done = 1;
    for (ncclComm_t comm : comms) done &= progress(comm);
    return done;
}

void nccl_emu_finish_all() {
    while (!nccl_emu_progress()) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

}  // namespace CUDA_NS
