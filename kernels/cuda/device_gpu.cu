// device.h on a real GPU: the CUDA runtime on one stream, and GEMMs through cuBLASLt with
// FP32 accumulation (CUBLAS_COMPUTE_32F). Every call that can fail goes through cuda_check
// or cublas_check, which print file, line, the call and a hint, then exit non-zero.
// BERTPRE_SYNC_CHECK=1 in the environment synchronizes after every launch, so that an
// asynchronous fault is reported at the kernel that caused it.
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <set>
#include <utility>
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ledger.h"

#define cuda_check(call)                                                                                   \
    do {                                                                                                   \
        cudaError_t err_ = (call);                                                                         \
        if (err_ != cudaSuccess)                                                                           \
            fatal("%s:%d: %s failed: %s (%s)", __FILE__, __LINE__, #call, cudaGetErrorString(err_),        \
                  cuda_hint(err_));                                                                        \
    } while (0)

#define cublas_check(call)                                                                                 \
    do {                                                                                                   \
        cublasStatus_t st_ = (call);                                                                       \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                                  \
            fatal("%s:%d: %s failed with cuBLAS status %d (%s)", __FILE__, __LINE__, #call, (int)st_,      \
                  st_ == CUBLAS_STATUS_NOT_SUPPORTED ? "no cuBLASLt algorithm for this shape and type"      \
                                                     : "see the cuBLAS documentation for the status");     \
    } while (0)

static const char *cuda_hint(cudaError_t err) {
    switch (err) {
        case cudaErrorMemoryAllocation: return "out of GPU memory: reduce train.micro_batch_size";
        case cudaErrorNoDevice: return "no CUDA GPU is visible: check CUDA_VISIBLE_DEVICES, or use train.backend=cpu";
        case cudaErrorInsufficientDriver: return "the NVIDIA driver is older than this CUDA runtime";
        case cudaErrorNoKernelImageForDevice:
            return "this GPU's architecture was not built: rebuild with -Dgpu_archs including it";
        default: return "a kernel or copy failed; rerun with BERTPRE_SYNC_CHECK=1 to find which";
    }
}

namespace CUDA_NS {

namespace {
cudaStream_t stream, comm_stream;
cudaEvent_t order_event;
cublasLtHandle_t lt;
bool sync_check;
int selected_device = -1;  // device_select's choice; device 0 when it was not called
const size_t gemm_workspace_bytes = 32u << 20;
void *gemm_workspace;  // cuBLASLt's, allocated on the first GEMM, freed by device_shutdown

void init() {
    if (lt) return;
    if (selected_device >= 0) cuda_check(cudaSetDevice(selected_device));
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cuda_check(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));
    cuda_check(cudaEventCreateWithFlags(&order_event, cudaEventDisableTiming));
    cublas_check(cublasLtCreate(&lt));
    const char *env = getenv("BERTPRE_SYNC_CHECK");
    sync_check = env && env[0] == '1';
}

cudaDataType_t cuda_type(dtype_t t) {
    return t == DTYPE_F16 ? CUDA_R_16F : t == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

cublasLtMatrixLayout_t layout(dtype_t type, int rows, int cols, int ld, int batch, long long stride) {
    cublasLtMatrixLayout_t l;
    cublas_check(cublasLtMatrixLayoutCreate(&l, cuda_type(type), rows, cols, ld));
    if (batch > 1) {
        cublas_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
        cublas_check(
            cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
    return l;
}
}  // namespace

cudaStream_t device_stream() {
    init();
    return stream;
}

// One GPU per rank, chosen by device_choose among the visible ones. Counting the devices and
// reading a bus id make no context, so nothing has touched a GPU before this choice.
const char *device_select(int rank, int local_rank, int local_size) {
    static char bus_id[32];
    if (lt) fatal("rank %d: the GPU is chosen before any other CUDA call", rank);
    int devices = 0;
    cuda_check(cudaGetDeviceCount(&devices));
    selected_device = device_choose(rank, local_rank, local_size, devices, "CUDA_VISIBLE_DEVICES");
    cuda_check(cudaDeviceGetPCIBusId(bus_id, (int)sizeof bus_id, selected_device));
    init();
    return bus_id;
}

cudaStream_t device_comm_stream() {
    init();
    return comm_stream;
}

void device_stream_wait(cudaStream_t waiter, cudaStream_t signaller) {
    init();
    cuda_check(cudaEventRecord(order_event, signaller));
    cuda_check(cudaStreamWaitEvent(waiter, order_event, 0));
}

int device_stream_done(cudaStream_t s) {
    init();
    cudaError_t err = cudaStreamQuery(s);
    if (err == cudaErrorNotReady) return 0;
    cuda_check(err);
    return 1;
}

static cudaEvent_t marks[64];  // device_stream_mark's slots, created on first use

void device_stream_mark(cudaStream_t s, int slot) {
    init();
    if (!marks[slot]) cuda_check(cudaEventCreateWithFlags(&marks[slot], cudaEventDisableTiming));
    cuda_check(cudaEventRecord(marks[slot], s));
}

int device_mark_done(int slot) {
    if (!marks[slot]) return 1;
    cudaError_t err = cudaEventQuery(marks[slot]);
    if (err == cudaErrorNotReady) return 0;
    cuda_check(err);
    return 1;
}

void *device_alloc(size_t bytes) {
    init();
    void *p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 256);
    if (err != cudaSuccess) {
        size_t free_bytes = 0, total_bytes = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_bytes, &total_bytes);
        fatal("out of GPU memory allocating %.1f MiB (%.1f MiB free of %.1f MiB): "
              "reduce train.micro_batch_size (the memory plan printed at start shows where memory goes)",
              bytes / 1048576.0, free_bytes / 1048576.0, total_bytes / 1048576.0);
    }
    cuda_check(cudaMemsetAsync(p, 0, bytes, stream));
    ledger_add(p, bytes);
    return p;
}

void device_free(void *ptr) {
    if (!ptr) return;
    ledger_remove(ptr);
    cuda_check(cudaFree(ptr));
}

void device_upload(void *dst, const void *host_src, size_t bytes) {
    init();
    cuda_check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
    cuda_check(cudaStreamSynchronize(stream));
}

// Pinned staging buffers used in turn; one is refilled only after the copy that last read
// it has finished (its event), which with this many slots is long past.
static const int STAGING_SLOTS = 8;
struct staging_slot {
    void *host;
    size_t bytes;
    cudaEvent_t done;
};
static staging_slot staging[STAGING_SLOTS];
static int staging_next = 0;

void device_upload_async(void *dst, const void *host_src, size_t bytes) {
    init();
    if (bytes == 0) return;
    staging_slot &s = staging[staging_next];
    staging_next = (staging_next + 1) % STAGING_SLOTS;
    if (s.done)
        cuda_check(cudaEventSynchronize(s.done));
    else
        cuda_check(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    if (s.bytes < bytes) {
        if (s.host) cuda_check(cudaFreeHost(s.host));
        cuda_check(cudaMallocHost(&s.host, bytes));
        s.bytes = bytes;
    }
    memcpy(s.host, host_src, bytes);
    cuda_check(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, stream));
    cuda_check(cudaEventRecord(s.done, stream));
}

void device_download(void *host_dst, const void *src, size_t bytes) {
    init();
    cuda_check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream));
    cuda_check(cudaStreamSynchronize(stream));
}

void device_zero(void *ptr, size_t bytes) {
    init();
    cuda_check(cudaMemsetAsync(ptr, 0, bytes, stream));
}

void device_synchronize() {
    init();
    cuda_check(cudaStreamSynchronize(stream));
}

const char *device_name() {
    static char name[256];
    init();
    if (!name[0]) {
        int device = 0;
        cudaDeviceProp prop;
        cuda_check(cudaGetDevice(&device));
        cuda_check(cudaGetDeviceProperties(&prop, device));
        snprintf(name, sizeof name, "%s", prop.name);
    }
    return name;
}

int device_cluster_launch() {
    init();
    int device = 0, yes = 0;
    cuda_check(cudaGetDevice(&device));
    cuda_check(cudaDeviceGetAttribute(&yes, cudaDevAttrClusterLaunch, device));
    return yes;
}

size_t device_memory_available() {
    init();
    size_t free_bytes = 0, total_bytes = 0;
    cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes));
    return free_bytes;
}

void device_check_launch(const char *what, const char *file, int line) {
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess && sync_check) err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess)
        fatal("%s:%d: launch of %s failed: %s (%s)", file, line, what, cudaGetErrorString(err), cuda_hint(err));
}

// A GEMM's cuBLASLt objects and chosen algorithm, made once per distinct problem (shape,
// strides, types, epilogue, operand alignments; the row-dependent dimensions by their
// bucket, gemm_plans.h) and reused: the heuristic query and the descriptor setup cost tens
// of microseconds, and a training step repeats the same few dozen problems many times.
struct gemm_plan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    bool found;  // the heuristic gave an algorithm
    int n, k;    // the dimensions the layouts hold now
    // Real (n, k) at which cublasLtMatmul refused the bucket's algorithm: those calls go to an
    // exact plan at once instead of failing again first.
    std::set<std::pair<int, int>> refused;
};
static gemm_plan_cache<gemm_plan> gemm_plans;

gemm_plan_stats device_gemm_plan_stats(bool reset) {
    gemm_plan_stats s = gemm_plans.stats;
    if (reset) gemm_plans.stats = gemm_plan_stats{0, 0, 0, gemm_plans.plans.size()};
    return s;
}

static void destroy_gemm_plan(gemm_plan &p) {
    cublas_check(cublasLtMatrixLayoutDestroy(p.la));
    cublas_check(cublasLtMatrixLayoutDestroy(p.lb));
    cublas_check(cublasLtMatrixLayoutDestroy(p.lc));
    cublas_check(cublasLtMatmulDescDestroy(p.desc));
}

// The layouts' rows and columns for n and k (m never changes within a plan).
static void set_gemm_dims(gemm_plan &p, const gemm_key &g, int n, int k) {
    if (p.n == n && p.k == k) return;
    auto set = [](cublasLtMatrixLayout_t l, uint64_t rows, uint64_t cols) {
        cublas_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows)));
        cublas_check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
    };
    set(p.la, g.trans_a ? k : g.m, g.trans_a ? g.m : k);
    set(p.lb, g.trans_b ? n : k, g.trans_b ? k : n);
    set(p.lc, g.m, n);
    p.n = n;
    p.k = k;
}

// The epilogue's pointers: set before the heuristic query, which reads their values for the
// alignment it may assume (cublasLt.h), and again before each launch.
static void set_epilogue_pointers(gemm_plan &p, const void *vector, const void *aux) {
    if (vector)
        cublas_check(
            cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector, sizeof(vector)));
    if (aux)
        cublas_check(
            cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
}

// The plan of key g, its heuristic asked for g's dimensions (the buckets' sizes); found is
// false when cuBLASLt has no algorithm for them.
static gemm_plan make_gemm_plan(const gemm_key &g, const void *vector, const void *aux) {
    gemm_plan p;
    cublas_check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublas_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    // The bias (or bias gradient) has the output's type (cuBLASLt's default); the model only
    // adds a bias where the output is in the activation type.
    cublasLtEpilogue_t epilogue = g.gelu == GEMM_GELU_AUX_BIAS ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                  : g.gelu == GEMM_DGELU_BGRAD ? CUBLASLT_EPILOGUE_DGELU_BGRAD
                                  : g.gelu == GEMM_BGRADB      ? CUBLASLT_EPILOGUE_BGRADB
                                  : g.bias                     ? CUBLASLT_EPILOGUE_BIAS
                                                               : CUBLASLT_EPILOGUE_DEFAULT;
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
        cublas_check(
            cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (g.gelu == GEMM_BGRADB) {  // the output's type, said explicitly for an FP32 output of 16-bit inputs
        cudaDataType_t vector_type = cuda_type((dtype_t)g.c_type);
        cublas_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &vector_type,
                                                    sizeof(vector_type)));
    }
    if (gemm_is_gelu(g.gelu)) {
        int64_t ld_aux = g.ld_aux;
        cublas_check(
            cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
    }
    set_epilogue_pointers(p, vector, aux);
    p.la = layout((dtype_t)g.ab_type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.batch, g.stride_a);
    p.lb = layout((dtype_t)g.ab_type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, g.batch, g.stride_b);
    p.lc = layout((dtype_t)g.c_type, g.m, g.n, g.ldc, g.batch, g.stride_c);
    p.n = g.n;
    p.k = g.k;
    cublasLtMatmulPreference_t pref;
    cublas_check(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws_bytes = gemm_workspace_bytes;
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof(ws_bytes)));
    const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t aligns[4] = {g.align_a, g.align_b, g.align_c, g.align_c};
    for (int i = 0; i < 4; i++)
        cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], sizeof(aligns[i])));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.la, p.lb, p.lc, p.lc, pref, 1, &result, &found);
    cublas_check(cublasLtMatmulPreferenceDestroy(pref));
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) cublas_check(st);
    p.found = st == CUBLAS_STATUS_SUCCESS && found > 0;
    if (p.found) p.algo = result.algo;
    return p;
}

bool device_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void *A, int lda,
                 long long stride_a, const void *B, int ldb, long long stride_b, float beta, void *C, int ldc,
                 long long stride_c, int batch, dtype_t ab_type, dtype_t c_type, const void *bias,
                 const void *C_in, gemm_gelu gelu, void *aux, int ld_aux, void *bgrad) {
    init();
    if (!C_in) C_in = C;
    const void *vector = gelu == GEMM_DGELU_BGRAD || gelu == GEMM_BGRADB ? bgrad : bias;
    gemm_key key = gemm_plan_key(trans_a, trans_b, bias != nullptr, (int)gelu, m, n, k, lda, ldb, ldc, ld_aux, batch,
                                 stride_a, stride_b, stride_c, (int)ab_type, (int)c_type, gemm_alignment(A),
                                 gemm_alignment(B), std::min(gemm_alignment(C), gemm_alignment(C_in)),
                                 gemm_is_gelu(gelu) ? gemm_alignment(aux) : 0, vector ? gemm_alignment(vector) : 0);
    gemm_check(key, n, k, beta, vector != nullptr, aux != nullptr, "");
    if (!gemm_workspace) gemm_workspace = device_alloc(gemm_workspace_bytes);
    void *ws = gemm_workspace;
    auto launch = [&](gemm_plan *q, const gemm_key &g) {
        set_gemm_dims(*q, g, n, k);
        set_epilogue_pointers(*q, vector, gemm_is_gelu(gelu) ? aux : nullptr);
        return cublasLtMatmul(lt, q->desc, &alpha, A, q->la, B, q->lb, &beta, C_in, q->lc, C, q->lc, &q->algo, ws,
                              gemm_workspace_bytes, stream);
    };
    auto make = [&](const gemm_key &g) { return make_gemm_plan(g, vector, gemm_is_gelu(gelu) ? aux : nullptr); };
    gemm_plan *p = &gemm_plans.get(key, make, destroy_gemm_plan);
    cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
    bool bucketed = key.n != n || key.k != k;
    if (p->found && !(bucketed && p->refused.count({n, k}))) {
        st = launch(p, key);
        if (st != CUBLAS_STATUS_SUCCESS && bucketed) p->refused.insert({n, k});
    }
    if (st != CUBLAS_STATUS_SUCCESS && bucketed) {
        // No algorithm for the bucket, or the bucket's refused the real dimensions (checked
        // before any launch): a plan of this exact shape, as before buckets, under a key no
        // bucket takes (n < 0).
        gemm_key exact = key;
        exact.n = -n;
        exact.k = k;
        p = &gemm_plans.get(exact, [&](const gemm_key &g) {
            gemm_key real = g;
            real.n = n;
            return make(real);
        }, destroy_gemm_plan);
        gemm_key real = key;
        real.n = n;
        if (p->found) st = launch(p, real);
    }
    if (st == CUBLAS_STATUS_SUCCESS) return true;
    if (gelu != GEMM_NO_GELU && (!p->found || st == CUBLAS_STATUS_NOT_SUPPORTED)) return false;
    if (!p->found)
        fatal("cuBLASLt has no algorithm for a GEMM m=%d n=%d k=%d batch=%d (types %d/%d, "
              "epilogue %d)", m, n, k, batch, (int)ab_type, (int)c_type, (int)gelu);
    cublas_check(st);
    return true;
}

void device_drain() {
    if (lt) cuda_check(cudaDeviceSynchronize());
}

// Everything init() and the calls above made for the process, in reverse, once the device has
// finished its queued work (the workspaces of device_workspace went before it:
// device_release): cuBLASLt's workspace, the GEMM plans, the pinned staging buffers and their events, the cuBLASLt
// handle, the ordering event and both streams. The next call makes them afresh through init().
size_t device_shutdown(size_t *live_bytes) {
    device_drain();
    device_free(gemm_workspace);
    gemm_workspace = nullptr;
    gemm_plans.clear(destroy_gemm_plan);
    for (staging_slot &s : staging) {
        if (s.done) cuda_check(cudaEventDestroy(s.done));
        if (s.host) cuda_check(cudaFreeHost(s.host));
        s = staging_slot{};
    }
    staging_next = 0;
    for (cudaEvent_t &e : marks) {
        if (e) cuda_check(cudaEventDestroy(e));
        e = nullptr;
    }
    if (lt) {
        cublas_check(cublasLtDestroy(lt));
        cuda_check(cudaEventDestroy(order_event));
        cuda_check(cudaStreamDestroy(comm_stream));
        cuda_check(cudaStreamDestroy(stream));
        lt = nullptr;
        order_event = nullptr;
        stream = comm_stream = nullptr;
    }
    return ledger_live(live_bytes);
}

}  // namespace CUDA_NS

extern "C" int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}
