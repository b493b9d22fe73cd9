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
