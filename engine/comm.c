// The device side of data parallelism: GPU choice, NCCL communicator, bucketed gradient
// sums, and the timed wait (comm.h).
#include "engine/comm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine/dist.h"
#include "kernels/backend.h"
#include "kernels/common/check.h"

static const backend_comm *ops = NULL;  // set while a communicator exists
static comm_dtype grad_type = COMM_FP32;  // train.allreduce_dtype
static const backend_t *device_backend = NULL;  // comm_setup's, shut down by comm_finish

static void abort_communicator(void) {
    if (ops) ops->abort();
    ops = NULL;
}

// Under a launcher: says which physical GPU (PCI bus id) this rank drives, and refuses two
// ranks of a node on one GPU (what each rank sees can make two of them pick the same one,
// e.g. every rank seeing the same single GPU), naming both.
static void check_gpus(const backend_t *be, const char *bus_id, int rank, int local_rank, int local_size) {
    if (!dist_launched()) return;
    typedef struct {
        int rank;
        char bus_id[28];
    } gpu_of_rank;
    gpu_of_rank mine = {rank, ""}, *all = xcalloc((size_t)local_size, sizeof *all);
    snprintf(mine.bus_id, sizeof mine.bus_id, "%s", bus_id);
    printf("  rank %d (local rank %d of %d): %s, PCI bus id %s\n", rank, local_rank, local_size, be->device_name(),
           mine.bus_id);
    fflush(stdout);
    dist_node_gather_bytes(&mine, (int)sizeof mine, all);
    for (int i = 0; i < local_size; i++)
        for (int j = i + 1; j < local_size; j++)
            if (strcmp(all[i].bus_id, all[j].bus_id) == 0)
                fatal("ranks %d and %d (local ranks %d and %d) would both drive the GPU at PCI bus id %s: give each "
                      "rank its own GPU (one visible GPU per rank, e.g. SLURM's --gpus-per-task=1 "
                      "--gpu-bind=per_task:1, or every rank seeing all of the node's GPUs; docs/MULTI-GPU.md)",
                      all[i].rank, all[j].rank, i, j, all[i].bus_id);
    free(all);
}

void comm_setup(const backend_t *be, const train_config *t, const char *path) {
    dist_set_timeout(t->comm_timeout_s);
    grad_type = !strcmp(t->allreduce_dtype, "bf16") ? COMM_BF16 : !strcmp(t->allreduce_dtype, "fp16") ? COMM_FP16
                                                                                                      : COMM_FP32;
    if (grad_type != COMM_FP32 && t->world_size > 1 && !be->comm)
        fatal("%s: section 'train': field 'allreduce_dtype' = \"%s\" sums the gradients in a narrow type over device "
              "collectives (NCCL), which the %s backend does not have; use backend cuda (built with NCCL) or "
              "cuda-emu, or allreduce_dtype \"fp32\"", path, t->allreduce_dtype, be->name);
    device_backend = be;
    int rank = dist_rank(), world = dist_world_size(), local_rank = 0, local_size = 1;
    dist_local_rank(&local_rank, &local_size);
    if (be->select_device) check_gpus(be, be->select_device(rank, local_rank, local_size), rank, local_rank,
                                      local_size);
    // Under a launcher even one rank uses the communicator (the 1-rank NCCL test).
    if (!dist_launched() || !be->comm) return;
    unsigned char id[COMM_ID_BYTES] = {0};
    if (rank == 0) be->comm->unique_id(id);
    dist_broadcast_bytes(id, COMM_ID_BYTES);
    be->comm->init(id, rank, world);
    ops = be->comm;
    dist_on_abort(abort_communicator);
    if (rank == 0)
        printf("  %d rank%s: gradients summed on the device over NCCL in %s, one bucket per layer during the "
               "backward\n", world, world == 1 ? "" : "s", t->allreduce_dtype);
}

void comm_finish(void) {
    if (ops) ops->destroy();
    ops = NULL;
    backend_release(device_backend);
    device_backend = NULL;
}

int comm_active(void) { return ops != NULL; }

comm_dtype comm_grad_type(void) { return grad_type; }

void comm_plan(memory_plan *plan, const train_config *t, const backend_t *be) {
    if (!strcmp(t->allreduce_dtype, "fp32") || t->world_size == 1 || !be->comm) return;
    plan->bytes[MEM_GRADS] += plan->bytes[MEM_GRADS] / be->acc_size * 2;  // one 2-byte copy of the FP32 gradients
}

void comm_grads_ready(void *grads, size_t offset, size_t n) {
    ops->all_reduce((float *)grads + offset, n, grad_type);
}

typedef struct {
    char error[512];
} poll_state;

static int collectives_done(void *ctx) {
    poll_state *p = ctx;
    int state = ops->done(p->error, sizeof p->error);
    if (state < 0) {
        abort_communicator();
        fatal("rank %d of %d: %s", dist_rank(), dist_world_size(), p->error);
    }
    return state;
}

void comm_wait(const char *what) {
    poll_state p = {""};
    dist_wait_until(collectives_done, &p, what);
    ops->join();
}

typedef struct {
    poll_state p;
    int slot;
} slot_state;

static int slot_done(void *ctx) {
    slot_state *s = ctx;
    int state = ops->mark_done(s->slot, s->p.error, sizeof s->p.error);
    if (state < 0) {
        abort_communicator();
        fatal("rank %d of %d: %s", dist_rank(), dist_world_size(), s->p.error);
    }
    return state;
}

void comm_wait_slot(int slot, const char *what) {
    slot_state s = {{""}, slot};
    dist_wait_until(slot_done, &s, what);
}
