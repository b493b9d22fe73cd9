// What a GPU test does when it finds no usable GPU: skip (exit 77, meson's SKIP) on machines
// that have none, but fail (exit 1) where BERTPRE_REQUIRE_GPU=1 says one must be there, so
// that a driver/runtime mismatch or a missing library on a GPU machine is not a quiet skip.
// tools/gpu_suite.sh sets it.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int no_gpu_exit_status(const char *why) {
    const char *required = getenv("BERTPRE_REQUIRE_GPU");
    if (required && strcmp(required, "0") != 0) {
        printf("FAIL: BERTPRE_REQUIRE_GPU is set but %s\n", why);
        return 1;
    }
    printf("SKIP: %s\n", why);
    return 77;
}

#ifdef TEST_REAL_GPU
#include <cuda_runtime_api.h>
// 0 when a CUDA GPU is visible, else the exit status above (with the runtime's reason).
static inline int gpu_missing_exit_status(void) {
    int devices = 0;
    cudaError_t err = cudaGetDeviceCount(&devices);
    if (err == cudaSuccess && devices > 0) return 0;
    char why[256];
    snprintf(why, sizeof why, "no usable CUDA GPU (cudaGetDeviceCount: %s, %d devices)",
             err != cudaSuccess ? cudaGetErrorString(err) : "ok", devices);
    return no_gpu_exit_status(why);
}
#endif
