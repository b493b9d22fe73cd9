// Deterministic reductions shared by several ops (no float atomics: docs/ARCHITECTURE.md §8).
//   column_sums_add: dst[c] += sum_n src[n,c]. Rows are cut into chunks; each block sums
//     its chunk for 32 columns in a fixed order, a second kernel adds the chunks in order.
//   scatter_rows: dst[key[n],:] (+)= sum over the rows n with that key, in increasing n.
//     The keys are on the host: they are sorted there (counting sort, stable), and one
//     block per distinct key sums its rows, so no two blocks write the same row.
#include <algorithm>
#include <vector>
#include "kernels/cuda/ops.cuh"

namespace CUDA_NS {

static const int CHUNK_ROWS_THREADS = 8;

template <typename T>
static __global__ void column_partials_kernel(float *partials, const T *src, int N, int C, int rows_per_chunk) {
    __shared__ float tile[CHUNK_ROWS_THREADS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int first = blockIdx.y * rows_per_chunk;
    int last = min(N, first + rows_per_chunk);
    float acc = 0.0f;
    if (c < C)
        for (int n = first + (int)threadIdx.y; n < last; n += CHUNK_ROWS_THREADS) acc += to_float(src[(size_t)n * C + c]);
    tile[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float sum = 0.0f;
        for (int r = 0; r < CHUNK_ROWS_THREADS; r++) sum += tile[r][threadIdx.x];
        partials[(size_t)blockIdx.y * C + c] = sum;
    }
}

static __global__ void add_partials_kernel(float *dst, const float *partials, int chunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sum = 0.0f;
    for (int k = 0; k < chunks; k++) sum += partials[(size_t)k * C + c];
    dst[c] += sum;
}

template <typename T>
void column_sums_add(float *dst, const T *src, int N, int C) {
    if (N == 0 || C == 0) return;
    int chunks = std::min(256, (N + 63) / 64);
    int rows_per_chunk = (N + chunks - 1) / chunks;
    chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
    float *partials = (float *)device_workspace(WS_REDUCE, (size_t)chunks * C * sizeof(float));
    LAUNCH(dim3(ceil_div(C, 32), chunks), dim3(32, CHUNK_ROWS_THREADS), 0, device_stream(),
           column_partials_kernel<T>)(partials, src, N, C, rows_per_chunk);
    CHECK_LAUNCH("column_partials_kernel");
    LAUNCH(ceil_div(C, 128), 128, 0, device_stream(), add_partials_kernel)(dst, partials, chunks, C);
    CHECK_LAUNCH("add_partials_kernel");
}

template <typename D, typename S>
static __global__ void scatter_rows_kernel(D *dst, const S *src, const int *order, const int *run_start,
                                           const int *run_key, int C, int accumulate) {
    int run = blockIdx.x;
    int begin = run_start[run], end = run_start[run + 1];
    D *row = dst + (size_t)run_key[run] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int i = begin; i < end; i++) acc += to_float(src[(size_t)order[i] * C + c]);
        row[c] = from_float<D>(accumulate ? to_float(row[c]) + acc : acc);
    }
}

template <typename D, typename S>
void scatter_rows(D *dst, const S *src, const int *host_keys, int N, int C, int skip_key, bool accumulate) {
    int max_key = -1;
    for (int n = 0; n < N; n++) max_key = std::max(max_key, host_keys[n]);
    if (max_key < 0) return;
    // Host scratch kept across calls: no allocation per micro-batch once it has grown.
    // upload = order[total] | run_start[n_runs + 1] | run_key[n_runs]
    static thread_local std::vector<int> count, next, keys, upload;
    count.assign((size_t)max_key + 2, 0);
    for (int n = 0; n < N; n++)
        if (host_keys[n] >= 0 && host_keys[n] != skip_key) count[host_keys[n] + 1]++;
    for (int k = 0; k <= max_key; k++) count[k + 1] += count[k];
    int total = count[max_key + 1];
    if (total == 0) return;
    upload.assign((size_t)total, 0);
    next.assign(count.begin(), count.end() - 1);
    for (int n = 0; n < N; n++)
        if (host_keys[n] >= 0 && host_keys[n] != skip_key) upload[next[host_keys[n]]++] = n;
    keys.clear();
    for (int k = 0; k <= max_key; k++)
        if (count[k + 1] > count[k]) {
            upload.push_back(count[k]);
            keys.push_back(k);
        }
    int n_runs = (int)keys.size();
    upload.push_back(total);
    upload.insert(upload.end(), keys.begin(), keys.end());
    int *d = (int *)device_workspace(WS_SCATTER, upload.size() * sizeof(int));
    device_upload(d, upload.data(), upload.size() * sizeof(int));
    LAUNCH(n_runs, 128, 0, device_stream(), scatter_rows_kernel<D, S>)(dst, src, d, d + total, d + total + n_runs + 1,
                                                                       C, accumulate ? 1 : 0);
    CHECK_LAUNCH("scatter_rows_kernel");
}

template void column_sums_add<float>(float *, const float *, int, int);
template void column_sums_add<f16>(float *, const f16 *, int, int);
template void column_sums_add<bf16>(float *, const bf16 *, int, int);
template void scatter_rows<float, float>(float *, const float *, const int *, int, int, int, bool);
template void scatter_rows<float, f16>(float *, const f16 *, const int *, int, int, int, bool);
template void scatter_rows<float, bf16>(float *, const bf16 *, const int *, int, int, int, bool);
template void scatter_rows<f16, f16>(f16 *, const f16 *, const int *, int, int, int, bool);
template void scatter_rows<bf16, bf16>(bf16 *, const bf16 *, const int *, int, int, int, bool);

}  // namespace CUDA_NS
