// ZeRO stage 1 (train.zero_stage = 1): the optimizer's state and the FP32 master weights
// sharded over the ranks.
//
// The flat buffer of n parameters is cut into `ranks` equal slots of `shard` elements
// (n rounded up to a multiple of 8 x ranks; the gradient and compute buffers are padded to
// ranks x shard); rank r owns [r x shard, r x shard + len_r), len_r > 0. A tensor may
// straddle two owners. Each rank keeps the FP32 master weights and the moments of its own
// range only (shard elements each instead of n); the compute copy (BF16/FP16, read by the
// forward and backward) stays whole. Each step:
//   1. the gradients are summed over the ranks, rank r getting the sum of its slot (in
//      train.allreduce_dtype, engine/comm.h). With train.zero_overlap = 1 (the default) this
//      runs per bucket during the backward of the last micro-batch, as the all-reduce does
//      without ZeRO: when the backward has finished a bucket (the heads, each encoder layer
//      from the last, the embeddings; bert_buckets), the bucket's piece in each owner's slot
//      is reduced to that owner on the communication stream (backend_comm's reduce_owned)
//      while the backward goes on. With 0, one reduce-scatter over the whole buffer after
//      the backward. Both sum the same values in the same order (each element once, over
//      the ranks), so the results are bitwise equal in the emulation;
//   2. the optimizer (LAMB, LARS or AdamW: optim_apply) runs on the owned range only (its
//      state, the master weights of the range), each tensor cut to its piece in the range;
//      the squared global gradient norm and each tensor's pair of squared norms (LAMB: ||w||,
//      ||update||; LARS: ||w||, ||g||) are partial sums that one small all-reduce each
//      completes (sum_over_ranks in adam_hyper / lars_hyper), so the update is the unsharded
//      one up to summation order;
//   3. the owned range of the compute copy is refreshed from the masters, then the compute
//      copy is all-gathered (2 bytes per parameter in FP16). With zero_overlap = 1 it goes
//      bucket by bucket in the forward's order (broadcast_owned, each owner's piece to every
//      rank) and the step returns at once: the next forward (the next step's first
//      micro-batch, or an evaluation) waits for bucket k only before it first reads bucket
//      k's weights (the model's weights_needed hook), so the gathers of the later layers run
//      while the earlier layers compute. With 0, one all-gather, waited for in the step.
// Checkpoints hold the gathered, unsharded state (the masters and moments all-gathered into
// temporary buffers while rank 0 writes), so a ZeRO run resumes on any rank count and
// without ZeRO, and an unsharded checkpoint resumes with ZeRO.
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
// The memory plan with LAMB's moments and the FP32 master weights as one rank's shard
// (ZeRO-1 over t->world_size ranks with device collectives); unchanged otherwise.
void zero_plan(memory_plan *plan, const train_config *t, const backend_t *be);
// The model's grads_ready hook for the last micro-batch of a step: zero_grads_ready under
// ZeRO-1 with zero_overlap (step 1 per bucket), else NULL.
void (*zero_grads_hook(void))(void *grads, size_t offset, size_t n);
void zero_grads_ready(void *grads, size_t offset, size_t n);
// The model's weights_needed hook under zero_overlap: waits (with the timeout) for bucket k's
// all-gather of the compute weights when it is still in flight.
void zero_weights_needed(int bucket);
// Steps 1 (the wait for it, with zero_overlap) to 3 above; returns the global gradient norm
// (not finite: nothing changed).
double zero_step(bert_model *m, optim_state *opt, double lr, double grad_scale);
// For a checkpoint: gathers the master weights (m->params points to them until
// zero_release) and the moments into `full` (unsharded, n elements); returns the state to
// write (opt itself when not sharded).
const optim_state *zero_gather(bert_model *m, const optim_state *opt, optim_state *full);
// After the write: frees what zero_gather allocated and gives the model its own masters back
// (nothing when not sharded).
void zero_release(optim_state *full, const optim_state *opt);
// Waits for the all-gather still in flight, if any.
void zero_settle(void);
// Before the model is freed: zero_settle, then forgets the model.
void zero_detach(bert_model *m);
