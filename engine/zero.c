// ZeRO stage 1: sharded optimizer state over the device collectives (zero.h).
#include "engine/zero.h"
#include <math.h>
#include <string.h>
#include "engine/comm.h"
#include "engine/dist.h"
#include "kernels/common/check.h"

static struct {
    int active, rank, world;
    size_t n, shard, start, len;  // elements
    optim_tensor *pieces;          // every tensor cut to [start, start + len), offsets from start
    const backend_comm *comm;
    int overlap;                  // train.zero_overlap
    int n_buckets;                // bert_buckets' (the forward's order)
    size_t *bucket_start;         // [n_buckets + 1]
    int gathering;                // buckets [gathering, n_buckets) of the compute weights not yet waited for
    float *full_params;           // zero_gather's unsharded master weights while a checkpoint is written
    float *owned_params;          // the model's own (sharded) masters meanwhile
    bert_model *model;
} z;

void zero_check(const train_config *t, const backend_t *be, const char *path) {
    if (t->zero_stage == 0 || (t->world_size == 1 && !dist_launched())) return;
    if (!be->comm)
        fatal("%s: section 'train': field 'zero_stage' = %d shards the optimizer over device collectives (NCCL), which "
              "the %s backend does not have; use backend cuda (built with NCCL) or cuda-emu, or zero_stage 0",
              path, t->zero_stage, be->name);
}

int zero_active(void) { return z.active; }

// Elements per rank's slot for n parameters over `ranks`.
static size_t shard_of(size_t n, int ranks) { return (n + 8 * (size_t)ranks - 1) / (8 * (size_t)ranks) * 8; }

void zero_plan(memory_plan *plan, const train_config *t, const backend_t *be) {
    if (t->zero_stage == 0 || t->world_size == 1 || !be->comm) return;
    size_t n = plan->bytes[MEM_OPTIMIZER] / (2 * sizeof(float)), shard = shard_of(n, t->world_size);
    plan->bytes[MEM_OPTIMIZER] = 2 * shard * sizeof(float);
    plan->bytes[MEM_PARAMS] -= (n - shard) * sizeof(float);  // the FP32 master weights: one shard
    plan->masters_sharded = 1;
}

// The buffer (elements of `size` bytes) again with ranks x shard elements, zero padding.
static void *padded(const backend_t *be, void *old, size_t size) {
    void *host = xcalloc(z.world * z.shard, size);
    be->download(host, old, z.n * size);
    be->release(old);
    void *dev = be->alloc(z.world * z.shard * size);
    be->upload(dev, host, z.world * z.shard * size);
    free(host);
    return dev;
}

// This rank's range of a moment buffer of n elements, in a buffer of shard elements.
static float *owned_range(const backend_t *be, float *full) {
    float *host = xcalloc(z.shard, sizeof(float));
    be->download(host, full + z.start, z.len * sizeof(float));
    be->release(full);
    float *dev = be->alloc(z.shard * sizeof(float));
    be->upload(dev, host, z.shard * sizeof(float));
    free(host);
    return dev;
}

void zero_attach(const train_config *t, bert_model *m, optim_state *opt) {
    if (t->zero_stage == 0 || !comm_active()) return;
    const backend_t *be = m->be;
    z.rank = dist_rank();
    z.world = dist_world_size();
    z.n = m->n_params;
    z.shard = shard_of(z.n, z.world);
    z.start = z.shard * z.rank;
    z.len = z.start < z.n ? (z.n - z.start < z.shard ? z.n - z.start : z.shard) : 0;
    if (z.shard * (z.world - 1) >= z.n)
        fatal("train.zero_stage = 1: %zu parameters leave the last of %d ranks without a piece; use fewer ranks or "
              "zero_stage 0", z.n, z.world);
    if (m->params_compute == (void *)m->params)
        fatal("train.zero_stage = 1 shards the FP32 master weights apart from the compute copy, which the %s "
              "backend does not keep", be->name);
    m->grads = padded(be, m->grads, be->acc_size);
    m->params_compute = padded(be, m->params_compute, be->act_size);
    m->params = owned_range(be, m->params);  // the masters of the owned range only
    opt->m = owned_range(be, opt->m);
    if (opt->v) opt->v = owned_range(be, opt->v);  // LARS has one buffer
    z.pieces = xcalloc((size_t)m->n_tensors, sizeof(optim_tensor));
    for (int i = 0; i < m->n_tensors; i++) {
        const param_info *p = &m->table[i];
        size_t lo = p->offset > z.start ? p->offset : z.start;
        size_t hi = p->offset + p->numel < z.start + z.len ? p->offset + p->numel : z.start + z.len;
        z.pieces[i] = (optim_tensor){hi > lo ? lo - z.start : 0, hi > lo ? hi - lo : 0, p->weight_decay};
    }
    z.comm = be->comm;
    z.overlap = t->zero_overlap;
    z.bucket_start = xcalloc((size_t)m->cfg.num_hidden_layers + 3, sizeof(size_t));
    z.n_buckets = bert_buckets(m, z.bucket_start);
    z.gathering = z.n_buckets;
    z.model = m;
    if (z.overlap) m->weights_needed = zero_weights_needed;
    z.active = 1;
    double states = opt->v ? 3.0 : 2.0;  // the moments and the master weights
    if (z.rank == 0)
        printf("  ZeRO-1: the %s state and the FP32 master weights in %d shards of %zu parameters (%.1f MiB per "
               "rank instead of %.1f); %s\n", optim_name(opt->kind), z.world, z.shard,
               states * z.shard * sizeof(float) / 1048576.0, states * z.n * sizeof(float) / 1048576.0,
               z.overlap ? "each layer's gradients reduced during the backward, its weights gathered during the "
                           "next forward" : "one reduce-scatter after the backward, one all-gather after the update");
}

void zero_grads_ready(void *grads, size_t offset, size_t n) {
    z.comm->reduce_owned(grads, offset, n, z.shard, comm_grad_type());
}

void (*zero_grads_hook(void))(void *grads, size_t offset, size_t n) {
    return z.active && z.overlap ? zero_grads_ready : NULL;
}

// Slots of the communication stream's marks (backend_comm, 64): a model deeper than that
// shares the last, whose wait then also covers the buckets before.
static int slot_of(int bucket) { return bucket < 63 ? bucket : 63; }

void zero_weights_needed(int bucket) {
    if (bucket < z.gathering) return;
    char what[96];
    snprintf(what, sizeof what, "the all-gather of bucket %d of the compute weights (ZeRO-1)", bucket);
    comm_wait_slot(slot_of(bucket), what);
    z.gathering = bucket + 1;
}

void zero_settle(void) {
    if (z.active && z.gathering < z.n_buckets) zero_weights_needed(z.n_buckets - 1);
}

void zero_detach(bert_model *m) {
    if (!z.active) return;
    zero_settle();
    m->weights_needed = NULL;
    free(z.pieces);
    free(z.bucket_start);
    memset(&z, 0, sizeof z);
}

static void sum_over_ranks(float *values, int n) {
    z.comm->all_reduce(values, (size_t)n, COMM_FP32);
    comm_wait("the all-reduce of the optimizer's norms (ZeRO-1)");
}

double zero_step(bert_model *m, optim_state *opt, double lr, double grad_scale) {
    const backend_t *be = m->be;
    if (z.overlap) {
        comm_wait("the reduce of the gradients per layer (ZeRO-1)");  // queued by zero_grads_ready
    } else {
        z.comm->reduce_scatter(m->grads, z.shard, comm_grad_type());
        comm_wait("the reduce-scatter of the gradients (ZeRO-1)");
    }
    double norm = optim_apply(opt, m->params, (float *)m->grads + z.start, z.pieces, m->n_tensors, lr, grad_scale,
                              sum_over_ranks);
    if (!isfinite(norm)) return norm;
    size_t A = be->act_size;
    be->params_to_compute((char *)m->params_compute + z.start * A, m->params, z.len);
    if (z.overlap) {
        // Bucket by bucket in the forward's order; the next forward waits for each before its use.
        for (int k = 0; k < z.n_buckets; k++)
            z.comm->broadcast_owned(m->params_compute, z.bucket_start[k] * A,
                                    (z.bucket_start[k + 1] - z.bucket_start[k]) * A, z.shard * A, slot_of(k));
        z.gathering = 0;
    } else {
        z.comm->all_gather(m->params_compute, z.shard * A);
        comm_wait("the all-gather of the compute weights (ZeRO-1)");
    }
    return norm;
}

const optim_state *zero_gather(bert_model *m, const optim_state *opt, optim_state *full) {
    if (!z.active) return opt;
    const backend_t *be = m->be;
    *full = *opt;
    full->n_params = z.n;
    float *host = xcalloc(z.shard, sizeof(float));
    float **moments[2] = {&full->m, &full->v};
    const float *owned[2] = {opt->m, opt->v};
    for (int k = 0; k < (opt->v ? 2 : 1); k++) {
        *moments[k] = be->alloc(z.world * z.shard * sizeof(float));
        be->download(host, owned[k], z.shard * sizeof(float));
        be->upload(*moments[k] + z.start, host, z.shard * sizeof(float));
        z.comm->all_gather(*moments[k], z.shard * sizeof(float));
    }
    // The master weights likewise, into a buffer that stands in for the model's while the
    // checkpoint is written.
    z.full_params = be->alloc(z.world * z.shard * sizeof(float));
    be->download(host, m->params, z.shard * sizeof(float));
    be->upload(z.full_params + z.start, host, z.shard * sizeof(float));
    free(host);
    z.comm->all_gather(z.full_params, z.shard * sizeof(float));
    comm_wait("the all-gather of the weights and moments for a checkpoint (ZeRO-1)");
    z.gathering = z.n_buckets;  // queued before, so finished too
    z.owned_params = m->params;
    m->params = z.full_params;
    return full;
}

void zero_release(optim_state *full, const optim_state *opt) {
    (void)opt;  // zero_gather's result: `full` itself when sharded
    if (!z.active || !z.full_params) return;
    full->be->release(full->m);
    if (full->v) full->be->release(full->v);
    z.model->params = z.owned_params;
    full->be->release(z.full_params);
    z.full_params = z.owned_params = NULL;
}
