// Turning a training config into its runtime parts: the backend table for train.backend
// and train.precision, and the loss scaler for train.loss_scale*.
#pragma once
#include "kernels/backend.h"
#include "engine/config.h"
#include "engine/loss_scaler.h"

// Resolves "auto" (CUDA when built and a GPU is visible, else the CPU; fp16 on CUDA, fp32
// on the CPU) and writes the resolved names back into t. "cuda-emu" runs the CUDA kernels
// through the host emulation: slow, for tests of the whole CUDA path on machines without a
// GPU. Exits with a clear message when
// the request cannot be met. With BERTPRE_PROFILE set in the environment, a CUDA table comes
// back with every op timed (kernels/cuda/profile.cu).
const backend_t *train_select_backend(train_config *t, const char *path);
// Dynamic scaling for fp16 unless train.loss_scale sets a static scale; fp32 and bf16 run
// with a static scale of 1 unless train.loss_scale says otherwise.
void train_init_loss_scaler(loss_scaler *s, const train_config *t);
