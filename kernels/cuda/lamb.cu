// LAMB update on the GPU over all tensors at once (multi-tensor: every launch covers the
// whole flat buffer, cut into chunks that never straddle two tensors). Same rule as
// kernels/cpu/lamb.c; FP32 arithmetic, and every norm is summed in a fixed order (per
// chunk, then chunks in order), so the update is deterministic.
//   1. squares of the unscaled gradients per chunk   2. global norm and clip factor
//   (the host reads the norm: not finite = overflow, nothing changes)
//   3. moments, and per chunk the squares of w and u  4. trust ratio per tensor   5. update
// With sharded state (h.sum_over_ranks) steps 2 and 4 first leave their sums of squares in
// device memory, which are summed over the ranks before the norm and the trust ratios.
#include <vector>
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

static const int LAMB_CHUNK = 16384, LAMB_THREADS = 256;

struct lamb_chunk {
    long long start;
    int numel;
    int tensor;
};

static __global__ void lamb_grad_sq_kernel(float *chunk_sq, const lamb_chunk *chunks, const float *grads,
                                           float inv_scale) {
    __shared__ float scratch[32];
    lamb_chunk ch = chunks[blockIdx.x];
    float acc = 0.0f;
    for (int k = threadIdx.x; k < ch.numel; k += blockDim.x) {
        float g = grads[ch.start + k] * inv_scale;
        acc += g * g;
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) chunk_sq[blockIdx.x] = acc;
}

static __device__ __forceinline__ void lamb_set_norm(float *scalars, float sum_sq, float max_norm) {
    float norm = sqrtf(sum_sq);
    scalars[0] = norm;
    scalars[1] = norm > max_norm ? max_norm / norm : 1.0f;
}

// One block: norm = sqrt(sum of the chunk squares), clip = min(1, max_norm / norm); with
// finish = 0 only the sum, into scalars[0] (sharded state: summed over the ranks first).
static __global__ void lamb_norm_kernel(float *scalars, const float *chunk_sq, int n_chunks, float max_norm,
                                        int finish) {
    __shared__ float scratch[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n_chunks; i += blockDim.x) acc += chunk_sq[i];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) {
        if (finish) lamb_set_norm(scalars, acc, max_norm);
        else scalars[0] = acc;
    }
}

static __global__ void lamb_finish_norm_kernel(float *scalars, float max_norm) {
    lamb_set_norm(scalars, scalars[0], max_norm);
}

struct lamb_coefficients {
    // 1 - beta is computed in double on the host: 1.0f - 0.999f is off by 1.3e-5 relative.
    float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, inv_scale, bc1, bc2, lr;
};

static __device__ __forceinline__ float lamb_direction(float m, float v, float w, float wd,
                                                       const lamb_coefficients &c) {
    return (m / c.bc1) / (sqrtf(v / c.bc2) + c.eps) + wd * w;
}

static __global__ void lamb_moments_kernel(float *chunk_wu, const lamb_chunk *chunks, const int *decays,
                                           const float *params, float *mom, float *vel, const float *grads,
                                           const float *scalars, lamb_coefficients c) {
    __shared__ float scratch[32];
    lamb_chunk ch = chunks[blockIdx.x];
    float clip = scalars[1], wd = decays[ch.tensor] ? c.weight_decay : 0.0f;
    float w_sq = 0.0f, u_sq = 0.0f;
    for (int k = threadIdx.x; k < ch.numel; k += blockDim.x) {
        long long i = ch.start + k;
        float g = grads[i] * c.inv_scale * clip;
        float m = c.beta1 * mom[i] + c.one_minus_beta1 * g;
        float v = c.beta2 * vel[i] + c.one_minus_beta2 * g * g;
        mom[i] = m;
        vel[i] = v;
        float w = params[i], u = lamb_direction(m, v, w, wd, c);
        w_sq += w * w;
        u_sq += u * u;
    }
    w_sq = block_sum(w_sq, scratch);
    u_sq = block_sum(u_sq, scratch);
    if (threadIdx.x == 0) {
        chunk_wu[2 * blockIdx.x] = w_sq;
        chunk_wu[2 * blockIdx.x + 1] = u_sq;
    }
}

static __device__ __forceinline__ float lamb_trust_ratio(int decay, float w_sq, float u_sq) {
    return decay && w_sq > 0.0f && u_sq > 0.0f ? sqrtf(w_sq) / sqrtf(u_sq) : 1.0f;
}

// One block per tensor: its chunks are first_chunk[t] .. first_chunk[t + 1] - 1. With
// tensor_wu (sharded state) the sums of squares go there instead, for the sum over ranks.
static __global__ void lamb_trust_kernel(float *trust, float *tensor_wu, const float *chunk_wu,
                                         const int *first_chunk, const int *decays) {
    __shared__ float scratch[32];
    int t = blockIdx.x;
    float w_sq = 0.0f, u_sq = 0.0f;
    for (int i = first_chunk[t] + threadIdx.x; i < first_chunk[t + 1]; i += blockDim.x) {
        w_sq += chunk_wu[2 * i];
        u_sq += chunk_wu[2 * i + 1];
    }
    w_sq = block_sum(w_sq, scratch);
    u_sq = block_sum(u_sq, scratch);
    if (threadIdx.x != 0) return;
    if (tensor_wu) {
        tensor_wu[2 * t] = w_sq;
        tensor_wu[2 * t + 1] = u_sq;
    } else {
        trust[t] = lamb_trust_ratio(decays[t], w_sq, u_sq);
    }
}

static __global__ void lamb_trust_from_sums_kernel(float *trust, const float *tensor_wu, const int *decays,
                                                   int n_tensors) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n_tensors) trust[t] = lamb_trust_ratio(decays[t], tensor_wu[2 * t], tensor_wu[2 * t + 1]);
}

static __global__ void lamb_apply_kernel(float *params, const lamb_chunk *chunks, const int *decays,
                                         const float *mom, const float *vel, const float *trust,
                                         lamb_coefficients c) {
    lamb_chunk ch = chunks[blockIdx.x];
    float wd = decays[ch.tensor] ? c.weight_decay : 0.0f, step = c.lr * trust[ch.tensor];
    for (int k = threadIdx.x; k < ch.numel; k += blockDim.x) {
        long long i = ch.start + k;
        params[i] -= step * lamb_direction(mom[i], vel[i], params[i], wd, c);
    }
}

double lamb_step(float *params, float *m, float *v, const void *grads_, const lamb_tensor *tensors, int n_tensors,
                 lamb_hyper h) {
    const float *grads = (const float *)grads_;
    // The chunk layout depends on the tensor table only: built and uploaded when the table
    // changes (in training: once), into LAMB's own workspace, which then also holds the
    // per-step partial norms.
    // Workspace: chunks | first_chunk[n_tensors + 1] | decays[n_tensors] | chunk_sq | chunk_wu |
    //            scalars[2] | trust[n_tensors] | tensor_wu[2 n_tensors]
    static std::vector<lamb_tensor> cached;
    static int n_chunks = 0;
    static char *ws = nullptr;
    bool same = cached.size() == (size_t)n_tensors;
    for (int t = 0; same && t < n_tensors; t++)
        same = cached[t].offset == tensors[t].offset && cached[t].numel == tensors[t].numel &&
               cached[t].weight_decay == tensors[t].weight_decay;
    if (!same) {
        std::vector<lamb_chunk> chunks;
        std::vector<int> ints;  // first_chunk, then decays
        for (int t = 0; t < n_tensors; t++) {
            ints.push_back((int)chunks.size());
            for (size_t k = 0; k < tensors[t].numel; k += LAMB_CHUNK) {
                size_t left = tensors[t].numel - k;
                chunks.push_back(
                    {(long long)(tensors[t].offset + k), (int)(left < LAMB_CHUNK ? left : LAMB_CHUNK), t});
            }
        }
        ints.push_back((int)chunks.size());
        for (int t = 0; t < n_tensors; t++) ints.push_back(tensors[t].weight_decay);
        n_chunks = (int)chunks.size();
        size_t chunk_bytes = chunks.size() * sizeof(lamb_chunk), int_bytes = ints.size() * sizeof(int);
        size_t floats = (size_t)n_chunks * 3 + 2 + 3 * (size_t)n_tensors;
        ws = (char *)device_workspace(WS_LAMB, chunk_bytes + int_bytes + floats * sizeof(float));
        std::vector<char> layout(chunk_bytes + int_bytes);
        memcpy(layout.data(), chunks.data(), chunk_bytes);
        memcpy(layout.data() + chunk_bytes, ints.data(), int_bytes);
        device_upload(ws, layout.data(), layout.size());
        cached.assign(tensors, tensors + n_tensors);
    }
    if (n_chunks == 0) return 0.0;  // (sharded: every rank holds a non-empty piece, engine/zero.c)
    lamb_chunk *d_chunks = (lamb_chunk *)ws;
    int *d_first = (int *)(d_chunks + n_chunks), *d_decays = d_first + n_tensors + 1;
    float *chunk_sq = (float *)(d_decays + n_tensors), *chunk_wu = chunk_sq + n_chunks;
    float *scalars = chunk_wu + 2 * n_chunks, *trust = scalars + 2, *tensor_wu = trust + n_tensors;
    bool sharded = h.sum_over_ranks != nullptr;

    cudaStream_t stream = device_stream();
    float inv_scale = (float)(1.0 / h.grad_scale);
    LAUNCH(n_chunks, LAMB_THREADS, 0, stream, lamb_grad_sq_kernel)(chunk_sq, d_chunks, grads, inv_scale);
    CHECK_LAUNCH("lamb_grad_sq_kernel");
    LAUNCH(1, 1024, 0, stream, lamb_norm_kernel)(scalars, chunk_sq, n_chunks, (float)h.max_grad_norm, !sharded);
    CHECK_LAUNCH("lamb_norm_kernel");
    if (sharded) {
        h.sum_over_ranks(scalars, 1);
        LAUNCH(1, 1, 0, stream, lamb_finish_norm_kernel)(scalars, (float)h.max_grad_norm);
        CHECK_LAUNCH("lamb_finish_norm_kernel");
    }
    float norm;
    device_download(&norm, scalars, sizeof(float));
    if (!isfinite(norm)) return norm;
    lamb_coefficients c = {(float)h.beta1,
                           (float)(1.0 - h.beta1),
                           (float)h.beta2,
                           (float)(1.0 - h.beta2),
                           (float)h.eps,
                           (float)h.weight_decay,
                           inv_scale,
                           (float)(1.0 - pow(h.beta1, (double)h.step)),
                           (float)(1.0 - pow(h.beta2, (double)h.step)),
                           (float)h.lr};
    LAUNCH(n_chunks, LAMB_THREADS, 0, stream, lamb_moments_kernel)(chunk_wu, d_chunks, d_decays, params, m, v, grads,
                                                                   scalars, c);
    CHECK_LAUNCH("lamb_moments_kernel");
    LAUNCH(n_tensors, LAMB_THREADS, 0, stream, lamb_trust_kernel)(trust, sharded ? tensor_wu : nullptr, chunk_wu,
                                                                  d_first, d_decays);
    CHECK_LAUNCH("lamb_trust_kernel");
    if (sharded) {
        h.sum_over_ranks(tensor_wu, 2 * n_tensors);
        LAUNCH(ceil_div(n_tensors, LAMB_THREADS), LAMB_THREADS, 0, stream, lamb_trust_from_sums_kernel)(
            trust, tensor_wu, d_decays, n_tensors);
        CHECK_LAUNCH("lamb_trust_from_sums_kernel");
    }
    LAUNCH(n_chunks, LAMB_THREADS, 0, stream, lamb_apply_kernel)(params, d_chunks, d_decays, m, v, trust, c);
    CHECK_LAUNCH("lamb_apply_kernel");
    return norm;
}

}  // namespace CUDA_NS
