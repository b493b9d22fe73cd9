// The multi-tensor optimizer machinery that LAMB, LARS and AdamW share on the GPU (optim.cuh:
// chunk layout, global gradient norm, per-tensor ratios). FP32 arithmetic, sums in a fixed
// order.
#include <vector>
#include "kernels/cuda/optim.cuh"

namespace CUDA_NS {

optim_layout optim_layout_of(const optim_tensor *tensors, int n_tensors) {
    // Workspace: chunks | first_chunk[n_tensors + 1] | decays[n_tensors] | chunk_sq |
    //            chunk_pair | scalars[2] | ratio[n_tensors] | tensor_pair[2 n_tensors]
    // The layout of the last call, while its workspace lives: a workspace freed at the
    // backend's shutdown (or regrown) is laid out again.
    static std::vector<optim_tensor> cached;
    static optim_layout L = {};
    bool same = cached.size() == (size_t)n_tensors && L.chunks &&
                (const void *)L.chunks == device_workspace_current(WS_LAMB);
    for (int t = 0; same && t < n_tensors; t++)
        same = cached[t].offset == tensors[t].offset && cached[t].numel == tensors[t].numel &&
               cached[t].weight_decay == tensors[t].weight_decay;
    if (same) return L;
    std::vector<optim_chunk> chunks;
    std::vector<int> ints;  // first_chunk, then decays
    for (int t = 0; t < n_tensors; t++) {
        ints.push_back((int)chunks.size());
        for (size_t k = 0; k < tensors[t].numel; k += OPTIM_CHUNK) {
            size_t left = tensors[t].numel - k;
            chunks.push_back({(long long)(tensors[t].offset + k), (int)(left < OPTIM_CHUNK ? left : OPTIM_CHUNK), t});
        }
    }
    ints.push_back((int)chunks.size());
    for (int t = 0; t < n_tensors; t++) ints.push_back(tensors[t].weight_decay);
    int n_chunks = (int)chunks.size();
    size_t chunk_bytes = chunks.size() * sizeof(optim_chunk), int_bytes = ints.size() * sizeof(int);
    size_t floats = (size_t)n_chunks * 3 + 2 + 3 * (size_t)n_tensors;
    char *ws = (char *)device_workspace(WS_LAMB, chunk_bytes + int_bytes + floats * sizeof(float));
    std::vector<char> layout(chunk_bytes + int_bytes);
    memcpy(layout.data(), chunks.data(), chunk_bytes);
    memcpy(layout.data() + chunk_bytes, ints.data(), int_bytes);
    device_upload(ws, layout.data(), layout.size());
    cached.assign(tensors, tensors + n_tensors);
    L.n_chunks = n_chunks;
    L.n_tensors = n_tensors;
    L.chunks = (const optim_chunk *)ws;
    L.first_chunk = (const int *)(ws + chunk_bytes);
    L.decays = L.first_chunk + n_tensors + 1;
    L.chunk_sq = (float *)(ws + chunk_bytes + int_bytes);
    L.chunk_pair = L.chunk_sq + n_chunks;
    L.scalars = L.chunk_pair + 2 * n_chunks;
    L.ratio = L.scalars + 2;
    L.tensor_pair = L.ratio + n_tensors;
    return L;
}

static __global__ void grad_sq_kernel(float *chunk_sq, const optim_chunk *chunks, const float *grads,
                                      float inv_scale) {
    __shared__ float scratch[32];
    optim_chunk ch = chunks[blockIdx.x];
    float acc = 0.0f;
    for (int k = threadIdx.x; k < ch.numel; k += blockDim.x) {
        float g = grads[ch.start + k] * inv_scale;
        acc += g * g;
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) chunk_sq[blockIdx.x] = acc;
}

static __device__ __forceinline__ void set_norm(float *scalars, float sum_sq, float max_norm) {
    float norm = sqrtf(sum_sq);
    scalars[0] = norm;
    scalars[1] = norm > max_norm ? max_norm / norm : 1.0f;
}

// One block: norm = sqrt(sum of the chunk squares), clip = min(1, max_norm / norm); with
// finish = 0 only the sum, into scalars[0] (sharded state: summed over the ranks first).
static __global__ void norm_kernel(float *scalars, const float *chunk_sq, int n_chunks, float max_norm, int finish) {
    __shared__ float scratch[32];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n_chunks; i += blockDim.x) acc += chunk_sq[i];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) {
        if (finish) set_norm(scalars, acc, max_norm);
        else scalars[0] = acc;
    }
}

static __global__ void finish_norm_kernel(float *scalars, float max_norm) { set_norm(scalars, scalars[0], max_norm); }

float optim_grad_norm(const optim_layout &L, const float *grads, float inv_scale, float max_norm,
                      void (*sum_over_ranks)(float *, int)) {
    cudaStream_t stream = device_stream();
    LAUNCH(L.n_chunks, OPTIM_THREADS, 0, stream, grad_sq_kernel)(L.chunk_sq, L.chunks, grads, inv_scale);
    CHECK_LAUNCH("grad_sq_kernel");
    LAUNCH(1, 1024, 0, stream, norm_kernel)(L.scalars, L.chunk_sq, L.n_chunks, max_norm, !sum_over_ranks);
    CHECK_LAUNCH("norm_kernel");
    if (sum_over_ranks) {
        sum_over_ranks(L.scalars, 1);
        LAUNCH(1, 1, 0, stream, finish_norm_kernel)(L.scalars, max_norm);
        CHECK_LAUNCH("finish_norm_kernel");
    }
    float norm;
    device_download(&norm, L.scalars, sizeof(float));
    return norm;
}

// RULE is a template argument: each rule's kernels hold its arithmetic only.
template <int RULE>
static __device__ __forceinline__ float ratio_of(int decay, float a, float b, float coefficient, float weight_decay,
                                                 float eps) {
    constexpr int rule = RULE;
    if (rule == RATIO_STABLE) return b > 0.0f && a > b ? 1.0f / sqrtf(a / b) : 1.0f;  // RMS = sqrt(a / b) above 1
    bool adapt = decay && a > 0.0f && b > 0.0f && (rule == RATIO_LARS || weight_decay != 0.0f);
    if (adapt && rule == RATIO_LAMB) return sqrtf(a) / sqrtf(b);
    if (adapt && rule == RATIO_LARS) return coefficient * sqrtf(a) / (sqrtf(b) + weight_decay * sqrtf(a) + eps);
    return 1.0f;
}

// One block per tensor. With tensor_pair (sharded state) the two sums go there instead, for
// the sum over the ranks.
template <int RULE>
static __global__ void ratio_kernel(float *ratio, float *tensor_pair, const float *chunk_pair, const int *first_chunk,
                                    const int *decays, float coefficient, float weight_decay, float eps) {
    __shared__ float scratch[32];
    int t = blockIdx.x;
    float a = 0.0f, b = 0.0f;
    for (int i = first_chunk[t] + threadIdx.x; i < first_chunk[t + 1]; i += blockDim.x) {
        a += chunk_pair[2 * i];
        b += chunk_pair[2 * i + 1];
    }
    a = block_sum(a, scratch);
    b = block_sum(b, scratch);
    if (threadIdx.x != 0) return;
    if (tensor_pair) {
        tensor_pair[2 * t] = a;
        tensor_pair[2 * t + 1] = b;
    } else {
        ratio[t] = ratio_of<RULE>(decays[t], a, b, coefficient, weight_decay, eps);
    }
}

template <int RULE>
static __global__ void ratio_from_sums_kernel(float *ratio, const float *tensor_pair, const int *decays, int n_tensors,
                                              float coefficient, float weight_decay, float eps) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n_tensors)
        ratio[t] = ratio_of<RULE>(decays[t], tensor_pair[2 * t], tensor_pair[2 * t + 1], coefficient, weight_decay, eps);
}

template <int RULE>
static void tensor_ratios(const optim_layout &L, float coefficient, float weight_decay, float eps,
                          void (*sum_over_ranks)(float *, int)) {
    cudaStream_t stream = device_stream();
    LAUNCH(L.n_tensors, OPTIM_THREADS, 0, stream, ratio_kernel<RULE>)(L.ratio, sum_over_ranks ? L.tensor_pair : nullptr,
                                                                      L.chunk_pair, L.first_chunk, L.decays,
                                                                      coefficient, weight_decay, eps);
    CHECK_LAUNCH("ratio_kernel");
    if (sum_over_ranks) {
        sum_over_ranks(L.tensor_pair, 2 * L.n_tensors);
        LAUNCH((L.n_tensors + 255) / 256, 256, 0, stream, ratio_from_sums_kernel<RULE>)(
            L.ratio, L.tensor_pair, L.decays, L.n_tensors, coefficient, weight_decay, eps);
        CHECK_LAUNCH("ratio_from_sums_kernel");
    }
}

void optim_tensor_ratios(const optim_layout &L, optim_ratio_rule rule, float coefficient, float weight_decay,
                         float eps, void (*sum_over_ranks)(float *, int)) {
    if (rule == RATIO_LAMB) tensor_ratios<RATIO_LAMB>(L, coefficient, weight_decay, eps, sum_over_ranks);
    else if (rule == RATIO_LARS) tensor_ratios<RATIO_LARS>(L, coefficient, weight_decay, eps, sum_over_ranks);
    else tensor_ratios<RATIO_STABLE>(L, coefficient, weight_decay, eps, sum_over_ranks);
}

optim_start optim_begin(const optim_tensor *tensors, int n_tensors, const float *grads, double grad_scale,
                        double max_grad_norm, void (*sum_over_ranks)(float *, int)) {
    optim_start s = {optim_layout_of(tensors, n_tensors), 0.0f, 0.0f, false};
    if (s.L.n_chunks == 0) return s;
    s.inv_scale = (float)(1.0 / grad_scale);
    s.norm = optim_grad_norm(s.L, grads, s.inv_scale, (float)max_grad_norm, sum_over_ranks);
    s.go = isfinite(s.norm);
    return s;
}

}  // namespace CUDA_NS
