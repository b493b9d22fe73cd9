// device.h for the emulated build: "device" memory is host memory, the stream is a dummy,
// and GEMMs run in FP32 through the CPU reference's GEMM after converting the operands, which is what
// cuBLAS computes with FP32 accumulation up to summation order. Kernels run when they are
// launched, so the compute stream never has work in flight; the communication stream's work
// is the NCCL emulation's pending collectives (emu/nccl_emu.h), which finish as they are
// progressed. The node has BERTPRE_EMU_GPUS emulated devices (8 when unset). Allocations
// are counted in the ledger (ledger.h) as on a GPU, so the tests' check that shutdown
// leaves nothing allocated runs in CI.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ledger.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/emu/nccl_emu.h"

namespace CUDA_NS {

namespace {

float load(const void *p, dtype_t type, size_t i) {
    switch (type) {
        case DTYPE_F16: return __half2float(((const __half *)p)[i]);
        case DTYPE_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
        default: return ((const float *)p)[i];
    }
}
void store(void *p, dtype_t type, size_t i, float v) {
    switch (type) {
        case DTYPE_F16: ((__half *)p)[i] = __float2half_rn(v); break;
        case DTYPE_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
        default: ((float *)p)[i] = v;
    }
}
}  // namespace

// The plans the GPU would make (gemm_plans.h): empty here, counted as on a GPU.
struct emu_plan {};
static gemm_plan_cache<emu_plan> gemm_plans;

cudaStream_t device_stream() { return nullptr; }

static int selected_device = -1;  // the physical emulated GPU

// The node has BERTPRE_EMU_GPUS GPUs (8 when unset), numbered from 0; the rank sees those
// that BERTPRE_EMU_VISIBLE_DEVICES lists (a comma-separated list of numbers, as
// CUDA_VISIBLE_DEVICES), or all of them. Emulated GPU k has the PCI bus id 0000:(16 + k):00.0.
const char *device_select(int rank, int local_rank, int local_size) {
    static char bus_id[32];
    const char *env = getenv("BERTPRE_EMU_GPUS");
    int gpus = env ? atoi(env) : 8;
    std::vector<int> visible;
    const char *list = getenv("BERTPRE_EMU_VISIBLE_DEVICES");
    if (list) {
        for (const char *p = list; *p;) {
            char *end = nullptr;
            long k = strtol(p, &end, 10);
            if (end == p || k < 0 || k >= gpus || (*end && *end != ','))
                fatal("rank %d: BERTPRE_EMU_VISIBLE_DEVICES=%s: expected a comma-separated list of "
                      "emulated GPUs, each from 0 to %d (BERTPRE_EMU_GPUS=%d)", rank, list, gpus - 1, gpus);
            visible.push_back((int)k);
            p = *end ? end + 1 : end;
        }
    } else {
        for (int k = 0; k < gpus; k++) visible.push_back(k);
    }
    int device = device_choose(rank, local_rank, local_size, (int)visible.size(),
                               list ? "BERTPRE_EMU_VISIBLE_DEVICES" : "BERTPRE_EMU_GPUS");
    selected_device = visible[device];
    snprintf(bus_id, sizeof bus_id, "00000000:%02X:00.0", 16 + selected_device);
    return bus_id;
}

cudaStream_t device_comm_stream() { return reinterpret_cast<cudaStream_t>(uintptr_t(1)); }

// Only the communication stream ever has work in flight.
void device_stream_wait(cudaStream_t waiter, cudaStream_t signaller) {
    if (signaller == device_comm_stream()) nccl_emu_finish_all();
}
int device_stream_done(cudaStream_t stream) { return stream != device_comm_stream() || nccl_emu_progress(); }
// Marks are on the communication stream: done when all of its collectives are.
void device_stream_mark(cudaStream_t, int) {}
int device_mark_done(int) { return nccl_emu_progress(); }

void *device_alloc(size_t bytes) {
    void *p = nullptr;
    size_t rounded = (bytes + 255) / 256 * 256;
    if (posix_memalign(&p, 256, rounded ? rounded : 256) != 0)
        fatal("CUDA emulation: out of host memory allocating %zu bytes", bytes);
    memset(p, 0, rounded ? rounded : 256);
    ledger_add(p, bytes);
    return p;
}
void device_free(void *ptr) {
    if (!ptr) return;
    ledger_remove(ptr);
    free(ptr);
}
void device_drain() {}  // kernels run as they are launched
// Only the (empty) plans are kept for the process here (no handles, streams or staging).
size_t device_shutdown(size_t *live_bytes) {
    gemm_plans.clear([](emu_plan &) {});
    return ledger_live(live_bytes);
}
void device_upload(void *dst, const void *host_src, size_t bytes) { memcpy(dst, host_src, bytes); }
void device_download(void *host_dst, const void *src, size_t bytes) { memcpy(host_dst, src, bytes); }
void device_upload_async(void *dst, const void *host_src, size_t bytes) { memcpy(dst, host_src, bytes); }
void device_zero(void *ptr, size_t bytes) { memset(ptr, 0, bytes); }
void device_synchronize() {}
void device_check_launch(const char *, const char *, int) {}
int device_cluster_launch() { return 1; }
const char *device_name() {
    static char name[64];
    snprintf(name, sizeof name, selected_device >= 0 ? "CUDA emulation (device %d)" : "CUDA emulation",
             selected_device);
    return name;
}
// The host is not a GPU: no memory limit is simulated, unless BERTPRE_TEST_EMU_MEMORY (bytes;
// test-only) gives one, for tests of the memory-plan check on the emulated CUDA backend.
size_t device_memory_available() {
    const char *limit = getenv("BERTPRE_TEST_EMU_MEMORY");
    return limit ? (size_t)strtoull(limit, NULL, 10) : (size_t)-1;
}

// cuBLASLt's GELU epilogues in the tanh form, in FP32 on the FP32 product (device.h). Their
// tanh is the SFU's tanh.approx.f32 (seen on an H100: docs/GPU-RESULTS.md, 2026-11-28), which
// PTX documents to 2^-11 relative: the emulation errs by that much, in a direction fixed by
// the input's bits, never past +-1.
static float tanh_approx(float u) {
    uint32_t bits;
    memcpy(&bits, &u, sizeof bits);
    double t = tanh((double)u), rel = 0x1p-11 - 0x1p-23;  // less FP32's rounding of the result
    t *= ((bits * 0x9E3779B1u) >> 31) ? 1 + rel : 1 - rel;
    return (float)std::max(-1.0, std::min(1.0, t));
}
static float gelu_tanh(float x) {
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanh_approx(u));
}
static float gelu_tanh_grad(float x) {
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x), t = tanh_approx(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}

static bool no_gelu_epilogue() {
    static int none = -1;
    if (none < 0) {
        const char *env = getenv("BERTPRE_TEST_EMU_GELU_EPILOGUE");
        if (env && strcmp(env, "none")) fatal("BERTPRE_TEST_EMU_GELU_EPILOGUE is '%s': only 'none' is known", env);
        none = env != nullptr;
    }
    return none != 0;
}

gemm_plan_stats device_gemm_plan_stats(bool reset) {
    gemm_plan_stats s = gemm_plans.stats;
    if (reset) gemm_plans.stats = gemm_plan_stats{0, 0, 0, gemm_plans.plans.size()};
    return s;
}

bool device_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const void *A, int lda,
                 long long stride_a, const void *B, int ldb, long long stride_b, float beta, void *C, int ldc,
                 long long stride_c, int batch, dtype_t ab_type, dtype_t c_type, const void *bias,
                 const void *C_in, gemm_gelu gelu, void *aux, int ld_aux, void *bgrad) {
    if (!C_in) C_in = C;
    // The key and the rules of the GPU's device_gemm (gemm_plans.h), with the real pointers'
    // alignments: a call cuBLASLt would refuse (a layout, an alignment, an epilogue) exits
    // here as it would there.
    const void *vector = gelu == GEMM_DGELU_BGRAD || gelu == GEMM_BGRADB ? bgrad : bias;
    gemm_key key = gemm_plan_key(trans_a, trans_b, bias != nullptr, (int)gelu, m, n, k, lda, ldb, ldc, ld_aux, batch,
                                 stride_a, stride_b, stride_c, (int)ab_type, (int)c_type, gemm_alignment(A),
                                 gemm_alignment(B), std::min(gemm_alignment(C), gemm_alignment(C_in)),
                                 gemm_is_gelu(gelu) ? gemm_alignment(aux) : 0, vector ? gemm_alignment(vector) : 0);
    gemm_check(key, n, k, beta, vector != nullptr, aux != nullptr, "CUDA emulation: ");
    // BERTPRE_TEST_EMU_GELU_EPILOGUE=none (test-only): cuBLASLt with no algorithm for any GELU
    // or BGRADB epilogue, so that the callers' fallback runs in the emulated tests.
    if (gelu != GEMM_NO_GELU && no_gelu_epilogue()) return false;
    gemm_plans.get(key, [](const gemm_key &) { return emu_plan{}; }, [](emu_plan &) {});
    int a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    int b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    std::vector<float> a((size_t)a_rows * a_cols), b((size_t)b_rows * b_cols), c((size_t)m * n);
    std::vector<float> row_sums(gelu == GEMM_DGELU_BGRAD ? m : 0, 0.0f);
    for (int i = 0; i < batch; i++) {
        const size_t ao = (size_t)i * stride_a, bo = (size_t)i * stride_b, co = (size_t)i * stride_c;
        for (int col = 0; col < a_cols; col++)
            for (int row = 0; row < a_rows; row++)
                a[(size_t)col * a_rows + row] = load(A, ab_type, ao + (size_t)col * lda + row);
        for (int col = 0; col < b_cols; col++)
            for (int row = 0; row < b_rows; row++)
                b[(size_t)col * b_rows + row] = load(B, ab_type, bo + (size_t)col * ldb + row);
        for (int col = 0; col < n; col++)
            for (int row = 0; row < m; row++)
                c[(size_t)col * m + row] = beta == 0.0f ? 0.0f : load(C_in, c_type, co + (size_t)col * ldc + row);
        // Column-major C = op(A) op(B) is row-major C^T = op(B)^T op(A)^T.
        cpu_gemm(trans_b, trans_a, n, m, k, alpha, b.data(), b_rows, a.data(), a_rows, beta, c.data(), m);
        for (int col = 0; col < n; col++)
            for (int row = 0; row < m; row++) {
                float v = c[(size_t)col * m + row];
                if (bias) v += load(bias, ab_type, row);
                if (gelu == GEMM_GELU_AUX_BIAS) {
                    store(aux, c_type, (size_t)col * ld_aux + row, v);
                    v = gelu_tanh(v);
                } else if (gelu == GEMM_DGELU_BGRAD) {
                    v *= gelu_tanh_grad(load(aux, c_type, (size_t)col * ld_aux + row));
                    row_sums[row] += v;
                }
                store(C, c_type, co + (size_t)col * ldc + row, v);
            }
    }
    for (int row = 0; row < (int)row_sums.size(); row++) store(bgrad, c_type, row, row_sums[row]);
    // BGRADB: the sums over k of op(B)'s columns, from B as stored, in FP32 (batch 1).
    if (gelu == GEMM_BGRADB)
        for (int col = 0; col < n; col++) {
            float sum = 0.0f;
            for (int kk = 0; kk < k; kk++)
                sum += trans_b ? b[(size_t)kk * b_rows + col] : b[(size_t)col * b_rows + kk];
            store(bgrad, c_type, col, sum);
        }
    return true;
}

}  // namespace CUDA_NS
