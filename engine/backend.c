// A command's backend, chosen for the config's train.backend and train.precision (backend.h).
#include "engine/backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bertpre_config.h"
#include "kernels/common/check.h"

static const backend_t *by_precision(const char *precision, const backend_t *fp32, const backend_t *fp16,
                                     const backend_t *bf16) {
    return !strcmp(precision, "fp16") ? fp16 : !strcmp(precision, "bf16") ? bf16 : fp32;
}

const backend_t *backend_select(train_config *t, const char *path) {
    int gpus = 0;
#if BERTPRE_HAVE_CUDA
    gpus = cuda_device_count();
#endif
    if (!strcmp(t->backend, "auto")) snprintf(t->backend, sizeof t->backend, "%s", gpus > 0 ? "cuda" : "cpu");
    if (!strcmp(t->precision, "auto"))
        snprintf(t->precision, sizeof t->precision, "%s", !strcmp(t->backend, "cpu") ? "fp32" : "fp16");
    if (!strcmp(t->backend, "cuda-emu")) {
#if BERTPRE_HAVE_CUDA_EMU
        const backend_t *be =
            by_precision(t->precision, &backend_cuda_emu_fp32, &backend_cuda_emu_fp16, &backend_cuda_emu_bf16);
        return getenv("BERTPRE_PROFILE") ? cuda_emu_profile_wrap(be, getenv("BERTPRE_PROFILE")) : be;
#else
        fatal("%s: section 'train': field 'backend' = \"cuda-emu\": this build has no CUDA emulation (CUDA's "
              "headers were not found when it was configured)",
              path);
#endif
    }
    if (!strcmp(t->backend, "cpu")) {
        if (strcmp(t->precision, "fp32") != 0)
            fatal("%s: section 'train': field 'precision' = \"%s\": the cpu backend computes in fp32 only "
                  "(use fp32, or backend cuda)",
                  path, t->precision);
        return &backend_cpu;
    }
#if BERTPRE_HAVE_CUDA
    if (gpus == 0)
        fatal("%s: section 'train': field 'backend' = \"cuda\": no CUDA GPU is visible (check "
              "CUDA_VISIBLE_DEVICES and the driver), or use \"cpu\" or \"auto\"",
              path);
    const backend_t *be = by_precision(t->precision, &backend_cuda_fp32, &backend_cuda_fp16, &backend_cuda_bf16);
    return getenv("BERTPRE_PROFILE") ? cuda_profile_wrap(be, getenv("BERTPRE_PROFILE")) : be;
#else
    fatal("%s: section 'train': field 'backend' = \"cuda\": this build has no CUDA backend (nvcc was not "
          "found when it was configured, or -Dcuda=disabled); use \"cpu\" or \"auto\"",
          path);
#endif
}
