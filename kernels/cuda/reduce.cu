// Deterministic reductions shared by several ops (no float atomics: docs/ARCHITECTURE.md §8).
//   column_sums_add: dst[c] += sum_n src[n,c]. Rows are cut into chunks; each block sums
//     its chunk for 32 columns in a fixed order, a second kernel adds the chunks in order.
//   scatter_rows: dst[key[n],:] (+)= sum over the rows n with that key, in increasing n.
//     The keys are on the host (the ids it already holds: nothing is downloaded): they are
//     sorted there (counting sort, stable) and the plan is uploaded asynchronously. The work
//     is spread over (piece of a key's rows, 128 columns) buckets: a key with few rows is
//     summed by one bucket per column group straight into its row; a key with many rows is
//     split into pieces whose partial rows a second kernel adds in order. No two threads
//     write the same element and every sum has a fixed order: deterministic, no atomics.
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

int column_chunks(int N, int *rows_per_chunk) {
    int chunks = std::min(256, (N + 63) / 64);
    *rows_per_chunk = (N + chunks - 1) / chunks;
    return (N + *rows_per_chunk - 1) / *rows_per_chunk;
}

void add_column_partials(float *dst, const float *partials, int chunks, int C) {
    LAUNCH(ceil_div(C, 128), 128, 0, device_stream(), add_partials_kernel)(dst, partials, chunks, C);
    CHECK_LAUNCH("add_partials_kernel");
}

template <typename T>
void column_sums_add(float *dst, const T *src, int N, int C) {
    if (N == 0 || C == 0) return;
    int rows_per_chunk, chunks = column_chunks(N, &rows_per_chunk);
    float *partials = (float *)device_workspace(WS_REDUCE, (size_t)chunks * C * sizeof(float));
    LAUNCH(dim3(ceil_div(C, 32), chunks), dim3(32, CHUNK_ROWS_THREADS), 0, device_stream(),
           column_partials_kernel<T>)(partials, src, N, C, rows_per_chunk);
    CHECK_LAUNCH("column_partials_kernel");
    add_column_partials(dst, partials, chunks, C);
}

// Buckets of (piece, 128 columns): a piece is up to PIECE_ROWS consecutive rows of one key's
// run in the sorted order. A key whose run is one piece is written straight into dst; the
// pieces of a longer run (the [MASK] id, a segment, a position over a big batch) each write
// a partial row, which finish_split_runs_kernel adds up in piece order.
static const int PIECE_ROWS = 32, SCATTER_COLUMNS = 128;

template <typename D, typename S>
static __global__ void scatter_pieces_kernel(D *dst, float *partials, const S *src, const int *order,
                                             const int *piece_begin, const int *piece_target, int C, int accumulate) {
    int piece = blockIdx.x, c = blockIdx.y * SCATTER_COLUMNS + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int i = piece_begin[piece]; i < piece_begin[piece + 1]; i++) acc += to_float(src[(size_t)order[i] * C + c]);
    int target = piece_target[piece];
    if (target < 0) {
        partials[(size_t)(-target - 1) * C + c] = acc;
    } else {
        D *row = dst + (size_t)target * C;
        row[c] = from_float<D>(accumulate ? to_float(row[c]) + acc : acc);
    }
}

template <typename D>
static __global__ void finish_split_runs_kernel(D *dst, const float *partials, const int *run_key,
                                                const int *run_first, int C, int accumulate) {
    int run = blockIdx.x, c = blockIdx.y * SCATTER_COLUMNS + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int k = run_first[run]; k < run_first[run + 1]; k++) acc += partials[(size_t)k * C + c];
    D *row = dst + (size_t)run_key[run] * C;
    row[c] = from_float<D>(accumulate ? to_float(row[c]) + acc : acc);
}

size_t scatter_workspace_bytes(int N, int C) {
    size_t ints = 4 * (size_t)N + 8, partial_rows = 2 * (size_t)N / PIECE_ROWS + 1;
    return ints * sizeof(int) + 16 + partial_rows * C * sizeof(float);
}

template <typename D, typename S>
void scatter_rows(D *dst, const S *src, const int *host_keys, int N, int C, int skip_key, bool accumulate) {
    int max_key = -1;
    for (int n = 0; n < N; n++) max_key = std::max(max_key, host_keys[n]);
    if (max_key < 0 || C == 0) return;
    // Host scratch kept across calls: no allocation per micro-batch once it has grown.
    // plan = order[total] | piece_begin[pieces + 1] | piece_target[pieces] | run_key[split] |
    //        run_first[split + 1]; piece_target = dst row, or -(partial row + 1) in a split run.
    static thread_local std::vector<int> count, next, plan, begin, target, split_key, split_first;
    count.assign((size_t)max_key + 2, 0);
    for (int n = 0; n < N; n++)
        if (host_keys[n] >= 0 && host_keys[n] != skip_key) count[host_keys[n] + 1]++;
    for (int k = 0; k <= max_key; k++) count[k + 1] += count[k];
    int total = count[max_key + 1];
    if (total == 0) return;
    plan.assign((size_t)total, 0);
    next.assign(count.begin(), count.end() - 1);
    for (int n = 0; n < N; n++)
        if (host_keys[n] >= 0 && host_keys[n] != skip_key) plan[next[host_keys[n]]++] = n;
    begin.clear();
    target.clear();
    split_key.clear();
    split_first.assign(1, 0);
    for (int k = 0; k <= max_key; k++) {
        int first = count[k], len = count[k + 1] - first;
        if (len == 0) continue;
        if (len <= PIECE_ROWS) {
            begin.push_back(first);
            target.push_back(k);
            continue;
        }
        for (int at = first; at < first + len; at += PIECE_ROWS) {
            begin.push_back(at);
            target.push_back(-(split_first.back() + 1 + (at - first) / PIECE_ROWS));
        }
        split_key.push_back(k);
        split_first.push_back(split_first.back() + (len + PIECE_ROWS - 1) / PIECE_ROWS);
    }
    int pieces = (int)begin.size(), split = (int)split_key.size();
    begin.push_back(total);
    plan.insert(plan.end(), begin.begin(), begin.end());
    plan.insert(plan.end(), target.begin(), target.end());
    plan.insert(plan.end(), split_key.begin(), split_key.end());
    plan.insert(plan.end(), split_first.begin(), split_first.end());
    size_t plan_bytes = (plan.size() * sizeof(int) + 15) / 16 * 16;
    char *ws = (char *)device_workspace(WS_SCATTER, plan_bytes + (size_t)split_first.back() * C * sizeof(float));
    int *d = (int *)ws;
    float *partials = (float *)(ws + plan_bytes);
    // No host synchronization: the plan goes up through pinned staging, in stream order.
    device_upload_async(d, plan.data(), plan.size() * sizeof(int));
    const int *d_begin = d + total, *d_target = d_begin + pieces + 1, *d_split_key = d_target + pieces,
              *d_split_first = d_split_key + split;
    unsigned column_groups = ceil_div(C, SCATTER_COLUMNS);
    LAUNCH(dim3(pieces, column_groups), SCATTER_COLUMNS, 0, device_stream(), scatter_pieces_kernel<D, S>)(
        dst, partials, src, d, d_begin, d_target, C, accumulate ? 1 : 0);
    CHECK_LAUNCH("scatter_pieces_kernel");
    if (split)
        LAUNCH(dim3(split, column_groups), SCATTER_COLUMNS, 0, device_stream(), finish_split_runs_kernel<D>)(
            dst, partials, d_split_key, d_split_first, C, accumulate ? 1 : 0);
    CHECK_LAUNCH("finish_split_runs_kernel");
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
