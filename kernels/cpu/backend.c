// The CPU backend table (compiled twice, see real.h): memory is host memory, and for the
// FP32 build the compute copy of the weights is the FP32 master itself.
#include <stdlib.h>
#include <string.h>
#include "kernels/backend.h"
#include "kernels/common/check.h"
#include "kernels/cpu/real.h"

#define DECLARE(name) extern __typeof__(*((backend_t *)0)->name) CPU_OP(name);
DECLARE(embeddings_forward)
DECLARE(embeddings_backward)
DECLARE(layernorm_forward)
DECLARE(layernorm_backward)
DECLARE(matmul_forward)
DECLARE(matmul_backward)
DECLARE(attention_forward)
DECLARE(attention_backward)
DECLARE(gelu_forward)
DECLARE(gelu_backward)
DECLARE(tanh_forward)
DECLARE(tanh_backward)
DECLARE(dropout_residual_forward)
DECLARE(dropout_backward)
DECLARE(gather_rows_forward)
DECLARE(gather_rows_backward)
DECLARE(crossentropy_forward)
DECLARE(crossentropy_backward)
DECLARE(lamb_step)
DECLARE(lars_step)
DECLARE(adamw_step)
DECLARE(residual_dropout_layernorm_forward)
DECLARE(layernorm_dropout_backward)
DECLARE(bias_gelu_forward)
DECLARE(bias_gelu_backward)
DECLARE(rope_forward)
DECLARE(rope_backward)
DECLARE(geglu_forward)
DECLARE(geglu_backward)
DECLARE(stableadamw_step)

static void *host_alloc(size_t bytes) {
    void *p = NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0)
        fatal("out of host memory allocating %zu bytes (reduce the micro-batch or the model size)", bytes);
    memset(p, 0, rounded);
    return p;
}

static void host_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void host_zero(void *ptr, size_t bytes) { memset(ptr, 0, bytes); }

#ifdef CPU_REAL_DOUBLE
static void to_compute(void *dst_, const float *master, size_t n) {
    double *dst = dst_;
    for (size_t i = 0; i < n; i++) dst[i] = master[i];
}
#define PARAMS_TO_COMPUTE to_compute
#define BACKEND backend_cpu64
#define BACKEND_NAME "cpu64"
#else
#define PARAMS_TO_COMPUTE NULL
#define BACKEND backend_cpu
#define BACKEND_NAME "cpu"
#endif

#define OP(name) .name = CPU_OP(name)
const backend_t BACKEND = {
    .name = BACKEND_NAME,
    .act_size = sizeof(real),
    .acc_size = sizeof(real),
    .alloc = host_alloc,
    .release = free,
    .upload = host_copy,
    .download = host_copy,
    .zero = host_zero,
    .params_to_compute = PARAMS_TO_COMPUTE,
    OP(embeddings_forward),
    OP(embeddings_backward),
    OP(layernorm_forward),
    OP(layernorm_backward),
    OP(matmul_forward),
    OP(matmul_backward),
    OP(attention_forward),
    OP(attention_backward),
    OP(gelu_forward),
    OP(gelu_backward),
    OP(tanh_forward),
    OP(tanh_backward),
    OP(dropout_residual_forward),
    OP(dropout_backward),
    OP(gather_rows_forward),
    OP(gather_rows_backward),
    OP(crossentropy_forward),
    OP(crossentropy_backward),
    OP(lamb_step),
    OP(lars_step),
    OP(adamw_step),
    OP(residual_dropout_layernorm_forward),
    OP(layernorm_dropout_backward),
    OP(bias_gelu_forward),
    OP(bias_gelu_backward),
    OP(rope_forward),
    OP(rope_backward),
    OP(geglu_forward),
    OP(geglu_backward),
    OP(stableadamw_step),
};
