// Model FLOP count of a BERT training step and the table of GPUs (see flops.h).
#include "engine/flops.h"
#include <stdio.h>
#include <string.h>

// The (query, key) pairs of one layer over the sequences: all of them (tokens_sq) in a global
// layer; in a sliding-window layer of half-width w, a sequence of n tokens has n^2 pairs when
// n <= w + 1 and n (2w + 1) - w (w + 1) when longer (each query sees 2w + 1 keys, fewer at the
// ends). From the sums alone the smaller of the two totals is taken: exact when every
// sequence is longer than the window, or every one within it.
static double attention_pairs(const bert_config *cfg, int l, long sequences, double tokens, double tokens_sq) {
    int w = model_attention_window(cfg, l);
    if (w <= 0) return tokens_sq;
    double windowed = tokens * (2.0 * w + 1) - (double)sequences * w * (w + 1.0);
    return windowed < tokens_sq ? windowed : tokens_sq;
}

double model_flops_real(const bert_config *cfg, long sequences, double tokens, double tokens_sq, long masked) {
    double C = cfg->hidden_size, I = cfg->intermediate_size, V = cfg->vocab_size;
    double nsp_head = cfg->mlm_only ? 0.0 : C * C + 2 * C;  // the pooler and NSP classifier per sequence
    // Multiply-adds per token and layer: the attention's four C x C projections and the FFN's
    // two GEMMs (ModernBERT's GeGLU: Wi to 2I, Wo from I).
    double ffn = cfg->arch == MODEL_MODERNBERT ? 3 * C * I : 2 * C * I;
    double forward = cfg->num_hidden_layers * tokens * (4 * C * C + ffn) + nsp_head * sequences +
                     (C * C + C * V) * (double)masked;
    for (int l = 0; l < cfg->num_hidden_layers; l++)
        forward += 2.0 * attention_pairs(cfg, l, sequences, tokens, tokens_sq) * C;
    return 6.0 * forward;
}

double model_flops(const bert_config *cfg, long sequences, int T, long masked) {
    return model_flops_real(cfg, sequences, (double)sequences * T, (double)sequences * T * T, masked);
}

// Dense (no sparsity) FP16/BF16 with FP32 accumulation, from the vendors' data sheets (sources
// in docs/PERFORMANCE.md); the first entry whose `match` occurs in the device name wins, so
// specific variants come first. The entries with a --gpu key also hold the HBM bandwidth, SM
// count, clock and cluster support of the roofline model.
static const gpu_spec gpus[] = {
    {NULL, "H100 PCIe", "NVIDIA H100 PCIe", 756, 0, 0, 0, 0},
    {NULL, "H100 NVL", "NVIDIA H100 NVL", 835, 0, 0, 0, 0},
    {"h100", "H100", "NVIDIA H100 SXM5 80GB", 989.4, 3350.0, 132, 1830.0, 1},
    {NULL, "H200 NVL", "NVIDIA H200 NVL", 835, 0, 0, 0, 0},
    {"h200", "H200", "NVIDIA H200 SXM 141GB", 989.4, 4800.0, 132, 1830.0, 1},
    {NULL, "B200", "NVIDIA B200", 2250, 0, 0, 0, 0},
    {"a100", "A100", "NVIDIA A100 SXM4 80GB", 312.0, 2039.0, 108, 1410.0, 0},
    {NULL, "A30", "NVIDIA A30", 165, 0, 0, 0, 0},
    {NULL, "A10", "NVIDIA A10", 125, 0, 0, 0, 0},
    {NULL, "L40S", "NVIDIA L40S", 362, 0, 0, 0, 0},
    {NULL, "L4", "NVIDIA L4", 121, 0, 0, 0, 0},
    {NULL, "V100", "NVIDIA V100", 125, 0, 0, 0, 0},
};
enum { N_GPUS = sizeof gpus / sizeof gpus[0] };

const gpu_spec *gpu_by_name(const char *device_name) {
    for (int i = 0; device_name && i < N_GPUS; i++)
        if (strstr(device_name, gpus[i].match)) return &gpus[i];
    return NULL;
}

const gpu_spec *gpu_by_key(const char *key) {
    for (int i = 0; i < N_GPUS; i++)
        if (gpus[i].key && !strcmp(gpus[i].key, key)) return &gpus[i];
    return NULL;
}

const char *gpu_keys(void) {
    static char keys[128];
    size_t used = 0;
    for (int i = 0; i < N_GPUS; i++)
        if (gpus[i].key && used < sizeof keys)
            used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s", used ? ", " : "", gpus[i].key);
    return keys;
}

double gpu_peak_tflops(const char *device_name) {
    const gpu_spec *g = gpu_by_name(device_name);
    return g ? g->tflops : 0.0;
}
