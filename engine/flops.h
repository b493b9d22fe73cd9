// Model FLOPs of a training step, and the one table of GPUs: the dense FP16 peak for the log
// line's TFLOP/s and % of peak, and the numbers of the roofline model (`bench model`).
//
// A training step costs 3x the forward matmuls (forward, gradient of the input, gradient of
// the weight), 2 FLOPs per multiply-add. Per sequence of T tokens, with L layers, hidden C,
// intermediate I, vocabulary V, the forward multiply-adds are
//   L * T * (4 C^2 + 2 C I)   query/key/value, attention output and the two FFN matmuls
//                             (that is: encoder parameters x tokens)
// + L * 2 T^2 C               attention scores Q K^T and probabilities x V
// + C^2 + 2 C                 pooler and NSP classifier on [CLS] (not in an MLM-only model)
// and per masked position C^2 + C V (MLM transform and decoder, evaluated only there).
// Model FLOPs = 6 x that sum: the "6 x parameters x tokens" rule plus the attention terms,
// counted the same whatever the implementation recomputes. A ModernBERT (GeGLU) has 3 C I in
// place of 2 C I, and its sliding-window layers count the (query, key) pairs within the
// window instead of T^2 (flops.c, attention_pairs).
#pragma once
#include "engine/config.h"

// FLOPs of forward + backward over `sequences` sequences of length T holding `masked`
// masked positions in all (a ModernBERT's GeGLU and its sliding-window layers' key pairs
// counted as such).
double model_flops(const bert_config *cfg, long sequences, int T, long masked);
// The same over the real tokens only: sequences of lengths L_i with sum_i L_i = tokens and
// sum_i L_i^2 = tokens_sq (the work of an unpadded step; model_flops is the case L_i = T).
double model_flops_real(const bert_config *cfg, long sequences, double tokens, double tokens_sq, long masked);
// A GPU's published numbers (sources in docs/PERFORMANCE.md).
typedef struct {
    const char *key;    // bench model --gpu value; NULL: a peak for the log line only
    const char *match;  // occurs in the device name cudaGetDeviceProperties reports
    const char *name;
    double tflops;      // dense FP16/BF16 tensor-core peak, FP32 accumulation, TFLOP/s
    double dram_gbs;    // HBM bandwidth, GB/s (entries with a key)
    int sms;
    double clock_mhz;   // the clock at which the tensor peak is quoted
    int clusters;       // launches thread-block clusters (sm_90): the one-kernel attention backward
} gpu_spec;

// The GPU of a device name, NULL when it is not in the table.
const gpu_spec *gpu_by_name(const char *device_name);
// The GPU of a --gpu key, NULL when it is unknown; gpu_keys: "h100, h200, a100", for messages.
const gpu_spec *gpu_by_key(const char *key);
const char *gpu_keys(void);
// Dense FP16/BF16 tensor-core peak in TFLOP/s of a GPU from its device name, 0 when the name
// is not in the table.
double gpu_peak_tflops(const char *device_name);
