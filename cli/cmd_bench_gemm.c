// `bertpre bench gemm`: the rate of one matrix product through the backend's matmul op (on
// CUDA: cuBLASLt with FP32 accumulation, the call every linear layer makes), in TFLOP/s.
// On a GPU the default 8192 x 8192 x 8192 FP16 product measures the tensor-core rate that
// model-FLOPs utilization is best compared with; on the CPU or the emulation it runs the same
// code at small sizes. The product is out[M,N] = inp[M,K] @ weight[N,K]^T (2·M·N·K FLOPs),
// inputs uniform in [-1, 1), timed over --iters products after --warmup ones, ended by a copy
// back to the host (which waits for the device).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/commands.h"
#include "cli/options.h"
#include "engine/config.h"
#include "engine/backend.h"
#include "kernels/common/check.h"
#include "kernels/common/clock.h"
#include "kernels/common/philox.h"

static const char *about_bench_gemm =
    "TFLOP/s of out[M,N] = inp[M,K] @ weight[N,K]^T through the backend's matmul op.";

// Uniform [-1, 1) values in the backend's activation type, uploaded.
static void *random_matrix(const backend_t *be, size_t n, uint32_t site) {
    float *host = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) host[i] = (float)(philox_draw(7, 0, site, i) / 2147483648.0 - 1.0);
    void *master = be->alloc(n * sizeof(float)), *act = master;
    be->upload(master, host, n * sizeof(float));
    if (be->params_to_compute) {  // the activation type differs from FP32: convert on the device
        act = be->alloc(n * be->act_size);
        be->params_to_compute(act, master, n);
        be->release(master);
    }
    free(host);
    return act;
}

int cmd_bench_gemm(int argc, char **argv) {
    train_config t;
    memset(&t, 0, sizeof t);
    int backend = 0, precision = 0, m = 8192, n = 8192, k = 8192, iters = 20, warmup = 3;
    static const char backends[] = "auto|cuda|cuda-emu|cpu", precisions[] = "auto|fp16|bf16|fp32";
    const cli_option options[] = {
        {"--backend", CLI_CHOICE, &backend, NULL, .help = "auto: cuda when a GPU is visible", .choices = backends},
        {"--precision", CLI_CHOICE, &precision, NULL, .help = "auto: fp16 on CUDA, fp32 on the CPU",
         .choices = precisions},
        {"--m", CLI_INT, &m, "N", .help = "rows of inp and out", 1, 1 << 20},
        {"--n", CLI_INT, &n, "N", .help = "rows of weight, columns of out", 1, 1 << 20},
        {"--k", CLI_INT, &k, "N", .help = "the inner dimension", 1, 1 << 20},
        {"--iters", CLI_INT, &iters, "N", .help = "timed products", 1, 1 << 20},
        {"--warmup", CLI_INT, &warmup, "N", .help = "untimed products first", 0, 1 << 20},
        {NULL},
    };
    const cli_command command = {"bench gemm", "bench gemm [options]", about_bench_gemm, NULL, options, NULL, 0, 0};
    char **operands = xcalloc((size_t)argc + 1, sizeof(char *));
    int n_operands = 0;
    if (cli_parse(&command, argc, argv, operands, &n_operands)) return 0;
    free(operands);
    cli_choice_name(backends, backend, t.backend, sizeof t.backend);
    cli_choice_name(precisions, precision, t.precision, sizeof t.precision);
    const backend_t *be = backend_select(&t, "bench gemm");
    void *inp = random_matrix(be, (size_t)m * k, 1), *weight = random_matrix(be, (size_t)n * k, 2);
    void *out = be->alloc((size_t)m * n * be->act_size);
    char probe[8];
    for (int i = 0; i < warmup; i++) be->matmul_forward(out, inp, weight, NULL, m, k, n);
    be->download(probe, out, be->act_size);
    double t0 = now_seconds();
    for (int i = 0; i < iters; i++) be->matmul_forward(out, inp, weight, NULL, m, k, n);
    be->download(probe, out, be->act_size);
    double elapsed = now_seconds() - t0;
    double flops = 2.0 * m * n * (double)k * iters;
    const char *device = be->device_name ? be->device_name() : "CPU";
    printf("gemm %s %s M=%d N=%d K=%d: %d products in %.4f s, %.4g ms each, %.4g TFLOP/s on %s\n", be->name,
           t.precision, m, n, k, iters, elapsed, 1e3 * elapsed / iters, flops / elapsed / 1e12, device);
    be->release(inp);
    be->release(weight);
    be->release(out);
    backend_release(be);
    return 0;
}
