// ZeRO stage 1 (train.zero_stage = 1): LAMB's moments sharded over the ranks.
//
// The flat buffer of n parameters is cut into `ranks` equal slots of `shard` elements
// (n rounded up to a multiple of 8 x ranks; the gradient, master and compute buffers are
// padded to ranks x shard); rank r owns [r x shard, r x shard + len_r), len_r > 0. A tensor
// may straddle two owners. Each step, after the backward:
//   1. the gradients are reduce-scattered: rank r gets the sum over the ranks of its slot;
//   2. LAMB runs on the owned range only (its moments, shard elements; the master weights of
//      the range), each tensor cut to its piece in the range; the squared global gradient
//      norm and each tensor's ||w||^2 and ||update||^2 are partial sums that one small
//      all-reduce each completes (lamb_hyper.sum_over_ranks), so the update is the
//      unsharded one up to summation order;
//   3. the owned range of the compute copy is refreshed from the master, then the compute
//      copy is all-gathered (2 bytes per parameter in FP16).
// The FP32 master buffer keeps its full size (the owned range is current; the rest is
// gathered when a checkpoint is written); the moments take shard elements instead of n.
// Checkpoints hold the gathered, unsharded state, so a ZeRO run resumes on any rank count
// and without ZeRO, and an unsharded checkpoint resumes with ZeRO.
//
// Another optimizer plugs in by the same contract as LAMB's backend step: it takes the
// owned pieces (offsets relative to the range, possibly empty) and passes every partial sum
// that spans tensors or the buffer through sum_over_ranks before using it; elementwise
// state (moments) then shards like LAMB's.
#pragma once
#include "engine/lamb.h"
#include "engine/model.h"

// Checks train.zero_stage against the backend and the ranks (a message naming the field
// and the value). On one rank without a launcher, zero stage 1 changes nothing; under
// mpirun -np 1 it runs with one shard (the GPU suite's test of this path).
void zero_check(const train_config *t, const backend_t *be, const char *path);
// After the weights and moments are in place (fresh, --init-from or --resume): pads the
// model's buffers and keeps only this rank's range of the moments.
void zero_attach(const train_config *t, bert_model *m, lamb_state *opt);
int zero_active(void);
// The memory plan with LAMB's moments as one rank's shard (ZeRO-1 over t->world_size ranks
// with device collectives); unchanged otherwise.
void zero_plan(memory_plan *plan, const train_config *t, const backend_t *be);
// Steps 1-3 above; returns the global gradient norm (not finite: nothing changed).
double zero_step(bert_model *m, lamb_state *opt, double lr, double grad_scale);
// For a checkpoint: gathers the master weights in place and the moments into `full`
// (unsharded, n elements); returns the state to write (opt itself when not sharded).
const lamb_state *zero_gather(bert_model *m, const lamb_state *opt, lamb_state *full);
void zero_release(lamb_state *full, const lamb_state *opt);
