// A roofline model of a training step (`bertpre bench model`). A recording backend (a
// backend_t whose ops note the op, its shapes and element sizes instead of computing) is
// driven through the real bert_forward / bert_backward and the optimizer step, so the model
// sees exactly the op sequence and shapes the engine runs. Each recorded op is then costed
// by its entry in one table (engine/roofline/cost.c): the kernel launches the CUDA backend makes for it,
// each with its tensor-core FLOPs, its minimum DRAM bytes and, where the instruction count
// rather than the bytes sets the time, an instruction estimate. A launch's predicted time is
//   max(FLOPs / (peak x gemm_eff), bytes / (bandwidth x dram_eff), instructions / issue rate)
// with stated efficiencies (defaults 70% and 80%), and a stated cost per host round trip.
#pragma once
#include <stddef.h>
#include <stdio.h>
#include "engine/config.h"
#include "engine/flops.h"

typedef struct {
    double gemm_eff;    // fraction of the tensor peak GEMMs reach (0.70)
    double dram_eff;    // fraction of the DRAM bandwidth streaming kernels reach (0.80)
    double sync_us;     // cost of one host round trip (synchronous copy), microseconds (10)
    int baseline;       // 1: cost the unfused kernels the fused ones replaced (per-element Philox,
                        // GEMM attention with permutes, separate dropout / LayerNorm / GELU
                        // passes, host round trips in the embedding and gather backward)
    int bias_grad_epilogue; // 1: the linear layers' bias gradients in the weight-gradient GEMMs'
                        // BGRADB epilogue (BERTPRE_BIAS_GRAD=epilogue), not a column-sum pass
    size_t act_size;    // bytes of an activation element (2: FP16/BF16)
    int optimizer;      // whose step is costed: an optim_kind (engine/optim.h), LAMB by default
} roofline_options;
roofline_options roofline_defaults(void);

enum { ROOF_FORWARD, ROOF_BACKWARD, ROOF_OPTIMIZER };
enum { BOUND_COMPUTE = 'C', BOUND_MEMORY = 'M', BOUND_INSTRUCTIONS = 'I', BOUND_HOST = 'H' };

typedef struct {
    const char *op;      // the backend op (backend.h field name), or a host transfer
    const char *kernel;  // the launch
    char shape[128];
    int phase;           // ROOF_FORWARD, ROOF_BACKWARD, ROOF_OPTIMIZER
    int gemm;            // tensor-core launch
    double flops;        // tensor-core FLOPs executed
    double bytes;        // minimum DRAM bytes
    double instructions; // thread instructions, where they can bound the time (else 0)
    int host_syncs;      // host round trips (synchronous copies) the launch implies
    double time_s;
    char bound;          // BOUND_*
} roofline_launch;

typedef struct {
    const gpu_spec *gpu;
    roofline_options opt;
    int B, T, P, R;          // micro-batch, sequence length, max and counted masked positions
    int accumulation;        // micro-batches per optimizer step (one rank)
    roofline_launch *launches;
    int n_launches, cap;
    int n_micro;             // launches [0, n_micro) are one micro-batch; the rest the optimizer step
    double model_flops;      // per micro-batch, engine/flops.h, every position counted
    const char *layout;      // "padded" or "unpadded"
    double real_tokens;      // per micro-batch: B x T padded, B x mean length unpadded
    double real_model_flops; // model FLOPs of those tokens (each sequence at its own length)
} roofline_result;

// A distribution of sequence lengths (real tokens per row: the ones of input_mask) at
// sequence length T: count[L] rows of length L, L = 0..T.
typedef struct {
    int T;
    long *count;  // T + 1 entries
    long rows;    // their sum, > 0
} roofline_lengths;
// Mean length (power 1) or mean squared length (power 2).
double roofline_lengths_mean(const roofline_lengths *h, int power);

// Records one micro-batch (forward + backward) of a model of `cfg` at B x T with P masked
// positions per sequence, all present, dropout on, and one optimizer step; costs every launch.
void roofline_run(roofline_result *r, const bert_config *cfg, int B, int T, int P, int accumulation,
                  const gpu_spec *gpu, roofline_options opt);
// The same step unpadded, for the mean micro-batch of `h` (B rows in the proportions of h):
// every argument that counts tokens (those that grow with T: the rows of every token-wise
// op, the embeddings) is scaled by mean length / T, attention runs each sequence over its own
// length (one launch per kernel, its FLOPs, bytes and instructions summed over the lengths
// weighted by B x their share), and the rest is unchanged: the MLM head over the B x P
// masked positions, the pooler and NSP head over B rows, the host transfers, the optimizer.
void roofline_run_unpadded(roofline_result *r, const bert_config *cfg, int B, int T, int P, int accumulation,
                           const gpu_spec *gpu, roofline_options opt, const roofline_lengths *h);
void roofline_free(roofline_result *r);

// Totals over launches [first, last).
typedef struct {
    double flops, gemm_flops, bytes, gemm_bytes, time_s, gemm_time_s;
    int launches, host_syncs;
} roofline_totals;
roofline_totals roofline_sum(const roofline_result *r, int first, int last);

// The report: every launch (or, with by_kernel, one line per kernel and shape), the totals,
// the predicted step time, sequences/s and MFU. tsv: tab-separated, full precision, one
// header line, summary lines starting with '#'.
void roofline_print(const roofline_result *r, int by_kernel, int tsv, FILE *out);
// After roofline_print of the padded step p: the unpadded step u of the lengths h beside it,
// per op and in total (step time, sequences/s, real tokens/s, MFU on real tokens). tsv: u's
// launches (layout column "unpadded") and summary lines "# unpadded_*" and "# lengths".
// After roofline_print of r (a model whose hidden_act is act): the same step with the other
// GELU form (other, other_act) beside it: DRAM bytes per micro-batch, step time, sequences/s
// and MFU of each. tsv: lines "# gelu_form NAME BYTES STEP_S SEQUENCES_PER_S MFU".
void roofline_print_gelu_forms(const roofline_result *r, const char *act, const roofline_result *other,
                               const char *other_act, int tsv, FILE *out);
void roofline_print_unpadded(const roofline_result *p, const roofline_result *u, const roofline_lengths *h, int tsv,
                             FILE *out);
