// ZeRO stage 1 (train.zero_stage = 1): the optimizer's state sharded over the ranks.
//
// The flat buffer of n parameters is cut into `ranks` equal slots of `shard` elements
// (n rounded up to a multiple of 8 x ranks; the gradient, master and compute buffers are
// padded to ranks x shard); rank r owns [r x shard, r x shard + len_r), len_r > 0. A tensor
// may straddle two owners. Each step, after the backward:
//   1. the gradients are reduce-scattered (in train.allreduce_dtype, engine/comm.h): rank r
//      gets the sum over the ranks of its slot;
//   2. the optimizer (LAMB, LARS or AdamW: optim_apply) runs on the owned range only (its
//      state, shard elements; the master weights of the range), each tensor cut to its piece
//      in the range; the squared global gradient norm and each tensor's pair of squared
//      norms (LAMB: ||w||, ||update||; LARS: ||w||, ||g||) are partial sums that one small
//      all-reduce each completes (sum_over_ranks in lamb_hyper / lars_hyper), so the update
//      is the unsharded one up to summation order;
//   3. the owned range of the compute copy is refreshed from the master, then the compute
//      copy is all-gathered (2 bytes per parameter in FP16).
// The FP32 master buffer keeps its full size (the owned range is current; the rest is
// gathered when a checkpoint is written); the moments take shard elements instead of n.
// Checkpoints hold the gathered, unsharded state, so a ZeRO run resumes on any rank count
// and without ZeRO, and an unsharded checkpoint resumes with ZeRO.
//
// The optimizers' backend steps share that contract (kernels/cuda/optim.cuh): they take the
// owned pieces (offsets relative to the range, possibly empty) and pass every partial sum
// that spans tensors or the buffer through sum_over_ranks before using it; elementwise
// state (moments, momentum) then shards with the range.
#pragma once
#include "engine/optim.h"
#include "engine/model.h"

// Checks train.zero_stage against the backend and the ranks (a message naming the field
// and the value). On one rank without a launcher, zero stage 1 changes nothing; under
// mpirun -np 1 it runs with one shard (the GPU suite's test of this path).
void zero_check(const train_config *t, const backend_t *be, const char *path);
// After the weights and moments are in place (fresh, --init-from or --resume): pads the
// model's buffers and keeps only this rank's range of the moments.
void zero_attach(const train_config *t, bert_model *m, optim_state *opt);
int zero_active(void);
// The memory plan with LAMB's moments as one rank's shard (ZeRO-1 over t->world_size ranks
// with device collectives); unchanged otherwise.
void zero_plan(memory_plan *plan, const train_config *t, const backend_t *be);
// Steps 1-3 above; returns the global gradient norm (not finite: nothing changed).
double zero_step(bert_model *m, optim_state *opt, double lr, double grad_scale);
// For a checkpoint: gathers the master weights in place and the moments into `full`
// (unsharded, n elements); returns the state to write (opt itself when not sharded).
const optim_state *zero_gather(bert_model *m, const optim_state *opt, optim_state *full);
void zero_release(optim_state *full, const optim_state *opt);
