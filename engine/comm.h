// Data parallelism on the device (design in README "Multi-GPU training"): the rank's GPU,
// the NCCL communicator, and the gradient sum overlapped with the backward.
//
// comm_setup picks the rank's device before any other device call (every backend with
// select_device: by what the rank sees, backend.h); under a launcher each rank says which
// physical GPU (PCI bus id) it drives, and two ranks of a node on one GPU end the run naming
// both. It sets the timeout of every wait for other ranks
// (train.comm_timeout_s), and on more than one rank with a backend that has device
// collectives makes one NCCL communicator for the job: rank 0's unique id goes to every
// rank over MPI. Then train_step sums the gradients with comm_grads_ready: during the
// backward of the last micro-batch of a step, each range of the flat gradient buffer that
// the backward has finished (the heads, each encoder layer from the last, the embeddings)
// is summed on the communication stream while the backward goes on with the next layers;
// comm_wait waits for them (the timeout, then the job ends naming the ranks that do not
// answer) and the compute stream continues after them (BF16 and FP16 sums cast back into
// the FP32 buffer). The FP32 sums equal the host path's
// (MPI_Allreduce) up to summation order.
#pragma once
#include <stddef.h>
#include "kernels/backend.h"
#include "engine/config.h"
#include "engine/model.h"

// train.allreduce_dtype bf16 or fp16 sums the gradients in that type (backend_comm's
// all_reduce and reduce_scatter: half the bytes of FP32; FP16 scaled by 1 / ranks first, an
// overflow an inf on every rank that the loss scaler sees, so every rank skips the step);
// on several ranks it needs device collectives (an error naming the field and `path`).
void comm_setup(const backend_t *be, const train_config *t, const char *path);
// train.allreduce_dtype as the collectives' type.
comm_dtype comm_grad_type(void);
// The memory plan's gradients with the BF16 or FP16 copy that the sums travel in (over
// t->world_size ranks with device collectives); unchanged otherwise.
void comm_plan(memory_plan *plan, const train_config *t, const backend_t *be);
// Destroys the communicator (after every rank's last collective), then shuts the backend
// of comm_setup down (backend_release): the end of the run's device work, after its
// buffers were released.
void comm_finish(void);
// Whether the gradients are summed on the device (a communicator exists).
int comm_active(void);
// Queues the sum over the ranks of grads[offset, offset + n) (FP32) after the compute
// stream's queued work; the model's grads_ready hook (ctx: the FP32 gradient buffer).
void comm_grads_ready(void *grads, size_t offset, size_t n);
// Waits, polling with the timeout, for every collective queued so far; then the compute
// stream continues after them. `what` names them in the error.
void comm_wait(const char *what);
// Waits, polling with the timeout, for the collectives queued up to the last mark of `slot`
// (backend_comm's broadcast_owned). Work queued on the compute stream after it returns runs
// after them.
void comm_wait_slot(int slot, const char *what);
