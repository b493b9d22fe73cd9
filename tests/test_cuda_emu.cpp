// The CUDA emulation itself (kernels/cuda/emu/): thread and block indices, __syncthreads
// with static and dynamic shared memory, warp shuffles (xor, down, up, indexed) and votes,
// atomics, checked against what CUDA's programming guide defines, computed here by plain
// loops; the tensor-core product mma.sync m16n8k16 (FP16 and BF16) through each lane's
// fragments as the PTX ISA tabulates them, and with its fragments loaded by ldmatrix (plain
// and transposed) from padded shared tiles; asynchronous copies (cp.async) landing at their
// waits and not before; thread-block clusters (blocks of a cluster co-scheduled, the
// cluster barrier, distributed shared memory by mapa, %cluster_ctarank as the programming
// guide and the PTX ISA define them); and a barrier that part of a block never reaches, a
// cluster barrier that an exited block never reaches, and a mapping of an exited block's
// shared memory, each of which must end the process with an error rather than hang; and
// CUDA's launch limits as the hardware enforces them (the programming guide's tables for
// sm_90): more than 48 KB of dynamic shared memory only after the kernel opted in with
// cudaFuncSetAttribute, an opt-in of at most 227 KB, a carveout from -1 to 100, blocks of at
// most 1024 threads with z at most 64, clusters of at most 8 blocks that divide the grid.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <vector>
#include "kernels/cuda/cluster.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/copy_async.cuh"
#include "kernels/cuda/vec.cuh"
#include "kernels/cuda/mma.cuh"

using namespace CUDA_NS;

static int failures = 0;
#define EXPECT(cond, ...)                         \
    do {                                          \
        if (!(cond)) {                            \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                  \
            printf("\n");                         \
            failures++;                           \
        }                                         \
    } while (0)

static __global__ void index_kernel(int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * 10 + (int)gridDim.x;
}

// Reverses each block's slice through shared memory: needs the barrier to be real.
static __global__ void reverse_kernel(float *data) {
    __shared__ float tile[256];
    int t = threadIdx.x;
    tile[t] = data[blockIdx.x * blockDim.x + t];
    __syncthreads();
    data[blockIdx.x * blockDim.x + t] = tile[blockDim.x - 1 - t];
}

static __global__ void dynamic_reverse_kernel(float *data) {
    BERTPRE_DYNAMIC_SHARED(float, tile);
    int t = threadIdx.x;
    tile[t] = data[t];
    __syncthreads();
    data[t] = tile[blockDim.x - 1 - t];
}

static __global__ void block_sum_kernel(const float *in, float *out) {
    __shared__ float scratch[32];
    float s = block_sum(in[blockIdx.x * blockDim.x + threadIdx.x], scratch);
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

static __global__ void shuffle_kernel(int *xor_out, int *down_out, int *up_out, int *idx_out, unsigned *ballot_out) {
    int lane = threadIdx.x % 32;
    int v = (int)threadIdx.x * 3 + 1;
    xor_out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 5);
    down_out[threadIdx.x] = __shfl_down_sync(0xffffffffu, v, 3);
    up_out[threadIdx.x] = __shfl_up_sync(0xffffffffu, v, 2, 16);
    idx_out[threadIdx.x] = __shfl_sync(0xffffffffu, v, 7);
    ballot_out[threadIdx.x] = __ballot_sync(0xffffffffu, lane % 3 == 0);
}

static __global__ void vote_kernel(int *any_out, int *all_out, int *after_syncwarp) {
    __shared__ int flag[64];
    int lane = threadIdx.x % 32;
    any_out[threadIdx.x] = __any_sync(0xffffffffu, lane == 31 && threadIdx.x < 32);
    all_out[threadIdx.x] = __all_sync(0xffffffffu, threadIdx.x >= 32 || lane < 32);
    flag[threadIdx.x] = (int)threadIdx.x;
    __syncwarp();
    after_syncwarp[threadIdx.x] = flag[(threadIdx.x / 32) * 32 + (31 - lane)];
}

static __global__ void atomic_kernel(int *counter, unsigned *bits, int *maximum) {
    atomicAdd(counter, 1);
    atomicOr(bits, 1u << (threadIdx.x % 32));
    atomicMax(maximum, (int)(blockIdx.x * blockDim.x + threadIdx.x));
}

// Half of the block waits at a barrier the other half never reaches.
static __global__ void divergent_barrier_kernel(int *out) {
    if (threadIdx.x < 16) {
        __syncthreads();
        out[threadIdx.x] = 1;
    }
}

// Each block of a cluster writes its values to its shared memory; after the cluster barrier
// each thread reads the next block's (rank + 1, wrapping) through distributed shared memory
// and the previous block's, writing them with its rank. A second barrier keeps every block
// until the others have read it (the rule the emulation enforces).
static __global__ void cluster_kernel(int *out, unsigned *ranks) {
    BERTPRE_DYNAMIC_SHARED(int, mine);
    unsigned rank = cluster_rank(), n = ::emu::cluster_dim().x;
    int block = blockIdx.y * gridDim.x + blockIdx.x, t = threadIdx.x;
    mine[t] = block * 1000 + t;
    cluster_sync();
    int next = cluster_map(mine, (rank + 1) % n)[t], prev = cluster_map(mine, (rank + n - 1) % n)[t];
    out[(block * blockDim.x + t) * 2] = next;
    out[(block * blockDim.x + t) * 2 + 1] = prev;
    if (t == 0) ranks[block] = rank;
    cluster_sync();
}

// Block 1 of the cluster exits at once; block 0 maps its shared memory afterwards.
static __global__ void exited_dsmem_kernel(int *out) {
    BERTPRE_DYNAMIC_SHARED(int, mine);
    if (cluster_rank() == 1) return;
    __syncthreads();  // block 1 runs to its end meanwhile
    out[threadIdx.x] = cluster_map(mine, 1)[threadIdx.x];
}

// Block 1 exits; block 0 waits at the cluster barrier for it.
static __global__ void exited_cluster_barrier_kernel(int *out) {
    if (cluster_rank() == 1) return;
    cluster_sync();
    out[threadIdx.x] = 1;
}

// Runs launch in a child process, which must end with exit status 1 (an error message), not
// hang or crash.
template <typename F>
static void expect_error_exit(const char *what, F launch) {
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        alarm(20);  // a hang ends in SIGALRM, which the parent reports
        launch();
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 1, "%s: exit status 1 with a message (got %s %d)", what,
           WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

// Runs launch in a child process, which must end with exit status 1 and an error message on
// stderr that contains `rule` (the rule the emulation names), not hang, crash or pass.
template <typename F>
static void expect_refusal(const char *what, const char *rule, F launch) {
    fflush(stdout);
    int fds[2];
    if (pipe(fds) != 0) {
        EXPECT(false, "%s: pipe failed", what);
        return;
    }
    pid_t child = fork();
    if (child == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        alarm(20);  // a hang ends in SIGALRM, which the parent reports
        launch();
        _exit(0);
    }
    close(fds[1]);
    std::string message;
    char chunk[4096];
    ssize_t got;
    while ((got = read(fds[0], chunk, sizeof chunk)) > 0) message.append(chunk, (size_t)got);
    close(fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    std::string first = message.substr(0, message.find('\n'));
    bool refused = WIFEXITED(status) && WEXITSTATUS(status) == 1 && first.find(rule) != std::string::npos;
    EXPECT(refused, "%s: exit status 1 with a message naming '%s' (got %s %d: %s)", what, rule,
           WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
           first.c_str());
    if (refused) printf("ok refused: %s: %s\n", what, first.c_str());
}

// Sets an emulation mode (BERTPRE_EMU_ORDER, BERTPRE_EMU_CP_ASYNC) for the launches that
// follow; NULL restores the default.
static void set_mode(const char *variable, const char *value) {
    if (value)
        setenv(variable, value, 1);
    else
        unsetenv(variable);
}

// One warp multiplies A[16x16] B[16x8] + C[16x8] (row-major host arrays) through the
// fragments. Which elements a lane holds is written here as the PTX ISA's tables for
// mma.m16n8k16 with .f16/.bf16 inputs give it, element by element (groupID = lane >> 2,
// threadID_in_group = lane % 4), independently of the emulation's own formulas:
//   A a0..a7: row groupID for a0, a1, a4, a5, else groupID + 8;
//             column 2 threadID_in_group + (i & 1), + 8 for a4..a7
//   B b0..b3: row 2 threadID_in_group + (i & 1), + 8 for b2, b3; column groupID
//   C, D c0..c3: row groupID for c0, c1, else groupID + 8; column 2 threadID_in_group + (i & 1)
template <typename T>
static __global__ void mma_kernel(float *D, const float *A, const float *B, const float *C) {
    int lane = threadIdx.x, group = lane >> 2, tig = lane % 4;
    T av[8], bv[4];
    for (int i = 0; i < 8; i++) {
        int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
        int col = 2 * tig + (i & 1) + (i >= 4 ? 8 : 0);
        av[i] = from_float<T>(A[row * 16 + col]);
    }
    for (int i = 0; i < 4; i++) bv[i] = from_float<T>(B[(2 * tig + (i & 1) + (i >= 2 ? 8 : 0)) * 8 + group]);
    uint32_t a[4] = {pack_pair(av[0], av[1]), pack_pair(av[2], av[3]), pack_pair(av[4], av[5]),
                     pack_pair(av[6], av[7])};
    uint32_t b[2] = {pack_pair(bv[0], bv[1]), pack_pair(bv[2], bv[3])};
    float d[4];
    for (int i = 0; i < 4; i++) d[i] = C[(i < 2 ? group : group + 8) * 8 + 2 * tig + (i & 1)];
    mma_m16n8k16<T>(d, a, b);
    for (int i = 0; i < 4; i++) D[(i < 2 ? group : group + 8) * 8 + 2 * tig + (i & 1)] = d[i];
}

// Inputs are multiples of 1/4 below 2 in magnitude: exact in FP16 and BF16, and every
// product and sum exact in FP32, so the result must equal the plain loop bit for bit. No
// two elements of a row or column pattern repeat in a way that would hide a permutation.
template <typename T>
static void test_mma(const char *name) {
    std::vector<float> A(16 * 16), B(16 * 8), C(16 * 8), D(16 * 8, NAN);
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++) A[i * 16 + k] = (float)((i * 7 + k * 3 + i * k) % 13 - 6) / 4;
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 8; j++) B[k * 8 + j] = (float)((k * 5 + j * 11 + k * j) % 15 - 7) / 4;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) C[i * 8 + j] = (float)(i * 8 + j) / 4 - 16;
    LAUNCH(1, 32, 0, 0, mma_kernel<T>)(D.data(), A.data(), B.data(), C.data());
    int bad = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            double ref = C[i * 8 + j];
            for (int k = 0; k < 16; k++) ref += (double)A[i * 16 + k] * B[k * 8 + j];
            bad += D[i * 8 + j] != (float)ref;
        }
    EXPECT(bad == 0, "mma.m16n8k16 %s through the fragments: %d of 128 elements differ from the loop", name, bad);
}

// D[16x16] = A[16x16] B[16x16] with every fragment loaded by ldmatrix_x4 from shared tiles
// whose rows are padded to 24 elements (48 bytes: 16-byte aligned, as the attention tiles),
// B either as k x n rows (transposed load, as the P V product reads v) or as n x k rows (the
// plain load, as q k^T reads k). Lane l addresses row l % 8 of matrix l / 8; for A the four
// matrices are (rows 0-7, columns 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15), the order
// of the A fragment's registers.
template <typename T, bool B_KN>
static __global__ void ldmatrix_mma_kernel(float *D, const float *A, const float *B) {
    __shared__ __align__(16) T as[16][24], bs[16][24];
    int lane = threadIdx.x, m = lane / 8, r = lane % 8, group = lane / 4, tig = lane % 4;
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++) {
            as[i][k] = from_float<T>(A[i * 16 + k]);
            bs[i][k] = from_float<T>(B_KN ? B[i * 16 + k] : B[k * 16 + i]);  // bs[k][n] or bs[n][k]
        }
    __syncwarp();
    uint32_t a[4], b[4];
    ldmatrix_x4<false>(a, &as[m % 2 * 8 + r][m / 2 * 8]);
    if (B_KN)
        ldmatrix_x4<true>(b, &bs[m % 2 * 8 + r][m / 2 * 8]);  // (k 0-7, n-block 0), (k 8-15, 0), (.., 1)
    else
        ldmatrix_x4<false>(b, &bs[m / 2 * 8 + r][m % 2 * 8]);  // (n-block 0, k 0-7), (0, k 8-15), (1, ..)
    for (int nb = 0; nb < 2; nb++) {
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const uint32_t bn[2] = {b[2 * nb], b[2 * nb + 1]};
        mma_m16n8k16<T>(d, a, bn);
        for (int i = 0; i < 4; i++) D[(i < 2 ? group : group + 8) * 16 + nb * 8 + 2 * tig + (i & 1)] = d[i];
    }
}

template <typename T>
static void test_ldmatrix(const char *name) {
    std::vector<float> A(16 * 16), B(16 * 16);
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++) A[i * 16 + k] = (float)((i * 7 + k * 3 + i * k) % 13 - 6) / 4;
    for (int k = 0; k < 16; k++)
        for (int j = 0; j < 16; j++) B[k * 16 + j] = (float)((k * 5 + j * 11 + k * j) % 15 - 7) / 4;
    for (int kn = 0; kn < 2; kn++) {
        std::vector<float> D(16 * 16, NAN);
        if (kn)
            LAUNCH(1, 32, 0, 0, ldmatrix_mma_kernel<T, true>)(D.data(), A.data(), B.data());
        else
            LAUNCH(1, 32, 0, 0, ldmatrix_mma_kernel<T, false>)(D.data(), A.data(), B.data());
        int bad = 0;
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double ref = 0.0;
                for (int k = 0; k < 16; k++) ref += (double)A[i * 16 + k] * B[k * 16 + j];
                bad += D[i * 16 + j] != (float)ref;
            }
        EXPECT(bad == 0, "ldmatrix (%s) fragments into mma.m16n8k16 %s: %d of 256 elements differ from the loop",
               kn ? "B as k x n rows, .trans" : "B as n x k rows", name, bad);
    }
}

// cp.async as the emulation orders it: two groups of 16-byte copies into shared memory;
// before any wait the destination still holds what was there, after copy_async_wait<1> the
// first group has landed and the second not, after copy_async_wait<0> both. out[t] gets
// what thread t saw at each point (3 x 4 ints), for the program to compare.
static __global__ void copy_async_kernel(int *out, const int *src) {
    __shared__ __align__(16) int buf[2][32][4];
    int t = threadIdx.x;
    for (int g = 0; g < 2; g++)
        for (int k = 0; k < 4; k++) buf[g][t][k] = -1;
    copy_async<16>(buf[0][t], src + 4 * t, true);
    copy_async_commit();
    copy_async<16>(buf[1][t], src + 4 * (32 + t), t % 2 == 0);  // odd threads: zeros
    copy_async_commit();
    for (int k = 0; k < 4; k++) out[t * 12 + k] = buf[0][t][k];
    copy_async_wait<1>();
    for (int k = 0; k < 4; k++) out[t * 12 + 4 + k] = buf[0][t][k] * 1000 + (buf[1][t][k] == -1);
    copy_async_wait<0>();
    for (int k = 0; k < 4; k++) out[t * 12 + 8 + k] = buf[1][t][k];
}

// A 16-byte cp.async from an address 4 bytes past a 16-byte boundary (undefined on the GPU).
static __global__ void copy_async_misaligned_kernel(const int *src) {
    __shared__ __align__(16) int buf[32][4];
    copy_async<16>(buf[threadIdx.x], src + 4 * threadIdx.x + 1, true);
    copy_async_commit();
    copy_async_wait<0>();
}

// A 16-byte vector load (vec.cuh's load_span) from an address 2 bytes past a 16-byte boundary.
static __global__ void vector_misaligned_kernel(const f16 *src, float *out) {
    float v[8];
    load_span<8>(v, src + 8 * threadIdx.x + 1);
    out[threadIdx.x] = v[0];
}

// Reads static shared memory before any thread wrote it (undefined on the GPU), then writes it:
// the emulation poisons every block's static __shared__ with 0xff bytes (NaN), so each block
// reads NaN, not 0 and not the previous block's 1000.
static __global__ void static_shared_unwritten_kernel(float *out) {
    __shared__ float cell[64];
    out[blockIdx.x * blockDim.x + threadIdx.x] = cell[threadIdx.x];
    cell[threadIdx.x] = 1000.0f;
}

// Static shared memory in a kernel launched in clusters (the emulation has one copy for all
// blocks of a cluster; the GPU one per block): refused at launch.
static __global__ void cluster_static_shared_kernel(int *out) {
    __shared__ int cell[32];
    cell[threadIdx.x] = (int)cluster_rank();
    cluster_sync();
    out[cluster_rank() * 32 + threadIdx.x] = cell[threadIdx.x];
}

// A data race: thread t reads what thread t - 1 wrote to shared memory with no barrier between
// (undefined on the GPU, whose warps run in any order). Thread t's out is its neighbour's value,
// 0 ... 62 if the write came first, the 0xff poison (-1) if not.
static __global__ void neighbour_race_kernel(int *out) {
    __shared__ int cell[64];
    int t = threadIdx.x;
    cell[t] = t;
    if (t > 0) out[t - 1] = cell[t - 1];
}

// A double-buffer refill issued too soon: each thread reads its lower neighbour's slot of a
// shared buffer, then refills its own slot by cp.async with no __syncthreads between the
// neighbour's read and the refill (the barrier comes after the refill). On the GPU the refill
// may land at once and the neighbour read the new tile. out[t] is what thread t read.
static __global__ void refill_before_barrier_kernel(int *out, const int *src) {
    __shared__ __align__(16) int buf[32][4];
    int t = threadIdx.x;
    copy_async<16>(buf[t], src + 4 * t, true);
    copy_async_commit();
    copy_async_wait<0>();
    __syncthreads();
    out[t] = buf[(t + 31) % 32][0];
    copy_async<16>(buf[t], src + 4 * (32 + t), true);  // the refill: a __syncthreads belongs before it
    copy_async_commit();
    __syncthreads();
    copy_async_wait<0>();
}

// The ordering blind spots and their modes: static shared memory poisoned per block; a race
// between neighbours hidden by the forward order and shown by reverse and random orders; a
// refill before the barrier hidden when copies land at their waits and shown when they land
// at issue (BERTPRE_EMU_CP_ASYNC=early).
static void test_orders() {
    {
        std::vector<float> out(128, 0.0f);
        LAUNCH(2, 64, 0, 0, static_shared_unwritten_kernel)(out.data());
        int poisoned = 0;
        for (float v : out) poisoned += isnan(v);
        EXPECT(poisoned == 128, "static __shared__ read before written: %d of 128 reads NaN (poisoned)", poisoned);
        if (poisoned == 128) printf("ok static __shared__ read before written: 128 of 128 reads NaN in 2 blocks\n");
    }
    const char *orders[] = {"forward", "reverse", "random:7"};
    int stale[3] = {0, 0, 0};
    for (int o = 0; o < 3; o++) {
        set_mode("BERTPRE_EMU_ORDER", orders[o]);
        std::vector<int> out(63, -2);
        LAUNCH(1, 64, 0, 0, neighbour_race_kernel)(out.data());
        for (int t = 0; t < 63; t++) {
            EXPECT(out[t] == t || out[t] == -1, "race, order %s: thread %d read %d", orders[o], t + 1, out[t]);
            stale[o] += out[t] == -1;
        }
    }
    set_mode("BERTPRE_EMU_ORDER", nullptr);
    EXPECT(stale[0] == 0 && stale[1] == 63 && stale[2] > 0 && stale[2] < 63,
           "a read of a lower thread's write with no barrier: stale reads forward %d (0), reverse %d (63), "
           "random:7 %d (some)", stale[0], stale[1], stale[2]);
    printf("%s a read of a lower thread's write with no barrier: stale reads forward %d/63, reverse %d/63, "
           "random:7 %d/63\n", stale[1] == 63 ? "ok" : "FAIL", stale[0], stale[1], stale[2]);
    std::vector<int> src(2 * 32 * 4);
    for (size_t i = 0; i < src.size(); i++) src[i] = (int)i + 1;
    int wrong[2] = {0, 0};
    const char *landing[] = {"wait", "early"};
    for (int m = 0; m < 2; m++) {
        set_mode("BERTPRE_EMU_CP_ASYNC", landing[m]);
        std::vector<int> out(32, 0);
        LAUNCH(1, 32, 0, 0, refill_before_barrier_kernel)(out.data(), src.data());
        for (int t = 0; t < 32; t++) wrong[m] += out[t] != src[4 * ((t + 31) % 32)];
    }
    set_mode("BERTPRE_EMU_CP_ASYNC", nullptr);
    EXPECT(wrong[0] == 0 && wrong[1] == 31,
           "a cp.async refill before the barrier: wrong reads %d landing at the wait (0), %d landing early (31)",
           wrong[0], wrong[1]);
    printf("%s a cp.async refill issued before the barrier: wrong reads landing at the wait %d/32, early %d/32\n",
           wrong[1] == 31 ? "ok" : "FAIL", wrong[0], wrong[1]);
    // Early landing keeps the bookkeeping: copy_async_kernel's copies are there at each wait.
    set_mode("BERTPRE_EMU_CP_ASYNC", "early");
    {
        std::vector<int> out(32 * 12);
        LAUNCH(1, 32, 0, 0, copy_async_kernel)(out.data(), src.data());
        int bad = 0;
        for (int t = 0; t < 32; t++)
            for (int k = 0; k < 4; k++) {
                bad += out[t * 12 + k] != 4 * t + k + 1;  // landed at issue
                bad += out[t * 12 + 8 + k] != (t % 2 ? 0 : 4 * (32 + t) + k + 1);
            }
        EXPECT(bad == 0, "cp.async landing early: %d of 256 values not the copies'", bad);
    }
    set_mode("BERTPRE_EMU_CP_ASYNC", nullptr);
    expect_refusal("BERTPRE_EMU_ORDER=backwards", "BERTPRE_EMU_ORDER", [] {
        set_mode("BERTPRE_EMU_ORDER", "backwards");
        std::vector<int> out(63);
        LAUNCH(1, 64, 0, 0, neighbour_race_kernel)(out.data());
    });
    expect_refusal("static __shared__ in a kernel launched in clusters of 2", "static __shared__", [] {
        std::vector<int> out(64);
        LAUNCH_CLUSTER(2, 32, 0, 0, 2, cluster_static_shared_kernel)(out.data());
    });
}

// load_pair and store_pair (mma.cuh) at an address 2 bytes past a 4-byte boundary: a 32-bit
// access on the GPU, where that alignment is undefined; load selects which.
static __global__ void pair_misaligned_kernel(f16 *data, int load) {
    if (load)
        data[0] = from_float<f16>((float)load_pair(data + 2 * threadIdx.x + 1));
    else
        store_pair(data + 2 * threadIdx.x + 1, 0u);
}

// An 8-byte (float2) store at an address aligned to 4 bytes, as the fused attention's dQ
// partials are stored.
static __global__ void float2_misaligned_kernel(float *data) {
    float *cell = data + 2 * threadIdx.x + 1;
    access_aligned(cell, 8, "a float2 store");
    *reinterpret_cast<float2 *>(cell) = make_float2(1.0f, 2.0f);
}

// A kernel compiled for at most 128 threads per block. The emulation runs any block size;
// `test_cuda_emu launch-bounds` launches it with 128 and with 256 threads for
// tests/test_launch_ledger.py, whose check of the launch ledger must refuse the second (the
// GPU refuses such a launch).
static __global__ void __launch_bounds__(128) bounded_kernel(int *out) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = (int)threadIdx.x;
}

static void test_copy_async() {
    std::vector<int> src(2 * 32 * 4), out(32 * 12);
    for (size_t i = 0; i < src.size(); i++) src[i] = (int)i + 1;
    LAUNCH(1, 32, 0, 0, copy_async_kernel)(out.data(), src.data());
    int bad = 0;
    for (int t = 0; t < 32; t++)
        for (int k = 0; k < 4; k++) {
            bad += out[t * 12 + k] != -1;                                   // nothing landed before a wait
            bad += out[t * 12 + 4 + k] != (4 * t + k + 1) * 1000 + 1;       // wait<1>: group 1 only
            bad += out[t * 12 + 8 + k] != (t % 2 ? 0 : 4 * (32 + t) + k + 1);  // wait<0>: group 2, zeros if not real
        }
    EXPECT(bad == 0, "cp.async emulation: %d of 384 values not what the wait points allow", bad);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "launch-bounds") == 0) {
        std::vector<int> out(256);
        LAUNCH(2, 128, 0, 0, bounded_kernel)(out.data());
        LAUNCH(1, 256, 0, 0, bounded_kernel)(out.data());
        return 0;
    }
    // The tests below expect the default modes; test_orders sets its own.
    set_mode("BERTPRE_EMU_ORDER", nullptr);
    set_mode("BERTPRE_EMU_CP_ASYNC", nullptr);
    test_copy_async();
    test_orders();
    test_mma<f16>("f16");
    test_mma<bf16>("bf16");
    test_ldmatrix<f16>("f16");
    test_ldmatrix<bf16>("bf16");
    {
        int n = 1000;
        std::vector<int> out(n, -1);
        LAUNCH(ceil_div(n, 128), 128, 0, 0, index_kernel)(out.data(), n);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += out[i] != i * 10 + 8;
        EXPECT(bad == 0, "index_kernel: %d wrong elements", bad);
    }
    {
        std::vector<float> data(3 * 256);
        for (size_t i = 0; i < data.size(); i++) data[i] = (float)i;
        LAUNCH(3, 256, 0, 0, reverse_kernel)(data.data());
        int bad = 0;
        for (int b = 0; b < 3; b++)
            for (int t = 0; t < 256; t++) bad += data[b * 256 + t] != (float)(b * 256 + 255 - t);
        EXPECT(bad == 0, "reverse_kernel: %d wrong elements", bad);
    }
    {
        std::vector<float> data(96);
        for (size_t i = 0; i < data.size(); i++) data[i] = (float)i;
        LAUNCH(1, 96, 96 * sizeof(float), 0, dynamic_reverse_kernel)(data.data());
        int bad = 0;
        for (int t = 0; t < 96; t++) bad += data[t] != (float)(95 - t);
        EXPECT(bad == 0, "dynamic_reverse_kernel: %d wrong elements", bad);
    }
    {
        int threads = 320, blocks = 2;
        std::vector<float> in(threads * blocks), out(threads * blocks);
        for (size_t i = 0; i < in.size(); i++) in[i] = (float)((i * 37) % 101) * 0.25f;
        LAUNCH(blocks, threads, 0, 0, block_sum_kernel)(in.data(), out.data());
        for (int b = 0; b < blocks; b++) {
            double ref = 0;
            for (int t = 0; t < threads; t++) ref += in[b * threads + t];
            int bad = 0;
            for (int t = 0; t < threads; t++) bad += out[b * threads + t] != (float)ref;
            EXPECT(bad == 0, "block_sum: block %d: %d threads differ from %g", b, bad, ref);
        }
    }
    {
        int n = 64;
        std::vector<int> x(n), d(n), u(n), s(n);
        std::vector<unsigned> bal(n);
        LAUNCH(1, n, 0, 0, shuffle_kernel)(x.data(), d.data(), u.data(), s.data(), bal.data());
        unsigned expect_ballot = 0;
        for (int lane = 0; lane < 32; lane++)
            if (lane % 3 == 0) expect_ballot |= 1u << lane;
        int bad = 0;
        for (int t = 0; t < n; t++) {
            int lane = t % 32, warp = t / 32;
            auto v = [&](int l) { return (warp * 32 + l) * 3 + 1; };
            bad += x[t] != v(lane ^ 5);
            bad += d[t] != v(lane + 3 < 32 ? lane + 3 : lane);
            bad += u[t] != v(lane % 16 >= 2 ? lane - 2 : lane);
            bad += s[t] != v(7);
            bad += bal[t] != expect_ballot;
        }
        EXPECT(bad == 0, "shuffles and ballot: %d wrong values", bad);
    }
    {
        int n = 64;
        std::vector<int> any(n), all(n), swapped(n);
        LAUNCH(1, n, 0, 0, vote_kernel)(any.data(), all.data(), swapped.data());
        int bad = 0;
        for (int t = 0; t < n; t++) {
            bad += any[t] != (t < 32);  // lane 31 of warp 0 votes yes; nobody in warp 1
            bad += all[t] != 1;
            bad += swapped[t] != (t / 32) * 32 + 31 - t % 32;
        }
        EXPECT(bad == 0, "__any_sync, __all_sync, __syncwarp: %d wrong values", bad);
    }
    {
        int counter = 0, maximum = -1;
        unsigned bits = 0;
        LAUNCH(3, 96, 0, 0, atomic_kernel)(&counter, &bits, &maximum);
        EXPECT(counter == 288 && bits == 0xffffffffu && maximum == 287, "atomics: count %d, bits %x, max %d",
               counter, bits, maximum);
    }
    {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            alarm(20);  // a hang ends in SIGALRM, which the parent reports
            std::vector<int> out(32);
            LAUNCH(1, 32, 0, 0, divergent_barrier_kernel)(out.data());
            _exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 1,
               "a barrier reached by half the block: exit status 1 with a message (got %s %d)",
               WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    {
        // A grid of 6 x 2 blocks in clusters of 3 x 1: block (x, y) is rank x % 3 of the
        // cluster of blocks (x - x % 3 .. +2, y); every block sees its neighbours' values.
        const int threads = 40, blocks = 12;
        std::vector<int> out(blocks * threads * 2, -1);
        std::vector<unsigned> ranks(blocks, 99);
        LAUNCH_CLUSTER(dim3(6, 2), threads, threads * sizeof(int), 0, dim3(3, 1, 1), cluster_kernel)(out.data(),
                                                                                                    ranks.data());
        int bad = 0;
        for (int y = 0; y < 2; y++)
            for (int x = 0; x < 6; x++) {
                int block = y * 6 + x, first = block - x % 3;
                bad += ranks[block] != (unsigned)(x % 3);
                for (int t = 0; t < threads; t++) {
                    bad += out[(block * threads + t) * 2] != (first + (x % 3 + 1) % 3) * 1000 + t;
                    bad += out[(block * threads + t) * 2 + 1] != (first + (x % 3 + 2) % 3) * 1000 + t;
                }
            }
        EXPECT(bad == 0, "clusters: %d wrong ranks or distributed shared memory values", bad);
    }
    expect_error_exit("distributed shared memory of an exited block", [] {
        std::vector<int> out(32);
        LAUNCH_CLUSTER(2, 32, 32 * sizeof(int), 0, 2, exited_dsmem_kernel)(out.data());
    });
    expect_error_exit("a cluster barrier that an exited block never reaches", [] {
        std::vector<int> out(32);
        LAUNCH_CLUSTER(2, 32, 0, 0, 2, exited_cluster_barrier_kernel)(out.data());
    });
    // Launch limits. 64 KB of dynamic shared memory: refused before the opt-in, then run.
    expect_error_exit("64 KB of dynamic shared memory without the opt-in", [] {
        std::vector<float> data(96);
        LAUNCH(1, 96, 64 * 1024, 0, dynamic_reverse_kernel)(data.data());
    });
    EXPECT(cudaFuncSetAttribute(dynamic_reverse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024) ==
               cudaErrorInvalidValue,
           "an opt-in of 228 KB (above sm_90's 227 KB) is refused");
    EXPECT(cudaFuncSetAttribute(dynamic_reverse_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 101) ==
               cudaErrorInvalidValue,
           "a carveout of 101 is refused");
    EXPECT(cudaFuncSetAttribute(dynamic_reverse_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                (int)cudaSharedmemCarveoutMaxShared) == cudaSuccess,
           "the largest carveout is taken");
    EXPECT(cudaFuncSetAttribute(dynamic_reverse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) ==
               cudaSuccess,
           "an opt-in of 64 KB is taken");
    {
        std::vector<float> data(96);
        for (size_t i = 0; i < data.size(); i++) data[i] = (float)i;
        LAUNCH(1, 96, 64 * 1024, 0, dynamic_reverse_kernel)(data.data());
        int bad = 0;
        for (int t = 0; t < 96; t++) bad += data[t] != (float)(95 - t);
        EXPECT(bad == 0, "64 KB of dynamic shared memory after the opt-in: %d wrong elements", bad);
    }
    expect_error_exit("65 KB of dynamic shared memory after an opt-in of 64 KB", [] {
        std::vector<float> data(96);
        LAUNCH(1, 96, 65 * 1024, 0, dynamic_reverse_kernel)(data.data());
    });
    expect_error_exit("a block of 1 x 1 x 65 threads (z at most 64)", [] {
        std::vector<int> out(65);
        LAUNCH(1, dim3(1, 1, 65), 0, 0, index_kernel)(out.data(), 0);
    });
    expect_error_exit("a block of 1056 threads", [] {
        std::vector<int> out(1056);
        LAUNCH(1, 1056, 0, 0, index_kernel)(out.data(), 0);
    });
    expect_error_exit("a 16-byte cp.async from an address aligned to 4 bytes", [] {
        alignas(16) static int src[32 * 4 + 8];
        LAUNCH(1, 32, 0, 0, copy_async_misaligned_kernel)(src);
    });
    expect_error_exit("a 16-byte vector load from an address aligned to 2 bytes", [] {
        alignas(16) static f16 src[32 * 8 + 16];
        static float out[32];
        LAUNCH(1, 32, 0, 0, vector_misaligned_kernel)(src, out);
    });
    expect_refusal("load_pair at an address aligned to 2 bytes", "not aligned to 4 bytes", [] {
        alignas(16) static f16 data[64 + 4];
        LAUNCH(1, 32, 0, 0, pair_misaligned_kernel)(data, 1);
    });
    expect_refusal("store_pair at an address aligned to 2 bytes", "not aligned to 4 bytes", [] {
        alignas(16) static f16 data[64 + 4];
        LAUNCH(1, 32, 0, 0, pair_misaligned_kernel)(data, 0);
    });
    expect_refusal("a float2 store at an address aligned to 4 bytes", "not aligned to 8 bytes", [] {
        alignas(16) static float data[64 + 4];
        LAUNCH(1, 32, 0, 0, float2_misaligned_kernel)(data);
    });
    expect_error_exit("a cluster of 9 blocks", [] {
        std::vector<int> out(32 * 9);
        LAUNCH_CLUSTER(9, 32, 0, 0, 9, exited_cluster_barrier_kernel)(out.data());
    });
    expect_error_exit("a cluster of 3 blocks on a grid of 4", [] {
        std::vector<int> out(32 * 4);
        LAUNCH_CLUSTER(4, 32, 0, 0, 3, exited_cluster_barrier_kernel)(out.data());
    });
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures ? 1 : 0;
}
