// The roofline model's parts (engine/roofline.h is its interface): the record of one training
// step that the recording backend makes (record.c), the cost of each recorded op in launches
// (cost.c), and the run and report (roofline.c), which uses both. The ops are BACKEND_OPS.
#pragma once
#include <stdint.h>
#include "engine/roofline.h"
#include "kernels/backend.h"

// Instruction estimates, derived in docs/PERFORMANCE.md: a 64-bit integer division (a software
// routine on NVIDIA GPUs) and one Philox4x32-10 call with its draw's conversion, per thread;
// an SM issues one warp instruction per scheduler per clock, 4 x 32 thread instructions.
enum { INSTR_DIV64 = 60, INSTR_PHILOX = 90, INSTR_PER_SM_CLOCK = 128 };

#define R_ENUM(name) R_##name,
typedef enum { BACKEND_OPS(R_ENUM) R_COUNT } rec_op;
#undef R_ENUM

typedef struct {
    rec_op op;
    long n[6];            // the op's integer arguments, in signature order
    int flag_a, flag_b;   // op-specific (bias present, dropout on, dinp_add, dbias, residual)
} record;

// Drives one training step (forward, backward, optimizer) of a B x T micro-batch with every
// token real and all P masked positions present through the recording backend; returns its
// records (allocation excluded) in a new array of *n (record.c).
record *roofline_record_step(const bert_config *cfg, int B, int T, int P, roofline_options opt, int *n);

// One recorded op being costed.
typedef struct {
    roofline_result *r;
    const record *rec;
    double n[6];   // the op's arguments as costed: rec->n, or its unpadded counterparts
    double weight; // multiplies every launch's FLOPs, bytes and instructions (1; sequences of
                   // one length in the unpadded attention)
    double A;      // activation bytes
    int baseline;  // cost the unfused kernels the fused ones replaced
    int bias_grad_epilogue;  // roofline_options' field of that name
    int clusters;  // the GPU launches thread-block clusters (the one-kernel attention backward)
    int phase;
} cost_ctx;

// Appends the launches of c's op to c->r (cost.c): its entry in the cost table, which exits
// naming an op of BACKEND_OPS that has none.
void roofline_cost(cost_ctx *c);
// The op's phase in the step (ROOF_FORWARD, ROOF_BACKWARD, ROOF_OPTIMIZER; -1: a transfer, of
// the op beside it) and its name.
int roofline_op_phase(rec_op op);
const char *roofline_op_name(rec_op op);
