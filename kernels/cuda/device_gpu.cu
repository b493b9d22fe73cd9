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
#include <map>
#include <tuple>
#include "kernels/cuda/common.cuh"

#define cuda_check(call)                                                                                   \
    do {                                                                                                   \
        cudaError_t err_ = (call);                                                                         \
        if (err_ != cudaSuccess) {                                                                         \
            fprintf(stderr, "bertpre: error: %s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,       \
                    cudaGetErrorString(err_), cuda_hint(err_));                                            \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

#define cublas_check(call)                                                                                 \
    do {                                                                                                   \
        cublasStatus_t st_ = (call);                                                                       \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                                \
            fprintf(stderr, "bertpre: error: %s:%d: %s failed with cuBLAS status %d (%s)\n", __FILE__,      \
                    __LINE__, #call, (int)st_,                                                             \
                    st_ == CUBLAS_STATUS_NOT_SUPPORTED ? "no cuBLASLt algorithm for this shape and type"    \
                                                       : "see the cuBLAS documentation for the status");   \
            exit(1);                                                                                       \
        }                                                                                                  \
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

uint32_t alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t align = 256;
    while (align > 1 && a % align) align /= 2;
    return align;
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
    if (lt) {
        fprintf(stderr, "bertpre: error: rank %d: the GPU is chosen before any other CUDA call\n", rank);
        exit(1);
    }
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

void *device_alloc(size_t bytes) {
    init();
    void *p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 256);
    if (err != cudaSuccess) {
        size_t free_bytes = 0, total_bytes = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_bytes, &total_bytes);
        fprintf(stderr,
                "bertpre: error: out of GPU memory allocating %.1f MiB (%.1f MiB free of %.1f MiB): "
                "reduce train.micro_batch_size (the memory plan printed at start shows where memory goes)\n",
                bytes / 1048576.0, free_bytes / 1048576.0, total_bytes / 1048576.0);
        exit(1);
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
    if (err != cudaSuccess) {
        fprintf(stderr, "bertpre: error: %s:%d: launch of %s failed: %s (%s)\n", file, line, what,
                cudaGetErrorString(err), cuda_hint(err));
        exit(1);
    }
}

// A GEMM's cuBLASLt objects and chosen algorithm, made once per distinct problem (shape,
// strides, types, epilogue, operand alignments) and reused: the heuristic query and the
// descriptor setup cost tens of microseconds, and a training step repeats the same few
// dozen problems many times.
struct gemm_key {
    bool trans_a, trans_b, bias;
    int m, n, k, lda, ldb, ldc, batch;
    long long stride_a, stride_b, stride_c;
    dtype_t ab_type, c_type;
    uint32_t align_a, align_b, align_c;
    bool operator<(const gemm_key &o) const {
        return std::tie(trans_a, trans_b, bias, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c, ab_type,
                        c_type, align_a, align_b, align_c) <
               std::tie(o.trans_a, o.trans_b, o.bias, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.batch, o.stride_a,
                        o.stride_b, o.stride_c, o.ab_type, o.c_type, o.align_a, o.align_b, o.align_c);
    }
};
struct gemm_plan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};
static std::map<gemm_key, gemm_plan> gemm_plans;

static gemm_plan make_gemm_plan(const gemm_key &g) {
    gemm_plan p;
    cublas_check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublas_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (g.bias) {
        // The bias has the output's type (cuBLASLt's default); the model only adds a bias
        // where the output is in the activation type.
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        cublas_check(
            cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    }
    p.la = layout(g.ab_type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.batch, g.stride_a);
    p.lb = layout(g.ab_type, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb, g.batch, g.stride_b);
    p.lc = layout(g.c_type, g.m, g.n, g.ldc, g.batch, g.stride_c);
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
    cublas_check(cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.la, p.lb, p.lc, p.lc, pref, 1, &result, &found));
    cublas_check(cublasLtMatmulPreferenceDestroy(pref));
    if (found == 0) {
        fprintf(stderr, "bertpre: error: cuBLASLt has no algorithm for a GEMM m=%d n=%d k=%d batch=%d (types %d/%d)\n",
                g.m, g.n, g.k, g.batch, (int)g.ab_type, (int)g.c_type);
        exit(1);
    }
    p.algo = result.algo;
    return p;
}

void device_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void *A, int lda,
                 long long stride_a, const void *B, int ldb, long long stride_b, float beta, void *C, int ldc,
                 long long stride_c, int batch, dtype_t ab_type, dtype_t c_type, const void *bias,
                 const void *C_in) {
    init();
    if (!C_in) C_in = C;
    void *ws = device_workspace(WS_GEMM, gemm_workspace_bytes);
    gemm_key key = {trans_a, trans_b, bias != nullptr, m, n, k, lda, ldb, ldc, batch, stride_a, stride_b, stride_c,
                    ab_type, c_type, alignment(A), alignment(B), std::min(alignment(C), alignment(C_in))};
    auto it = gemm_plans.find(key);
    if (it == gemm_plans.end()) it = gemm_plans.emplace(key, make_gemm_plan(key)).first;
    gemm_plan &p = it->second;
    if (bias)
        cublas_check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    cublas_check(cublasLtMatmul(lt, p.desc, &alpha, A, p.la, B, p.lb, &beta, C_in, p.lc, C, p.lc, &p.algo, ws,
                                gemm_workspace_bytes, stream));
}

// Everything init() and the calls above made for the process, in reverse: the workspaces
// (the cuBLASLt one among them), the GEMM plans, the pinned staging buffers and their
// events, the cuBLASLt handle, the ordering event and both streams, once the device has
// finished its queued work. The next call makes them afresh through init().
size_t device_shutdown(size_t *live_bytes) {
    if (lt) cuda_check(cudaDeviceSynchronize());
    workspaces_release();
    for (auto &entry : gemm_plans) {
        gemm_plan &p = entry.second;
        cublas_check(cublasLtMatrixLayoutDestroy(p.la));
        cublas_check(cublasLtMatrixLayoutDestroy(p.lb));
        cublas_check(cublasLtMatrixLayoutDestroy(p.lc));
        cublas_check(cublasLtMatmulDescDestroy(p.desc));
    }
    gemm_plans.clear();
    for (staging_slot &s : staging) {
        if (s.done) cuda_check(cudaEventDestroy(s.done));
        if (s.host) cuda_check(cudaFreeHost(s.host));
        s = staging_slot{};
    }
    staging_next = 0;
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
