// A command's backend, chosen for its config (released by kernels/backend.h's backend_release).
#pragma once
#include "kernels/backend.h"
#include "engine/config.h"

// The backend table for train.backend and train.precision. Resolves "auto" (CUDA when built
// and a GPU is visible, else the CPU; fp16 on CUDA, fp32 on the CPU) and writes the resolved
// names back into t. "cuda-emu" runs the CUDA kernels through the host emulation: slow, for
// tests of the whole CUDA path on machines without a GPU. Exits with a clear message when the
// request cannot be met. With BERTPRE_PROFILE set in the environment, a CUDA table comes back
// with every op timed (kernels/cuda/profile.cu).
const backend_t *backend_select(train_config *t, const char *path);
