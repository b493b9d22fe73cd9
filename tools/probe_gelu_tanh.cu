// The tanh GELU's derivative on the grid of test_cuda_ops' gelu_tanh_grad_grid_check
// (x = -12 + i / 4096, 98,304 points), computed on the GPU with each way of taking the tanh
// that a GEMM epilogue could use, written as raw FP32 to DIR/candidate_NAME.f32 so that
// tools/probe_gelu_tanh.py can tell which one a library's epilogue computes:
//   tanhf    CUDA's tanhf (libdevice, 2 ulp documented)
//   approx   tanh.approx.f32 (the MUFU instruction; PTX: max relative error 2^-10.987)
//   expf     1 - 2 / (1 + expf(2u))
//   fastexp  1 - 2 / (1 + __expf(2u))
// Build and run on a GPU machine: nvcc -O2 -arch=native tools/probe_gelu_tanh.cu -o probe && ./probe DIR
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>

__device__ float tanh_approx(float u) {
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
    return t;
}

__global__ void candidates(float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float k = 0.7978845608028654f, c = 0.044715f;
    float x = -12.0f + (float)i / 4096.0f, u = k * (x + c * x * x * x), d = k * (1.0f + 3.0f * c * x * x);
    float ts[4] = {tanhf(u), tanh_approx(u), 1.0f - 2.0f / (1.0f + expf(2.0f * u)),
                   1.0f - 2.0f / (1.0f + __expf(2.0f * u))};
    for (int j = 0; j < 4; j++) out[(size_t)j * n + i] = 0.5f * (1.0f + ts[j]) + 0.5f * x * (1.0f - ts[j] * ts[j]) * d;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const int n = 96 * 1024;
    const char *names[4] = {"tanhf", "approx", "expf", "fastexp"};
    float *d, *h = (float *)malloc(sizeof(float) * 4 * n);
    if (cudaMalloc(&d, sizeof(float) * 4 * n) != cudaSuccess) return fprintf(stderr, "cudaMalloc failed\n"), 1;
    candidates<<<(n + 255) / 256, 256>>>(d, n);
    cudaError_t e = cudaMemcpy(h, d, sizeof(float) * 4 * n, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return fprintf(stderr, "CUDA: %s\n", cudaGetErrorString(e)), 1;
    for (int j = 0; j < 4; j++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/candidate_%s.f32", argv[1], names[j]);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(h + (size_t)j * n, sizeof(float), n, f) != (size_t)n || fclose(f) != 0)
            return fprintf(stderr, "%s: cannot write\n", path), 1;
    }
    return 0;
}
