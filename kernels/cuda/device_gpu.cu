// device.h on a real GPU: the CUDA runtime on one stream, and GEMMs through cuBLASLt with
// FP32 accumulation (CUBLAS_COMPUTE_32F). Every call that can fail goes through cuda_check
// or cublas_check, which print file, line, the call and a hint, then exit non-zero.
// BERTPRE_SYNC_CHECK=1 in the environment synchronizes after every launch, so that an
// asynchronous fault is reported at the kernel that caused it.
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include "common.cuh"

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
cudaStream_t stream;
cublasLtHandle_t lt;
bool sync_check;
const size_t gemm_workspace_bytes = 32u << 20;

void init() {
    if (lt) return;
    // One GPU per rank: the launcher's local rank picks it among the visible ones.
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!local) local = getenv("MPI_LOCALRANKID");
    if (!local) local = getenv("SLURM_LOCALID");
    int devices = 0;
    if (local && cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0)
        cuda_check(cudaSetDevice(atoi(local) % devices));
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
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
    return p;
}

void device_free(void *ptr) {
    if (ptr) cuda_check(cudaFree(ptr));
}

void device_upload(void *dst, const void *host_src, size_t bytes) {
    init();
    cuda_check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
    cuda_check(cudaStreamSynchronize(stream));
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
    if (!name[0]) {
        int device = 0;
        cudaDeviceProp prop;
        cuda_check(cudaGetDevice(&device));
        cuda_check(cudaGetDeviceProperties(&prop, device));
        snprintf(name, sizeof name, "%s", prop.name);
    }
    return name;
}

size_t device_memory_available() {
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

void device_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void *A, int lda,
                 long long stride_a, const void *B, int ldb, long long stride_b, float beta, void *C, int ldc,
                 long long stride_c, int batch, dtype_t ab_type, dtype_t c_type, const void *bias) {
    init();
    void *ws = device_workspace(WS_GEMM, gemm_workspace_bytes);
    cublasLtMatmulDesc_t desc;
    cublas_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (bias) {
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bias_type = cuda_type(ab_type);
        cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
        cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
        cublas_check(
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    }
    cublasLtMatrixLayout_t la = layout(ab_type, trans_a ? k : m, trans_a ? m : k, lda, batch, stride_a);
    cublasLtMatrixLayout_t lb = layout(ab_type, trans_b ? n : k, trans_b ? k : n, ldb, batch, stride_b);
    cublasLtMatrixLayout_t lc = layout(c_type, m, n, ldc, batch, stride_c);
    cublasLtMatmulPreference_t pref;
    cublas_check(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws_bytes = gemm_workspace_bytes;
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof(ws_bytes)));
    uint32_t align_a = alignment(A), align_b = alignment(B), align_c = alignment(C);
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                      sizeof(align_a)));
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                      sizeof(align_b)));
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                      sizeof(align_c)));
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                      sizeof(align_c)));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublas_check(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &result, &found));
    if (found == 0) {
        fprintf(stderr, "bertpre: error: cuBLASLt has no algorithm for a GEMM m=%d n=%d k=%d batch=%d (types %d/%d)\n",
                m, n, k, batch, (int)ab_type, (int)c_type);
        exit(1);
    }
    cublas_check(cublasLtMatmul(lt, desc, &alpha, A, la, B, lb, &beta, C, lc, C, lc, &result.algo, ws, ws_bytes,
                                stream));
    cublas_check(cublasLtMatmulPreferenceDestroy(pref));
    cublas_check(cublasLtMatrixLayoutDestroy(la));
    cublas_check(cublasLtMatrixLayoutDestroy(lb));
    cublas_check(cublasLtMatrixLayoutDestroy(lc));
    cublas_check(cublasLtMatmulDescDestroy(desc));
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
