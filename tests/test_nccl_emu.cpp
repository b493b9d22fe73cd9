// The NCCL emulation itself (kernels/cuda/emu/nccl_emu.h), run under `mpirun -np 3`: the
// communicator from a broadcast unique id; all-reduce (in place and out of place, float and
// double), reduce-scatter and all-gather in place, a reduce in place to each root in turn
// (only the root's buffer changes) and a broadcast in place from each root, each against the sums and copies computed
// here by plain loops from every rank's known inputs, summed in rank order (so bitwise equal,
// and equal on every rank); all-reduce in half and bfloat16 against the rank-order sum
// rounded after each addition; several collectives queued before any progress finish in
// order; the emulated communication stream is busy until they do; an unsupported operation
// is an error; ncclCommGetAsyncError reports none. Skipped (77) without MPI or outside mpirun.
#include <stdio.h>
#include <string.h>
#include <vector>
#include "bertpre_config.h"
#include "kernels/cuda/emu/nccl_emu.h"
#if BERTPRE_HAVE_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

using namespace CUDA_NS;

static int failures = 0;
#define EXPECT(cond, ...)                                            \
    do {                                                             \
        if (!(cond)) {                                               \
            printf("FAIL rank %d, line %d: ", rank, __LINE__);       \
            printf(__VA_ARGS__);                                     \
            printf("\n");                                            \
            failures++;                                              \
        }                                                            \
    } while (0)

static int rank = 0;

// Rank r's contribution at index i: values whose float sums round differently in another
// order, so that the rank order is checked too.
static float input(int r, size_t i) { return (float)((r + 1) * 0.1 + i * 1e-3) * (r % 2 ? 1e4f : 1e-4f); }

int main(int argc, char **argv) {
#if BERTPRE_HAVE_MPI
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE") && !getenv("PMIX_RANK")) {
        printf("SKIP: run under mpirun\n");
        return 77;
    }
    MPI_Init(&argc, &argv);
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    ncclUniqueId id;
    if (rank == 0) EXPECT(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm = nullptr;
    EXPECT(ncclCommInitRank(&comm, world, id, rank) == ncclSuccess, "ncclCommInitRank");
    cudaStream_t stream = device_comm_stream();

    const size_t n = 1001;  // odd: no element count a power of two would hide
    std::vector<float> sum(n), mine(n), out(n, -1.0f), in_place(n);
    for (size_t i = 0; i < n; i++) {
        float acc = input(0, i);
        for (int r = 1; r < world; r++) acc += input(r, i);
        sum[i] = acc;
        mine[i] = in_place[i] = input(rank, i);
    }
    std::vector<double> dsum(n), dmine(n);
    for (size_t i = 0; i < n; i++) {
        dmine[i] = (double)input(rank, i) * 3.0;
        double acc = (double)input(0, i) * 3.0;
        for (int r = 1; r < world; r++) acc += (double)input(r, i) * 3.0;
        dsum[i] = acc;
    }
    // Half and bfloat16: each addition in FP32, rounded to the type, in rank order (as NCCL
    // adds the narrow types). Compared bitwise with that computed here.
    std::vector<__half> hmine(n), hsum(n);
    std::vector<__nv_bfloat16> bmine(n), bsum(n);
    for (size_t i = 0; i < n; i++) {
        hmine[i] = __float2half_rn(input(rank, i));
        bmine[i] = __float2bfloat16_rn(input(rank, i));
        float h = __half2float(__float2half_rn(input(0, i))), b = __bfloat162float(__float2bfloat16_rn(input(0, i)));
        for (int r = 1; r < world; r++) {
            h = __half2float(__float2half_rn(h + __half2float(__float2half_rn(input(r, i)))));
            b = __bfloat162float(__float2bfloat16_rn(b + __bfloat162float(__float2bfloat16_rn(input(r, i)))));
        }
        hsum[i] = __float2half_rn(h);
        bsum[i] = __float2bfloat16_rn(b);
    }
    // Reduce-scatter and all-gather of `shard` elements per rank, in place.
    const size_t shard = 37;
    std::vector<float> scatter(shard * world), gather(shard * world, 0.0f);
    for (size_t i = 0; i < shard * world; i++) scatter[i] = input(rank, i);
    for (size_t i = 0; i < shard; i++) gather[rank * shard + i] = (float)(rank * 1000 + i);
    // Reduce of piece r to root r and broadcast of piece r from root r, in place, as ZeRO-1's
    // per-owner collectives use them; the pieces have different lengths (r + 5).
    std::vector<float> reduced, bcast;
    std::vector<size_t> piece_at(world + 1, 0);
    for (int r = 0; r < world; r++) piece_at[r + 1] = piece_at[r] + (size_t)r + 5;
    for (size_t i = 0; i < piece_at[world]; i++) {
        reduced.push_back(input(rank, i));
        bcast.push_back((float)(rank * 1000 + i));
    }

    // Everything queued before any progress, like launches on a stream.
    ncclGroupStart();
    EXPECT(ncclAllReduce(mine.data(), out.data(), n, ncclFloat, ncclSum, comm, stream) == ncclSuccess, "all-reduce");
    EXPECT(ncclAllReduce(in_place.data(), in_place.data(), n, ncclFloat, ncclSum, comm, stream) == ncclSuccess,
           "all-reduce in place");
    EXPECT(ncclAllReduce(dmine.data(), dmine.data(), n, ncclDouble, ncclSum, comm, stream) == ncclSuccess,
           "all-reduce double");
    EXPECT(ncclAllReduce(hmine.data(), hmine.data(), n, ncclFloat16, ncclSum, comm, stream) == ncclSuccess,
           "all-reduce half");
    EXPECT(ncclAllReduce(bmine.data(), bmine.data(), n, ncclBfloat16, ncclSum, comm, stream) == ncclSuccess,
           "all-reduce bfloat16");
    EXPECT(ncclReduceScatter(scatter.data(), scatter.data() + rank * shard, shard, ncclFloat, ncclSum, comm, stream) ==
               ncclSuccess,
           "reduce-scatter");
    EXPECT(ncclAllGather(gather.data() + rank * shard, gather.data(), shard * sizeof(float), ncclUint8, comm, stream) ==
               ncclSuccess,
           "all-gather");
    for (int r = 0; r < world; r++) {
        size_t at = piece_at[r], len = piece_at[r + 1] - at;
        EXPECT(ncclReduce(reduced.data() + at, reduced.data() + at, len, ncclFloat, ncclSum, r, comm, stream) ==
                   ncclSuccess, "reduce to rank %d", r);
        EXPECT(ncclBroadcast(bcast.data() + at, bcast.data() + at, len, ncclFloat, r, comm, stream) == ncclSuccess,
               "broadcast from rank %d", r);
    }
    ncclGroupEnd();
    EXPECT(ncclReduce(mine.data(), out.data(), n, ncclFloat, ncclSum, world, comm, stream) == ncclInvalidArgument,
           "a root that is not a rank: ncclInvalidArgument");
    EXPECT(ncclAllReduce(mine.data(), out.data(), n, ncclFloat, ncclMax, comm, stream) == ncclInvalidArgument,
           "a maximum is not emulated: ncclInvalidArgument");
    device_stream_wait(device_stream(), stream);  // the compute stream waits: every collective finished
    EXPECT(device_stream_done(stream), "the communication stream is idle after the wait");
    ncclResult_t async = ncclInternalError;
    EXPECT(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess, "no asynchronous error");

    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&out[i], &sum[i], sizeof(float)) != 0;
    EXPECT(bad == 0, "all-reduce: %zu of %zu sums differ from the rank-order sum", bad, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&in_place[i], &sum[i], sizeof(float)) != 0;
    EXPECT(bad == 0, "all-reduce in place: %zu of %zu sums differ", bad, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&dmine[i], &dsum[i], sizeof(double)) != 0;
    EXPECT(bad == 0, "all-reduce double: %zu of %zu sums differ", bad, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&hmine[i], &hsum[i], sizeof(__half)) != 0;
    EXPECT(bad == 0, "all-reduce half: %zu of %zu sums differ from the rank-order sum rounded after each addition",
           bad, n);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&bmine[i], &bsum[i], sizeof(__nv_bfloat16)) != 0;
    EXPECT(bad == 0, "all-reduce bfloat16: %zu of %zu sums differ from the rank-order sum rounded after each "
           "addition", bad, n);
    bad = 0;
    for (size_t i = 0; i < shard; i++) {
        size_t k = rank * shard + i;
        float acc = input(0, k);
        for (int r = 1; r < world; r++) acc += input(r, k);
        bad += memcmp(&scatter[k], &acc, sizeof(float)) != 0;
    }
    EXPECT(bad == 0, "reduce-scatter: %zu of this rank's %zu sums differ", bad, shard);
    bad = 0;
    for (int r = 0; r < world; r++)
        for (size_t i = 0; i < shard; i++) bad += gather[r * shard + i] != (float)(r * 1000 + i);
    EXPECT(bad == 0, "all-gather: %zu of %zu elements differ", bad, shard * world);
    size_t bad_reduce = 0, bad_bcast = 0;
    for (int r = 0; r < world; r++)
        for (size_t k = piece_at[r]; k < piece_at[r + 1]; k++) {
            float acc = input(0, k);
            for (int q = 1; q < world; q++) acc += input(q, k);
            float want = r == rank ? acc : input(rank, k);  // the others' buffers stay as they were
            bad_reduce += memcmp(&reduced[k], &want, sizeof(float)) != 0;
            bad_bcast += bcast[k] != (float)(r * 1000 + k);
        }
    EXPECT(bad_reduce == 0, "reduce to each root: %zu of %zu elements differ from the rank-order sum (the root's "
           "piece) or the input (the others')", bad_reduce, piece_at[world]);
    EXPECT(bad_bcast == 0, "broadcast from each root: %zu of %zu elements differ from the root's", bad_bcast,
           piece_at[world]);
    // The same bits on every rank: rank 0's sums against everyone's.
    std::vector<float> first(out);
    MPI_Bcast(first.data(), (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    EXPECT(memcmp(first.data(), out.data(), n * sizeof(float)) == 0, "rank 0's sums differ from this rank's");

    EXPECT(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("%s: %d ranks, %d failures\n", total ? "FAIL" : "ok", world, total);
    MPI_Finalize();
    return total ? 1 : 0;
#else
    printf("SKIP: built without MPI\n");
    return 77;
#endif
}
