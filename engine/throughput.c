// Model FLOP count of a BERT training step and a table of GPU peaks (see throughput.h).
#include "engine/throughput.h"
#include <string.h>

double model_flops_real(const bert_config *cfg, long sequences, double tokens, double tokens_sq, long masked) {
    double L = cfg->num_hidden_layers, C = cfg->hidden_size, I = cfg->intermediate_size, V = cfg->vocab_size;
    double nsp_head = cfg->mlm_only ? 0.0 : C * C + 2 * C;  // the pooler and NSP classifier per sequence
    double forward = L * tokens * (4 * C * C + 2 * C * I) + L * 2.0 * tokens_sq * C + nsp_head * sequences +
                     (C * C + C * V) * (double)masked;
    return 6.0 * forward;
}

double model_flops(const bert_config *cfg, long sequences, int T, long masked) {
    return model_flops_real(cfg, sequences, (double)sequences * T, (double)sequences * T * T, masked);
}

double gpu_peak_tflops(const char *device_name) {
    // Dense (no sparsity) FP16 with FP32 accumulation, from the vendors' data sheets. The
    // first entry whose key occurs in the name wins, so specific variants come first.
    static const struct {
        const char *key;
        double tflops;
    } table[] = {
        {"H100 PCIe", 756}, {"H100 NVL", 835}, {"H100", 989}, {"H200", 989},
        {"B200", 2250},     {"A100", 312},     {"A30", 165},  {"A10", 125},  {"L40S", 362},
        {"L4", 121},        {"V100", 125},
    };
    if (!device_name) return 0.0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strstr(device_name, table[i].key)) return table[i].tflops;
    return 0.0;
}
