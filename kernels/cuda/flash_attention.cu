// Fused multi-head attention on tensor cores (flash-attention style) for FP16 and BF16
// activations, head sizes 32, 64 and 128, sequences of any length in memory linear in it;
// attention.cu sends FP32 and every other head size to its GEMM path. The math, the padding rule and the dropout element index are
// those of kernels/cpu/attention.c.
//
// Layouts: q, k and v are read straight from the QKV GEMM's output qkv[rows,3,NH,HS], the
// context is written as out[rows,NH,HS] (= [rows,C]); token i of sequence b is row b*T + i
// (padded, rows = B*T) or seq_offsets[b] + i (packed, rows = N_real: real tokens only).
// Sequence b's length L_b = seq_offsets[b+1] - seq_offsets[b] is read once per block from
// the offsets. The other saved tensors are
// lse[B,NH,T] (FP32: per query row, max + log(sum) of its scaled scores over real keys) and,
// with dropout and T <= 512, keep[B,NH,T,W] (W = attention_keep_words(T) 32-bit words per
// query row, two per 64-key tile in the order the forward draws them, keep_bit below: 1 where
// the forward kept the probability). Past 512 tokens that record would grow as T^2 (T / 8
// bytes per row): the forward keeps none and the backward draws the decisions again.
//
// Forward: a block is 4 warps on (64 queries, head h, sequence b); each warp holds 16
// queries as mma A fragments in registers. Tiles of 64 keys and values go through shared
// memory; S = q k^T / sqrt(HS) on tensor cores (mma m16n8k16, FP32 accumulate), then the
// online softmax in FP32: a running row maximum m and sum l, the accumulator rescaled by
// exp(m_old - m_new) when the maximum grows. The exponentials are base 2 (one ex2 of
// s log2(e) / sqrt(HS) - m log2(e) per score, a multiply-add folding the scale in). Padding
// keys get -inf (probability 0; only the sequence's last tile can hold any); tiles that
// start past the sequence's last real key are skipped. With a sliding window (window > 0:
// query i sees keys j with |i - j| <= window) or documents (doc_bounds: query i sees the keys
// of its own document) the keys outside get -inf too, and the key tiles no query of the
// block can see are skipped (fa_mask_tiles); the split backward's kernels skip the same
// tiles, and in the fused backward a key block skips the products of a query tile that sees
// none of its keys (it still keeps the cluster's barriers, and gives no dq partial). The
// masked instances (WIN) hold that code; BERT's plain rows run without it. The probabilities, zero where
// dropped by the keep decision of element ((b*NH + h)*T + i)*T + j (dropout_keep_word: one
// Philox call per lane for eight keys of a row when T % 8 == 0), are rounded to the
// activation type and multiplied by v on tensor cores: the S accumulator fragments are the A
// fragments of P v without leaving registers. The keep decisions go to `keep` as drawn, for
// the backward. out = acc / ((1 - p) l), the dropout scale once per row; lse = m + log l.
// Backward, where the device launches thread-block clusters (sm_90) and T <= 512: one kernel,
// in its own section below (flash_backward_fused_kernel). Otherwise, or with
// BERTPRE_ATTN_BACKWARD=split:
// delta_i = dout_i . out_i (= sum_j P'_ij dP'_ij, the softmax backward's row sum)
// in one small kernel, then two kernels that recompute P_ij = exp(S_ij - lse_i) from q and
// k: one per (64 queries, head, sequence) accumulating dq = dS k over the key tiles, then
// one per (64 keys, ...) accumulating dv = P'^T dout and dk = dS^T q over all query tiles,
// with dS = P (dropout_backward(dP') - delta) / sqrt(HS), dP' = dout v^T. Each gradient is
// summed by exactly one warp in a fixed order: deterministic, no float atomics. Both read
// the forward's keep bits, or past T = 512 (REDRAW) draw them again: the dq kernel as the
// forward does (a lane's word per key tile, shared within the quad), the dk/dv kernel one
// word per thread into shared memory with the query tile.
#include <type_traits>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cuda/cluster.cuh"
#include "kernels/cuda/copy_async.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/sfu.cuh"

namespace CUDA_NS {

// Every loop over fragments runs a constant number of times and must be unrolled, so that
// the fragment arrays stay in registers.
// A loop that must not be unrolled (FA_ONCE), so that its iterations' registers are reused.
#ifdef BERTPRE_CUDA_EMULATION
#define FA_UNROLL
#define FA_ONCE
#else
#define FA_UNROLL _Pragma("unroll")
#define FA_ONCE _Pragma("unroll 1")
#endif

// Blocks per multiprocessor that the compiler must fit each kernel's registers to
// (__launch_bounds__'s second argument; 1 leaves the compiler free), settable by a build
// (-DFA_KV_MIN_BLOCKS=3) to compare occupancy against spills on a GPU. The forward at 4
// (128 registers at head size 64, 16 bytes spilled, against 163 unbounded; 4 blocks' 37 KB
// of shared memory fit) is not yet timed. On an H100
// (docs/GPU-RESULTS.md) 3 for the dq kernel (168 registers instead of 208, 12 bytes
// spilled) took the backward from 17.0 to 16.3 ms per BERT-large micro-batch at seq 128;
// 3 for the dk/dv kernel too (464 bytes spilled) made it slower, 18.4 ms, when it still
// took a query tile at once. Since it takes the tile in two halves it needs 220 registers
// unbounded and spills 92 bytes at 3 blocks: not yet measured. The bounds apply up to head
// size 64: at 128 the fragments alone need more registers (fa_min_blocks).
#ifndef FA_Q_MIN_BLOCKS
#define FA_Q_MIN_BLOCKS 3
#endif
#ifndef FA_FWD_MIN_BLOCKS
#define FA_FWD_MIN_BLOCKS 4
#endif
#ifndef FA_KV_MIN_BLOCKS
#define FA_KV_MIN_BLOCKS 1
#endif
// The forward's shared-memory carveout: the largest (kernel_shared_memory) unless a build sets
// FA_FWD_CARVEOUT to a percentage of the SM's shared memory (a variant to time: 67 holds the
// 4 blocks of 38 KB at head size 64 and leaves the rest to L1; the driver rounds it up to a
// size the SM supports).
#ifndef FA_FWD_CARVEOUT
#define FA_FWD_CARVEOUT -1
#endif

template <int HS>
__host__ __device__ constexpr int fa_min_blocks(int wanted) {
    return HS <= 64 ? wanted : 1;
}

static const int FA_ROWS = 64;  // queries or keys per block and per tile: 4 warps x 16
static const int FA_THREADS = 128;
static const int FA_PAD = 8;  // shared rows padded by 16 bytes (rows stay 16-byte aligned), so fragment loads spread over banks

template <typename Act, int HS>
using fa_tile = Act[FA_ROWS][HS + FA_PAD];

static_assert(FA_ROWS == 64, "a key tile's keep bits are the two words attention_keep_words gives per 64 keys");
static const float FA_LOG2E = 1.4426950408889634f;

// Two tiles of 64 rows x HS columns each, copied asynchronously into shared memory: rows
// row0 .. row0 + 63 of a and of b (row 0 of each head, rows stride_a / stride_b elements
// apart), rows at or past T zero. Rows and head starts are 16-byte aligned (HS and the
// strides are multiples of 8 elements). The caller commits the group.
template <typename Act, int HS>
__device__ __forceinline__ void copy_tiles(fa_tile<Act, HS> &dst_a, const Act *a, size_t stride_a,
                                           fa_tile<Act, HS> &dst_b, const Act *b, size_t stride_b, int row0, int T) {
    constexpr int PIECES = HS / 8;                             // 16-byte pieces per row
    constexpr int PER_THREAD = FA_ROWS * PIECES / FA_THREADS;  // 2, 4 or 8
    FA_UNROLL for (int k = 0; k < PER_THREAD; k++) {
        int idx = threadIdx.x + k * FA_THREADS, r = idx / PIECES, c = idx % PIECES * 8;
        bool real = row0 + r < T;
        size_t row = real ? (size_t)(row0 + r) : 0;  // a valid address where nothing is read
        copy_async<16>(&dst_a[r][c], a + row * stride_a + c, real);
        copy_async<16>(&dst_b[r][c], b + row * stride_b + c, real);
    }
}

// Shared buffers per tile: two (the next tile's copies in flight while this one is used)
// where they fit the 48 KB of static shared memory, one at HS = 128.
template <int HS>
__host__ __device__ constexpr int fa_stages() {
    return HS <= 64 ? 2 : 1;
}

// The tile loop of every kernel here, over tiles 0 .. n - 1 through S buffers: fill(i, buf)
// issues and commits tile i's copies into buffer buf (the caller has filled tile 0 into
// buffer 0 already), use(i, buf) computes on it. The barrier before use makes the tile
// visible to the whole block; the one after keeps its buffer until every warp is done.
// fa_pipeline_wait is step i's copy half: the next tile's copy issued (two buffers) or this
// tile's (one buffer, after the first), then this thread's copies of tile i waited for.
template <int S, typename Fill>
__device__ __forceinline__ void fa_pipeline_wait(int i, int n, Fill fill) {
    if (S == 2 && i + 1 < n) {
        fill(i + 1, (i + 1) % 2);
        copy_async_wait<1>();
    } else {
        if (S == 1 && i > 0) fill(i, 0);
        copy_async_wait<0>();
    }
}

template <int S, typename Fill, typename Use>
__device__ __forceinline__ void fa_pipeline(int n, Fill fill, Use use) {
    for (int i = 0; i < n; i++) {
        fa_pipeline_wait<S>(i, n, fill);
        __syncthreads();
        use(i, i % S);
        __syncthreads();
    }
}

// The A fragments of 16 rows x HS (rows `stride` elements apart; rows >= valid are zero).
template <typename Act, int HS>
__device__ __forceinline__ void load_a_rows(uint32_t (&a)[HS / 16][4], const Act *src, size_t stride, int valid) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    FA_UNROLL for (int kk = 0; kk < HS / 16; kk++)
        FA_UNROLL for (int r = 0; r < 4; r++) {
            int row = g + 8 * (r & 1), col = kk * 16 + 2 * t + 8 * (r >> 1);
            a[kk][r] = row < valid ? load_pair(src + (size_t)row * stride + col) : 0u;
        }
}

// s[16 x 8 NT] = A[16 x HS] rows^T, rows the 8 NT rows of a shared tile [64 x HS] from row0
// on (all 64 by default); s in C-fragment layout, NT blocks of 8 columns. One ldmatrix gives
// the B fragments of two column blocks: matrices (block nt, columns kk*16 .. +7), (nt,
// +8 .. +15), (nt + 1, ...), (nt + 1, ...).
template <typename Act, int HS, int NT = 8>
__device__ __forceinline__ void mma_rows_t(float (&s)[NT][4], const uint32_t (&a)[HS / 16][4],
                                           const fa_tile<Act, HS> &rows, int row0 = 0) {
    static_assert(NT % 2 == 0 && NT <= 8, "pairs of 8-row blocks within a tile");
    int lane = threadIdx.x % 32, m = lane / 8, r = lane % 8;
    FA_UNROLL for (int nt = 0; nt < NT; nt++)
        FA_UNROLL for (int i = 0; i < 4; i++) s[nt][i] = 0.0f;
    FA_UNROLL for (int kk = 0; kk < HS / 16; kk++)
        FA_UNROLL for (int nt = 0; nt < NT; nt += 2) {
            uint32_t b[4];
            ldmatrix_x4<false>(b, &rows[row0 + (nt + m / 2) * 8 + r][kk * 16 + m % 2 * 8]);
            const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
            mma_m16n8k16<Act>(s[nt], a[kk], b0);
            mma_m16n8k16<Act>(s[nt + 1], a[kk], b1);
        }
}

// acc[16 x HS] += p[16 x 8 NT] rows, p in C-fragment layout (as mma_rows_t leaves it),
// rounded to Act into A fragments; rows the 8 NT rows of a shared tile [64 x HS] from row0
// on (k = its row). One transposed ldmatrix gives the B fragments of two 8-column blocks:
// matrices (rows kt*16 .. +7, block nd), (rows +8 .. +15, nd), (.., nd + 1), (.., nd + 1).
template <typename Act, int HS>
__device__ __forceinline__ void mma_a_rows(float (&acc)[HS / 8][4], const uint32_t (&a)[4], const fa_tile<Act, HS> &rows,
                                           int row0);
template <typename Act, int HS, int NT = 8>
__device__ __forceinline__ void mma_p_rows(float (&acc)[HS / 8][4], const float (&p)[NT][4],
                                           const fa_tile<Act, HS> &rows, int row0 = 0) {
    FA_UNROLL for (int kt = 0; kt < NT / 2; kt++) {
        uint32_t a[4] = {pack_pair_float<Act>(p[2 * kt][0], p[2 * kt][1]),
                         pack_pair_float<Act>(p[2 * kt][2], p[2 * kt][3]),
                         pack_pair_float<Act>(p[2 * kt + 1][0], p[2 * kt + 1][1]),
                         pack_pair_float<Act>(p[2 * kt + 1][2], p[2 * kt + 1][3])};
        mma_a_rows<Act, HS>(acc, a, rows, row0 + kt * 16);
    }
}
// acc[16 x HS] += A[16 x 16] rows[row0 .. row0 + 15] (A as mma A fragments), the step of
// mma_p_rows for 16 of its k.
template <typename Act, int HS>
__device__ __forceinline__ void mma_a_rows(float (&acc)[HS / 8][4], const uint32_t (&a)[4], const fa_tile<Act, HS> &rows,
                                           int row0) {
    int lane = threadIdx.x % 32, m = lane / 8, r = lane % 8;
    FA_UNROLL for (int nd = 0; nd < HS / 8; nd += 2) {
        uint32_t b[4];
        ldmatrix_x4<true>(b, &rows[row0 + m % 2 * 8 + r][(nd + m / 2) * 8]);
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        mma_m16n8k16<Act>(acc[nd], a, b0);
        mma_m16n8k16<Act>(acc[nd + 1], a, b1);
    }
}

// Rows g and g + 8 of a warp's 16 x HS FP32 accumulator, as Act, to dst (row 0 of the
// warp's rows, rows `stride` apart), rows >= valid left out.
template <typename Act, int HS>
__device__ __forceinline__ void store_rows(Act *dst, size_t stride, const float (&acc)[HS / 8][4], int valid,
                                           float scale0, float scale1) {
    int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    FA_UNROLL for (int r = 0; r < 2; r++) {
        int row = g + 8 * r;
        if (row >= valid) continue;
        float s = r ? scale1 : scale0;
        FA_UNROLL for (int nd = 0; nd < HS / 8; nd++) {
            uint32_t v = pack_pair_float<Act>(acc[nd][2 * r] * s, acc[nd][2 * r + 1] * s);
            store_pair(dst + (size_t)row * stride + nd * 8 + 2 * t, v);
        }
    }
}

// What every kernel here derives from its block: sequence b, head h, the sequence's length
// (its real keys) and its query rows (T padded, len packed), its first token row, the head's
// q, k and v (row 0, rows `stride` apart), the dropout element base and scale, and the
// lane's position in the fragments (group g = lane / 4, t = lane % 4).
template <typename Act>
struct fa_block {
    int b, h, C, g, t, len, rows;
    size_t stride, row0;
    const Act *q, *k, *v;
    uint64_t head_row;  // the dropout element of (query i, key j) is (head_row + i) * T + j
    float keep_scale;
    const int *bounds;  // the sequence's rows' documents (doc_bounds from its first row), or null
    __device__ fa_block(const Act *qkv, const int *seq_offsets, const int *doc_bounds, int packed, int T, int NH,
                        int HS, dropout_t dropout) {
        b = blockIdx.z, h = blockIdx.y, C = NH * HS;
        g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
        stride = 3 * (size_t)C;
        len = seq_offsets[b + 1] - seq_offsets[b];
        rows = packed ? len : T;
        row0 = packed ? (size_t)seq_offsets[b] : (size_t)b * T;
        q = qkv + row0 * stride + (size_t)h * HS, k = q + C, v = q + 2 * C;
        head_row = ((uint64_t)b * NH + h) * T;
        keep_scale = dropout.p > 0.0f ? 1.0f / (1.0f - dropout.p) : 1.0f;
        bounds = doc_bounds ? doc_bounds + 2 * row0 : nullptr;
    }
};

// A sliding window (window > 0, ModernBERT's local layers): query i sees key j only when
// |i - j| <= window. Documents (doc_bounds, backend.h): position i sees only the keys of its
// own, [lo_i, hi_i); the documents are consecutive runs, so over rows a0 .. a1 the least lo
// is a0's and the greatest hi is a1's, and the relation is symmetric (a key's pair says
// which queries see it). fa_mask_tiles gives the tiles of 64 among n rows that the rows a0 ..
// a1 can meet: the first and the count (all of them without a window or documents); the
// kernels skip the others, and mask what lies outside within the tiles they take.
__device__ __forceinline__ void fa_mask_tiles(int a0, int a1, int window, const int *bounds, int n, int &first,
                                              int &count) {
    first = 0, count = (n + FA_ROWS - 1) / FA_ROWS;
    if ((window <= 0 && !bounds) || count == 0) return;
    int lo = 0, hi = n - 1;
    if (window > 0) lo = max(lo, a0 - window), hi = min(hi, a1 + window);
    if (bounds) lo = max(lo, bounds[2 * a0]), hi = min(hi, bounds[2 * a1 + 1] - 1);
    if (lo > hi) count = 0;
    else first = lo / FA_ROWS, count = hi / FA_ROWS - first + 1;
}
// What a lane's two fragment rows, r0 + g and r0 + g + 8 (valid below `valid`), see of the n
// rows of the other side: one range [lo, hi) each, their document (all n without documents)
// within the window; none for a row past `valid`. Masked instances (WIN) only, where a score
// then costs two compares; the others hold nothing and see every key below the length.
// Forward and dq: the query rows' keys (valid = the query rows, n = len); dk/dv: the keys'
// queries (valid = len, n = the query rows), the relation being symmetric.
template <bool WIN>
struct fa_rows_seen {
    int lo[2], hi[2];
    __device__ __forceinline__ fa_rows_seen(const int *bounds, int r0, int g, int valid, int n, int window) {
        if constexpr (WIN)
            FA_UNROLL for (int r = 0; r < 2; r++) {
                int row = r0 + g + 8 * r;
                lo[r] = 0, hi[r] = 0;
                if (row < valid) {
                    lo[r] = bounds ? bounds[2 * row] : 0;
                    hi[r] = bounds ? min(bounds[2 * row + 1], n) : n;
                    if (window > 0) lo[r] = max(lo[r], row - window), hi[r] = min(hi[r], row + window + 1);
                }
            }
    }
    __device__ __forceinline__ bool sees(int r, int j) const {
        if constexpr (WIN) return j >= lo[r] && j < hi[r];
        else return true;
    }
    // Whether query row r sees key j of a sequence of len keys: its range, or unmasked every
    // real key.
    __device__ __forceinline__ bool sees_key(int r, int j, int len) const {
        if constexpr (WIN) return sees(r, j);
        else return j < len;
    }
};

// The key tile at k0 (keys and values; zeros past the sequence's length) into shared
// buffers, asynchronously, as one committed group.
template <typename Act, int HS>
__device__ __forceinline__ void fill_keys(fa_tile<Act, HS> &ks, fa_tile<Act, HS> &vs, const fa_block<Act> &f,
                                          int k0) {
    copy_tiles<Act, HS>(ks, f.k, f.stride, vs, f.v, f.stride, k0, f.len);
    copy_async_commit();
}

// Keep bits, stored as the forward draws them. A query row's keep bits of the key tile at
// k0 are its words k0 / 32 and k0 / 32 + 1 (attention_keep_words gives two per 64 keys): key
// k0 + j is bit 8 (j / 16) + j % 8 of word k0 / 32 + (j / 8) % 2. That is, word w's byte m
// is key block (8 keys) 2 m + w, as one Philox call decides a block's eight keys in order.
// keep_bit reads key j (0 .. 63) of a row's two words.
__device__ __forceinline__ unsigned keep_bit(const uint32_t (&words)[2], int j) {
    return words[j / 8 % 2] >> (j / 16 * 8 + j % 8) & 1u;
}

// The lane's word of the key tile, as drawn: word t / 2 of row g + 8 (t % 2) (above), e the
// dropout element of (that row, key k0 + 8 (t / 2)), so byte m is the decisions of elements
// e + 16 m .. e + 16 m + 7. When every row starts on a group of eight (T % 8 == 0) a byte is
// one Philox call, four per lane and tile, and no lane idles while another draws; otherwise
// a byte straddles two groups, each drawn by a call that is not unrolled.
__device__ __forceinline__ uint32_t dropout_keep_word(const dropout_schedule &d, uint64_t e, int T) {
    uint32_t word = 0;
    if (T % 8 == 0) {
        FA_UNROLL for (int m = 0; m < 4; m++) word |= dropout_keep8_scheduled(&d, (e >> 3) + 2 * m) << 8 * m;
        return word;
    }
    FA_ONCE for (int c = 0; c < 8; c++) {  // byte c / 2: the group holding its first element, then the next
        uint64_t x = e + 16 * (c / 2);
        unsigned bits = dropout_keep8_scheduled(&d, (x >> 3) + c % 2);
        bits = c % 2 ? bits << (8 - (x & 7)) : bits >> (x & 7);
        word |= (bits & 255u) << 8 * (c / 2);
    }
    return word;
}

// A warp's keep bits for one key tile as a lane holds them: bits[r][w] is word w of row
// g + 8 r (the layout above). The forward gathers them from the quad's four drawn words;
// the backward loads them (keep_bits_load). keep_bits_of gives the lane's four decisions of
// key block nt in an S fragment: (row g, keys col and col + 1) as bits 0-1 and (row g + 8,
// the same keys) as bits 2-3, col = 8 nt + 2 t.
__device__ __forceinline__ unsigned keep_bits_of(const uint32_t (&bits)[2][2], int nt, int t) {
    int shift = nt / 2 * 8 + 2 * t;
    return (bits[0][nt % 2] >> shift & 3u) | (bits[1][nt % 2] >> shift & 3u) << 2;
}
// The quad's drawn words (lane t: word t / 2 of row g + 8 (t % 2)) into every lane's
// bits[2][2]: four shuffles within the quad (width 4: the source lane is a constant). Every
// lane of the warp calls it.
__device__ __forceinline__ void keep_bits_gather(uint32_t (&bits)[2][2], uint32_t word) {
    FA_UNROLL for (int r = 0; r < 2; r++)
        FA_UNROLL for (int w = 0; w < 2; w++) bits[r][w] = __shfl_sync(0xffffffffu, word, 2 * w + r, 4);
}
// Where the lane's drawn words go in keep (row 0 of the warp's 16 at keep_row): word t / 2 of
// row g + 8 (t % 2) of key tile 0; NULL for rows >= valid. keep_bits_store stores the word
// of the key tile at k0 there: one store per lane and tile, as drawn.
__device__ __forceinline__ uint32_t *keep_bits_dest(uint32_t *keep, uint64_t keep_row, int valid, int words, int g,
                                                    int t) {
    int row = g + 8 * (t % 2);
    return row < valid ? keep + (keep_row + row) * words + t / 2 : nullptr;
}
__device__ __forceinline__ void keep_bits_store(uint32_t *dest, uint32_t word, int k0) {
    if (dest) dest[k0 / 32] = word;
}
// The lane's bits of rows g, g + 8 of the key tile at k0 from keep (zero for rows >= valid).
__device__ __forceinline__ void keep_bits_load(uint32_t (&bits)[2][2], const uint32_t *keep, uint64_t keep_row,
                                               int valid, int words, int k0, int g) {
    FA_UNROLL for (int r = 0; r < 2; r++)
        FA_UNROLL for (int w = 0; w < 2; w++)
            bits[r][w] = g + 8 * r < valid ? keep[(keep_row + g + 8 * r) * words + k0 / 32 + w] : 0u;
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <typename Act, int HS, bool WIN>
static __global__ void __launch_bounds__(FA_THREADS, fa_min_blocks<HS>(FA_FWD_MIN_BLOCKS))
    flash_forward_kernel(Act *out, float *lse, uint32_t *keep_out, const Act *qkv, const int *seq_offsets,
                         const int *doc_bounds, int packed, int T, int NH, float scale, int window_arg,
                         dropout_t dropout, dropout_schedule draws) {
    const int window = WIN ? window_arg : 0;  // 0 unless the masked instantiation: no masking code in BERT's
    constexpr int S = fa_stages<HS>();
    __shared__ __align__(16) fa_tile<Act, HS> ks[S], vs[S];
    fa_block<Act> f(qkv, seq_offsets, doc_bounds, packed, T, NH, HS, dropout);
    if ((int)blockIdx.x * FA_ROWS >= f.rows) return;  // the whole block: no query row here
    const int g = f.g, t = f.t, words = attention_keep_words(T), rows = f.rows;
    const float scale2 = scale * FA_LOG2E;  // scores and maxima stay unscaled; exponents in base 2
    int r0 = blockIdx.x * FA_ROWS + threadIdx.x / 32 * 16;  // this warp's first query
    int first, tiles;  // the key tiles the block's queries see
    fa_mask_tiles(blockIdx.x * FA_ROWS, min((int)blockIdx.x * FA_ROWS + FA_ROWS - 1, rows - 1), window,
                  WIN ? f.bounds : nullptr, f.len, first, tiles);
    auto fill = [&](int i, int buf) { fill_keys<Act, HS>(ks[buf], vs[buf], f, (first + i) * FA_ROWS); };
    if (tiles > 0) fill(0, 0);
    uint32_t qa[HS / 16][4];
    load_a_rows<Act, HS>(qa, f.q + (size_t)r0 * f.stride, f.stride, rows - r0);
    const fa_rows_seen<WIN> seen_by(f.bounds, r0, g, rows, f.len, window);
    float acc[HS / 8][4] = {}, row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    // the dropout element of (the row this lane draws for, key 8 (t / 2)) of key tile 0
    const uint64_t draw_e = (f.head_row + r0 + g + 8 * (t % 2)) * T + 8 * (t / 2);
    uint32_t *keep_dest =  // none where the backward draws again (keep_out NULL)
        dropout.p > 0.0f && keep_out ? keep_bits_dest(keep_out, f.head_row + r0, rows - r0, words, g, t) : nullptr;
    fa_pipeline<S>(tiles, fill, [&](int i, int buf) {
        if (r0 >= rows) return;  // the whole warp: no query of it is real
        const int k0 = (first + i) * FA_ROWS;
        // This tile's keep word, drawn first, so that its Philox rounds can interleave with the
        // products.
        uint32_t drawn = 0;
        if (dropout.p > 0.0f) drawn = dropout_keep_word(draws, draw_e + k0, T);
        float s[8][4];
        mma_rows_t<Act, HS>(s, qa, ks[buf]);
        if (WIN || k0 + FA_ROWS > f.len) {  // only the last tile has padding keys; a window or a document cuts any
            FA_UNROLL for (int nt = 0; nt < 8; nt++)
                FA_UNROLL for (int i = 0; i < 4; i++) {
                    int key = k0 + nt * 8 + 2 * t + (i & 1);
                    bool seen = seen_by.sees_key(i >> 1, key, f.len);
                    s[nt][i] = seen ? s[nt][i] : -INFINITY;
                }
        }
        float tile_max[2] = {-INFINITY, -INFINITY}, base[2];
        FA_UNROLL for (int nt = 0; nt < 8; nt++)
            FA_UNROLL for (int i = 0; i < 4; i++) tile_max[i >> 1] = fmaxf(tile_max[i >> 1], s[nt][i]);
        FA_UNROLL for (int r = 0; r < 2; r++) {
            float new_max = fmaxf(row_max[r], quad_max(tile_max[r]));
            base[r] = new_max == -INFINITY ? 0.0f : new_max * scale2;  // no real key yet: every exp is 0
            float alpha = sfu_exp2(fmaf(row_max[r], scale2, -base[r]));
            row_sum[r] *= alpha;
            FA_UNROLL for (int nd = 0; nd < HS / 8; nd++) acc[nd][2 * r] *= alpha, acc[nd][2 * r + 1] *= alpha;
            row_max[r] = new_max;
        }
        uint32_t bits[2][2];
        if (dropout.p > 0.0f) {
            keep_bits_gather(bits, drawn);
            keep_bits_store(keep_dest, drawn, k0);
        }
        // The probabilities, the row sums over all of them; dropped ones zero. The kept ones
        // are scaled by 1 / (1 - p) once per row at the end, with 1 / l.
        FA_UNROLL for (int nt = 0; nt < 8; nt++) {
            unsigned keep = dropout.p > 0.0f ? keep_bits_of(bits, nt, t) : 15u;
            FA_UNROLL for (int i = 0; i < 4; i += 2) {  // the pair of keys (col, col + 1) in row g + 8 (i / 2)
                float p0 = sfu_exp2(fmaf(s[nt][i], scale2, -base[i >> 1]));
                float p1 = sfu_exp2(fmaf(s[nt][i + 1], scale2, -base[i >> 1]));
                row_sum[i >> 1] += p0 + p1;
                s[nt][i] = keep >> i & 1u ? p0 : 0.0f;
                s[nt][i + 1] = keep >> (i + 1) & 1u ? p1 : 0.0f;
            }
        }
        mma_p_rows<Act, HS>(acc, s, vs[buf]);
    });
    if (r0 >= rows) return;
    float inv[2];
    FA_UNROLL for (int r = 0; r < 2; r++) {
        row_sum[r] = quad_sum(row_sum[r]);
        inv[r] = row_sum[r] > 0.0f ? 1.0f / row_sum[r] * f.keep_scale : 0.0f;
        int row = r0 + g + 8 * r;
        if (t == 0 && row < rows)
            lse[f.head_row + row] = row_sum[r] > 0.0f ? row_max[r] * scale + logf(row_sum[r]) : INFINITY;
    }
    store_rows<Act, HS>(out + (f.row0 + r0) * f.C + (size_t)f.h * HS, f.C, acc, rows - r0, inv[0], inv[1]);
}

// delta[b,h,i] = dout[b,i,h,:] . out[b,i,h,:] in FP32; one warp per row (packed: rows
// i < L_b only; the others are never read).
template <typename Act>
static __global__ void flash_delta_kernel(float *delta, const Act *dout, const Act *out, const int *seq_offsets,
                                          int packed, int B, int T, int NH, int HS) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T) return;
    int i = row % T, h = row / T % NH, b = row / (T * NH);
    if (packed && i >= seq_offsets[b + 1] - seq_offsets[b]) return;
    size_t at = ((packed ? (size_t)seq_offsets[b] : (size_t)b * T) + i) * NH * HS + (size_t)h * HS;
    float sum = 0.0f;
    for (int e = lane; e < HS; e += 32) sum += to_float(dout[at + e]) * to_float(out[at + e]);
    sum = warp_sum(sum);
    if (lane == 0) delta[row] = sum;
}

// dk and dv for 64 keys of one head, over every query tile.
template <typename Act, int HS, bool WIN, bool REDRAW>
static __global__ void __launch_bounds__(FA_THREADS, fa_min_blocks<HS>(FA_KV_MIN_BLOCKS))
    flash_backward_kv_kernel(Act *dqkv, const Act *dout, const Act *qkv, const float *lse, const float *delta,
                             const uint32_t *keep_bits, const int *seq_offsets, const int *doc_bounds, int packed,
                             int T, int NH, float scale, int window_arg, dropout_t dropout, dropout_schedule draws) {
    const int window = WIN ? window_arg : 0;
    constexpr int S = fa_stages<HS>();
    __shared__ __align__(16) fa_tile<Act, HS> qs[S], dos[S];
    __shared__ float lse_s[S][FA_ROWS], delta_s[S][FA_ROWS];
    __shared__ uint32_t keep_s[S][FA_ROWS][2];  // the query tile's keep bits of this block's 64 keys
    fa_block<Act> f(qkv, seq_offsets, doc_bounds, packed, T, NH, HS, dropout);
    const int g = f.g, t = f.t, k0 = blockIdx.x * FA_ROWS, words = attention_keep_words(T), rows = f.rows;
    if (k0 >= rows) return;  // the whole block: no row here
    const float scale2 = scale * FA_LOG2E;
    int r0 = k0 + threadIdx.x / 32 * 16;  // this warp's first key
    const Act *dO = dout + f.row0 * f.C + (size_t)f.h * HS;
    Act *dk = dqkv + f.row0 * f.stride + (size_t)f.h * HS + f.C, *dv = dk + f.C;
    if (k0 >= f.len) {  // only padding keys here (the padded layout): zero gradients
        for (int idx = threadIdx.x; idx < FA_ROWS * HS; idx += blockDim.x) {
            int row = k0 + idx / HS, e = idx % HS;
            if (row < rows) dk[(size_t)row * f.stride + e] = dv[(size_t)row * f.stride + e] = from_float<Act>(0.0f);
        }
        return;
    }
    // Query tile first + i (the tiles whose queries can see these keys): q and dout rows, and
    // per query lse, delta and the keep bits of this block's keys. Rows past the query rows
    // are zeros, lse and delta included: such a row's P is then 1 (or 0 outside a window) but
    // meets only zeros (its dout and q rows), so it adds exactly nothing. With documents the
    // queries that see a key are those of its document (the relation is symmetric).
    int first = 0, query_tiles = 0;  // the masked tiles (unmasked: all, counted where the loop starts)
    if constexpr (WIN) fa_mask_tiles(k0, min(k0 + FA_ROWS - 1, f.len - 1), window, f.bounds, rows, first, query_tiles);
    auto fill = [&](int i, int buf) {
        int q0 = i * FA_ROWS;
        if constexpr (WIN) q0 += first * FA_ROWS;
        copy_tiles<Act, HS>(qs[buf], f.q, f.stride, dos[buf], dO, f.C, q0, rows);
        for (int r = threadIdx.x; r < FA_ROWS; r += blockDim.x) {
            bool real = q0 + r < rows;
            size_t at = f.head_row + (real ? q0 + r : 0);
            copy_async<4>(&lse_s[buf][r], lse + at, real);
            copy_async<4>(&delta_s[buf][r], delta + at, real);
        }
        if (dropout.p > 0.0f)
            for (int r = threadIdx.x; r < 2 * FA_ROWS; r += blockDim.x) {  // one word per thread
                int query = q0 + r / 2;
                bool real = query < rows;
                if constexpr (REDRAW)  // word r % 2 of the query's row as the forward drew it
                    keep_s[buf][r / 2][r % 2] =
                        real ? dropout_keep_word(draws, (f.head_row + query) * T + k0 + 8 * (r % 2), T) : 0u;
                else
                    copy_async<4>(&keep_s[buf][r / 2][r % 2],
                                  keep_bits + (f.head_row + (real ? query : 0)) * words + k0 / 32 + r % 2, real);
            }
        copy_async_commit();
    };
    if (!WIN || query_tiles > 0) fill(0, 0);  // without a window, len > 0 here: a tile at least
    uint32_t ka[HS / 16][4], va[HS / 16][4];
    load_a_rows<Act, HS>(ka, f.k + (size_t)r0 * f.stride, f.stride, rows - r0);
    load_a_rows<Act, HS>(va, f.v + (size_t)r0 * f.stride, f.stride, rows - r0);
    bool ok[2];
    FA_UNROLL for (int r = 0; r < 2; r++) ok[r] = r0 + g + 8 * r < f.len;
    const fa_rows_seen<WIN> seen_by(f.bounds, r0, g, f.len, rows, window);  // the queries that see the keys
    float dk_acc[HS / 8][4] = {}, dv_acc[HS / 8][4] = {};
    fa_pipeline<S>(WIN ? query_tiles : (rows + FA_ROWS - 1) / FA_ROWS, fill, [&](int tile, int buf) {
        if (r0 >= rows) return;
        int tile0 = 0;  // the tile's first query (a window's only)
        if constexpr (WIN) tile0 = (first + tile) * FA_ROWS;
        // The query tile in two halves of 32, one after the other (not unrolled), so that
        // the products' accumulators take half the registers.
        FA_ONCE for (int q0 = 0; q0 < FA_ROWS; q0 += 32) {
            float st[4][4], dpt[4][4];  // S^T and dP'^T: rows keys, columns queries q0 .. q0 + 31
            mma_rows_t<Act, HS, 4>(st, ka, qs[buf], q0);
            mma_rows_t<Act, HS, 4>(dpt, va, dos[buf], q0);
            FA_UNROLL for (int nt = 0; nt < 4; nt++)
                FA_UNROLL for (int i = 0; i < 4; i++) {
                    int col = q0 + nt * 8 + 2 * t + (i & 1);
                    bool seen = WIN ? seen_by.sees(i >> 1, tile0 + col) : ok[i >> 1];
                    float p = seen ? sfu_exp2(fmaf(st[nt][i], scale2, -lse_s[buf][col] * FA_LOG2E)) : 0.0f;
                    float pd = p, dp = dpt[nt][i];
                    if (dropout.p > 0.0f && p != 0.0f) {
                        int key = r0 - k0 + g + 8 * (i >> 1);  // within the block's 64
                        bool keep = keep_bit(keep_s[buf][col], key);
                        pd = keep ? p * f.keep_scale : 0.0f;
                        dp = keep ? dp * f.keep_scale : 0.0f;
                    }
                    st[nt][i] = pd;
                    dpt[nt][i] = p * (dp - delta_s[buf][col]) * scale;
                }
            mma_p_rows<Act, HS, 4>(dv_acc, st, dos[buf], q0);
            mma_p_rows<Act, HS, 4>(dk_acc, dpt, qs[buf], q0);
        }
    });
    if (r0 >= rows) return;
    store_rows<Act, HS>(dk + (size_t)r0 * f.stride, f.stride, dk_acc, rows - r0, 1.0f, 1.0f);
    store_rows<Act, HS>(dv + (size_t)r0 * f.stride, f.stride, dv_acc, rows - r0, 1.0f, 1.0f);
}

// dq for 64 queries of one head, over the key tiles of the sequence.
template <typename Act, int HS, bool WIN, bool REDRAW>
static __global__ void __launch_bounds__(FA_THREADS, fa_min_blocks<HS>(FA_Q_MIN_BLOCKS))
    flash_backward_q_kernel(Act *dqkv, const uint32_t *keep, const Act *dout, const Act *qkv, const float *lse,
                            const float *delta, const int *seq_offsets, const int *doc_bounds, int packed, int T,
                            int NH, float scale, int window_arg, dropout_t dropout, dropout_schedule draws) {
    const int window = WIN ? window_arg : 0;
    constexpr int S = fa_stages<HS>();
    __shared__ __align__(16) fa_tile<Act, HS> ks[S], vs[S];
    fa_block<Act> f(qkv, seq_offsets, doc_bounds, packed, T, NH, HS, dropout);
    if ((int)blockIdx.x * FA_ROWS >= f.rows) return;  // the whole block: no query row here
    const int g = f.g, t = f.t, rows = f.rows;
    int r0 = blockIdx.x * FA_ROWS + threadIdx.x / 32 * 16;  // this warp's first query
    const Act *dO = dout + f.row0 * f.C + (size_t)f.h * HS;
    int first, tiles, words = attention_keep_words(T);  // the key tiles the block's queries see
    fa_mask_tiles(blockIdx.x * FA_ROWS, min((int)blockIdx.x * FA_ROWS + FA_ROWS - 1, rows - 1), window,
                  WIN ? f.bounds : nullptr, f.len, first, tiles);
    const fa_rows_seen<WIN> seen_by(f.bounds, r0, g, rows, f.len, window);
    const float scale2 = scale * FA_LOG2E;
    auto fill = [&](int i, int buf) { fill_keys<Act, HS>(ks[buf], vs[buf], f, (first + i) * FA_ROWS); };
    if (tiles > 0) fill(0, 0);
    uint32_t qa[HS / 16][4], da[HS / 16][4];
    load_a_rows<Act, HS>(qa, f.q + (size_t)r0 * f.stride, f.stride, rows - r0);
    load_a_rows<Act, HS>(da, dO + (size_t)r0 * f.C, f.C, rows - r0);
    float row_lse[2], row_delta[2];
    FA_UNROLL for (int r = 0; r < 2; r++) {
        int row = r0 + g + 8 * r;
        row_lse[r] = row < rows ? lse[f.head_row + row] * FA_LOG2E : INFINITY;  // base 2
        row_delta[r] = row < rows ? delta[f.head_row + row] : 0.0f;
    }
    float dq_acc[HS / 8][4] = {};
    fa_pipeline<S>(tiles, fill, [&](int i, int buf) {
        if (r0 >= rows) return;
        const int k0 = (first + i) * FA_ROWS;
        uint32_t bits[2][2];  // the forward's keep bits of rows g, g + 8: loads in flight during the products
        if (dropout.p > 0.0f) {
            if constexpr (REDRAW)  // drawn again as the forward drew them: the lane's word, then the quad's
                keep_bits_gather(bits, dropout_keep_word(draws, (f.head_row + r0 + g + 8 * (t % 2)) * T + k0 + 8 * (t / 2), T));
            else
                keep_bits_load(bits, keep, f.head_row + r0, rows - r0, words, k0, g);
        }
        float s[8][4], dps[8][4];
        mma_rows_t<Act, HS>(s, qa, ks[buf]);
        mma_rows_t<Act, HS>(dps, da, vs[buf]);
        FA_UNROLL for (int nt = 0; nt < 8; nt++) {
            int col = nt * 8 + 2 * t;
            unsigned keep = dropout.p > 0.0f ? keep_bits_of(bits, nt, t) : 15u;
            FA_UNROLL for (int i = 0; i < 4; i += 2) {  // the pair of keys (col, col + 1) in row g + 8 (i / 2)
                bool seen0 = seen_by.sees_key(i >> 1, k0 + col, f.len);
                bool seen1 = seen_by.sees_key(i >> 1, k0 + col + 1, f.len);
                float p0 = seen0 ? sfu_exp2(fmaf(s[nt][i], scale2, -row_lse[i >> 1])) : 0.0f;
                float p1 = seen1 ? sfu_exp2(fmaf(s[nt][i + 1], scale2, -row_lse[i >> 1])) : 0.0f;
                float dp0 = dps[nt][i], dp1 = dps[nt][i + 1];
                if (dropout.p > 0.0f) {
                    dp0 = keep >> i & 1u ? dp0 * f.keep_scale : 0.0f;
                    dp1 = keep >> (i + 1) & 1u ? dp1 * f.keep_scale : 0.0f;
                }
                s[nt][i] = p0 * (dp0 - row_delta[i >> 1]) * scale;
                s[nt][i + 1] = p1 * (dp1 - row_delta[i >> 1]) * scale;
            }
        }
        mma_p_rows<Act, HS>(dq_acc, s, ks[buf]);
    });
    if (r0 >= rows) return;
    Act *dq = dqkv + (f.row0 + r0) * f.stride + (size_t)f.h * HS;
    store_rows<Act, HS>(dq, f.stride, dq_acc, rows - r0, 1.0f, 1.0f);
}

// ---- The fused backward: one kernel, thread-block clusters (sm_90) ----------------------
// A cluster per (sequence b, head h) of n = ceil(T / 64) blocks, block (= cluster rank) j
// owning keys 64 j .. 64 j + 63. Its prologue computes delta for the query tile of its own
// index (delta_i = dout_i . out_i, 16-byte loads, two threads per row) into its shared
// memory, where every block of the cluster reads it. Then, over the query tiles i of the
// sequence, each warp takes 16 queries against the block's 64 keys: S = q k^T and dP =
// dout v^T on tensor cores, P = exp(S - lse), P' and dP' with the forward's keep bits
// (keep_bits_load / keep_bits_of, as the dq kernel), dS = P (dP' - delta) / sqrt(HS); the
// warp's dQ partial dS k (its 16 queries, this block's keys) goes from registers to an
// FP32 tile in shared memory, and P' and dS go to shared memory as [query][key] tiles,
// from which each warp takes 16 keys: dv += P'^T dout and dk += dS^T q in registers over
// every query tile. After a cluster barrier the blocks sum the partials of tile i in rank
// order (keys 0.., a fixed order: deterministic, no atomics), each block its share of the
// tile's 64 x HS values, reading the others' tiles through distributed shared memory, and
// write dq. The partial tiles are double-buffered, so one cluster barrier per query tile
// orders both the sums and the reuse of every shared buffer; a last one keeps each block's
// shared memory alive until the others are done reading it. Blocks whose keys are all
// padding take part in the barriers and the sums only (and write zero dk, dv).
// Shared memory is dynamic (more than 48 KB at head size 64: 2 blocks per SM).
template <typename Act, int HS>
struct fa_fused_shared {
    static const int S = fa_stages<HS>();
    fa_tile<Act, HS> ks, vs, qs[S], dos[S];
    Act ps[FA_ROWS][FA_ROWS + FA_PAD], dss[FA_ROWS][FA_ROWS + FA_PAD];  // P' and dS: [query][key]
    float dq[2][FA_ROWS][HS + 8];  // dQ partials of two query tiles (row stride: 64-bit stores conflict-free)
    float lse[S][FA_ROWS], delta[S][FA_ROWS];
    float delta_own[FA_ROWS];  // delta of the query tile with this block's index
};

// The A fragments of rows row0 .. row0 + 15 of a shared tile (ldmatrix; matrices (rows +0,
// columns +0), (+8, +0), (+0, +8), (+8, +8) of each 16 columns).
template <typename Act, int HS>
__device__ __forceinline__ void load_a_shared(uint32_t (&a)[HS / 16][4], const fa_tile<Act, HS> &rows, int row0) {
    int lane = threadIdx.x % 32;
    FA_UNROLL for (int kk = 0; kk < HS / 16; kk++) ldmatrix_x4<false>(a[kk], &rows[row0 + lane % 16][kk * 16 + lane / 16 * 8]);
}

// acc[16 x HS] += X^T[16 x 64] rows, X a shared [64 queries][64 keys] tile and X^T's rows
// its keys key0 .. key0 + 15: the A fragments by transposed ldmatrix (matrices (keys +0,
// queries +0), (+8, +0), (+0, +8), (+8, +8) of each 16 queries), rows' row k = query k.
template <typename Act, int HS>
__device__ __forceinline__ void mma_t_rows(float (&acc)[HS / 8][4], const Act (&x)[FA_ROWS][FA_ROWS + FA_PAD],
                                           int key0, const fa_tile<Act, HS> &rows) {
    int lane = threadIdx.x % 32, m = lane / 8, r = lane % 8;
    FA_UNROLL for (int kk = 0; kk < FA_ROWS / 16; kk++) {
        uint32_t a[4];
        ldmatrix_x4<true>(a, &x[kk * 16 + m / 2 * 8 + r][key0 + m % 2 * 8]);
        mma_a_rows<Act, HS>(acc, a, rows, kk * 16);
    }
}

template <typename Act, int HS, bool WIN>
static __global__ void __launch_bounds__(FA_THREADS, fa_min_blocks<HS>(2))
    flash_backward_fused_kernel(Act *dqkv, const uint32_t *keep, const Act *dout, const Act *qkv, const Act *out,
                                const float *lse, const int *seq_offsets, const int *doc_bounds, int packed, int T,
                                int NH, float scale, int window_arg, dropout_t dropout) {
    const int window = WIN ? window_arg : 0;
    constexpr int S = fa_stages<HS>();
    typedef fa_fused_shared<Act, HS> shared_t;
    BERTPRE_DYNAMIC_SHARED(shared_t, sh);
    fa_block<Act> f(qkv, seq_offsets, doc_bounds, packed, T, NH, HS, dropout);
    const int g = f.g, t = f.t, rows = f.rows, warp = threadIdx.x / 32, words = attention_keep_words(T);
    const int j = blockIdx.x, n = gridDim.x, k0 = j * FA_ROWS;  // the cluster is the grid's x: rank j
    const int key_blocks = (f.len + FA_ROWS - 1) / FA_ROWS, query_tiles = (rows + FA_ROWS - 1) / FA_ROWS;
    const bool active = j < key_blocks;  // some key of this block is real
    const float scale2 = scale * FA_LOG2E;
    const Act *dO = dout + f.row0 * f.C + (size_t)f.h * HS;
    auto fill = [&](int i, int buf) {  // query tile i's copies, as one group
        int q0 = i * FA_ROWS;
        copy_tiles<Act, HS>(sh->qs[buf], f.q, f.stride, sh->dos[buf], dO, f.C, q0, rows);
        for (int r = threadIdx.x; r < FA_ROWS; r += blockDim.x) {
            bool real = q0 + r < rows;
            copy_async<4>(&sh->lse[buf][r], lse + f.head_row + (real ? q0 + r : 0), real);
        }
        copy_async_commit();
    };
    if (active) {
        copy_tiles<Act, HS>(sh->ks, f.k, f.stride, sh->vs, f.v, f.stride, k0, f.len);
        fill(0, 0);  // len > 0 here, so query_tiles > 0
    }
    {  // delta of queries k0 .. k0 + 63: threads 2 r and 2 r + 1 take halves of row r
        constexpr int PIECES = HS / 16;  // 8-element pieces per thread
        int r = threadIdx.x / 2, q = k0 + r;
        float sum = 0.0f;
        if (q < rows) {
            const Act *o_row = out + (f.row0 + q) * f.C + (size_t)f.h * HS + threadIdx.x % 2 * (HS / 2);
            const Act *d_row = dO + (size_t)q * f.C + threadIdx.x % 2 * (HS / 2);
            FA_UNROLL for (int p = 0; p < PIECES; p++) {
                access_aligned(o_row + 8 * p, 16, "a uint4 load of out");
                access_aligned(d_row + 8 * p, 16, "a uint4 load of dout");
                uint4 ov = *reinterpret_cast<const uint4 *>(o_row + 8 * p), dv = *reinterpret_cast<const uint4 *>(d_row + 8 * p);
                Act oe[8], de[8];  // by memcpy: no access to the vectors through another type
                memcpy((void *)oe, &ov, sizeof oe);
                memcpy((void *)de, &dv, sizeof de);
                FA_UNROLL for (int e = 0; e < 8; e++) sum = fmaf(to_float(de[e]), to_float(oe[e]), sum);
            }
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        if (threadIdx.x % 2 == 0) sh->delta_own[r] = sum;  // zero past the query rows
    }
    cluster_sync();  // every block's delta ready
    float dk_acc[HS / 8][4] = {}, dv_acc[HS / 8][4] = {};
    for (int i = 0; i < query_tiles; i++) {
        const int buf = i % S, q0 = i * FA_ROWS, r0 = q0 + warp * 16;  // this warp's first query
        // The key blocks that some query of tile i sees (masked instances: a window or
        // documents); the others skip the tile's products and give no dq partial to the sum.
        int seen_first = 0, seen_end = 0;
        if constexpr (WIN) {
            fa_mask_tiles(q0, min(q0 + FA_ROWS - 1, rows - 1), window, f.bounds, f.len, seen_first, seen_end);
            seen_end += seen_first;
        }
        if (active) {
            fa_pipeline_wait<S>(i, query_tiles, fill);
            if (!WIN || (j >= seen_first && j < seen_end)) {  // else no query of tile i sees these keys
                if (threadIdx.x < FA_ROWS) sh->delta[buf][threadIdx.x] = cluster_map(sh->delta_own, i)[threadIdx.x];
                __syncthreads();
                uint32_t bits[2][2];  // the forward's keep bits of rows g, g + 8: loads in flight during the products
                if (dropout.p > 0.0f) keep_bits_load(bits, keep, f.head_row + r0, rows - r0, words, k0, g);
                float row_lse[2], row_delta[2];
                FA_UNROLL for (int r = 0; r < 2; r++) {
                    row_lse[r] = sh->lse[buf][warp * 16 + g + 8 * r] * FA_LOG2E;  // base 2; rows past the end: 0
                    row_delta[r] = sh->delta[buf][warp * 16 + g + 8 * r];
                }
                const fa_rows_seen<WIN> seen_by(f.bounds, r0, g, rows, f.len, window);  // the warp's queries' keys
                float s[8][4], dps[8][4];
                {
                    uint32_t qa[HS / 16][4], da[HS / 16][4];
                    load_a_shared<Act, HS>(qa, sh->qs[buf], warp * 16);
                    load_a_shared<Act, HS>(da, sh->dos[buf], warp * 16);
                    mma_rows_t<Act, HS>(s, qa, sh->ks);
                    mma_rows_t<Act, HS>(dps, da, sh->vs);
                }
                // Rows past the query rows have zero q, dout, lse and delta: P there is 1 (or its
                // dropped value), dS 0, and P' meets only dout's zero rows in dv.
                FA_UNROLL for (int nt = 0; nt < 8; nt++) {
                    int col = nt * 8 + 2 * t;
                    unsigned kept = dropout.p > 0.0f ? keep_bits_of(bits, nt, t) : 15u;
                    FA_UNROLL for (int e = 0; e < 4; e += 2) {  // the pair of keys (col, col + 1) in row g + 8 (e / 2)
                        // a window or documents: masked within a tile that some query sees
                        bool seen0 = seen_by.sees_key(e >> 1, k0 + col, f.len);
                        bool seen1 = seen_by.sees_key(e >> 1, k0 + col + 1, f.len);
                        float p0 = seen0 ? sfu_exp2(fmaf(s[nt][e], scale2, -row_lse[e >> 1])) : 0.0f;
                        float p1 = seen1 ? sfu_exp2(fmaf(s[nt][e + 1], scale2, -row_lse[e >> 1])) : 0.0f;
                        float pd0 = p0, pd1 = p1, dp0 = dps[nt][e], dp1 = dps[nt][e + 1];
                        if (dropout.p > 0.0f) {
                            pd0 = kept >> e & 1u ? p0 * f.keep_scale : 0.0f;
                            pd1 = kept >> (e + 1) & 1u ? p1 * f.keep_scale : 0.0f;
                            dp0 = kept >> e & 1u ? dp0 * f.keep_scale : 0.0f;
                            dp1 = kept >> (e + 1) & 1u ? dp1 * f.keep_scale : 0.0f;
                        }
                        s[nt][e] = p0 * (dp0 - row_delta[e >> 1]) * scale;
                        s[nt][e + 1] = p1 * (dp1 - row_delta[e >> 1]) * scale;
                        int row = warp * 16 + g + 8 * (e >> 1);
                        store_pair(&sh->ps[row][col], pack_pair_float<Act>(pd0, pd1));
                        store_pair(&sh->dss[row][col], pack_pair_float<Act>(s[nt][e], s[nt][e + 1]));
                    }
                }
                {  // this warp's dQ partial: dS (its 16 queries x the block's keys) k
                    float dq_acc[HS / 8][4] = {};
                    mma_p_rows<Act, HS>(dq_acc, s, sh->ks);
                    FA_UNROLL for (int r = 0; r < 2; r++)
                        FA_UNROLL for (int nd = 0; nd < HS / 8; nd++) {
                            float *cell = &sh->dq[i % 2][warp * 16 + g + 8 * r][nd * 8 + 2 * t];
                            access_aligned(cell, 8, "a float2 store of the dQ partial");
                            *reinterpret_cast<float2 *>(cell) = make_float2(dq_acc[nd][2 * r], dq_acc[nd][2 * r + 1]);
                        }
                }
                __syncthreads();  // P' and dS complete
                mma_t_rows<Act, HS>(dv_acc, sh->ps, warp * 16, sh->dos[buf]);
                mma_t_rows<Act, HS>(dk_acc, sh->dss, warp * 16, sh->qs[buf]);
            }
        }
        cluster_sync();  // every block's partial of tile i ready; every buffer of tile i read
        // This block's share of tile i: float4 columns u = j * 128 + thread, + n * 128 ...,
        // the sum over the blocks with real keys that tile i sees, in rank order.
        constexpr int UNITS = FA_ROWS * HS / 4;
        for (int u = j * FA_THREADS + threadIdx.x; u < UNITS; u += n * FA_THREADS) {
            int row = u / (HS / 4), col = u % (HS / 4) * 4;
            if (q0 + row >= rows) continue;
            float4 part[8], sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // loads first, then the sum
            FA_UNROLL for (int b = 0; b < 8; b++) {
                bool partial = b < key_blocks && (!WIN || (b >= seen_first && b < seen_end));
#ifdef BERTPRE_CUDA_EMULATION  // on the GPU cluster_map is an asm volatile that must stay one
                if (partial)
                    access_aligned(&cluster_map(sh->dq[i % 2][row], b)[col], 16,
                                   "a float4 load of distributed shared memory");
#endif
                part[b] = partial ? *reinterpret_cast<const float4 *>(&cluster_map(sh->dq[i % 2][row], b)[col]) : sum;
            }
            FA_UNROLL for (int b = 0; b < 8; b++)
                sum.x += part[b].x, sum.y += part[b].y, sum.z += part[b].z, sum.w += part[b].w;
            Act *dq = dqkv + (f.row0 + q0 + row) * f.stride + (size_t)f.h * HS + col;
            store_pair(dq, pack_pair_float<Act>(sum.x, sum.y));
            store_pair(dq + 2, pack_pair_float<Act>(sum.z, sum.w));
        }
    }
    cluster_sync();  // no block leaves while another may still read its shared memory
    int r0 = k0 + warp * 16;  // this warp's first key
    if (r0 >= rows) return;
    Act *dk = dqkv + (f.row0 + r0) * f.stride + (size_t)f.h * HS + f.C, *dv = dk + f.C;
    store_rows<Act, HS>(dk, f.stride, dk_acc, rows - r0, 1.0f, 1.0f);  // zeros for padding keys
    store_rows<Act, HS>(dv, f.stride, dv_acc, rows - r0, 1.0f, 1.0f);
}

size_t flash_attention_workspace(int B, int T, int NH) { return (size_t)B * NH * T * sizeof(float); }

template <typename Act>
bool flash_attention_fits(int T, int C, int NH) {
    int HS = C / NH;
    return !std::is_same<Act, float>::value && T >= 1 && (HS == 32 || HS == 64 || HS == 128);
}

// The fused backward's cluster holds one block per 64 keys, at most FA_CLUSTER_BLOCKS (the
// portable cluster size): sequences of up to 512 tokens. Only for those does the forward keep
// its dropout decisions (T / 8 bytes per query row, which would grow as T^2); past them the
// split backward draws them again, as the forward drew them, from the same Philox counters.
static const int FA_CLUSTER_BLOCKS = 8;
int flash_attention_keep_words(int T) { return T <= FA_CLUSTER_BLOCKS * FA_ROWS ? attention_keep_words(T) : 0; }

template <typename Act, int HS, bool WIN>
static void forward_hs(Act *out, float *lse, uint32_t *keep, const Act *qkv, const int *seq_offsets,
                       const int *doc_bounds, int packed, int B, int T, int NH, int window, dropout_t dropout) {
    dim3 grid(ceil_div(T, FA_ROWS), NH, B);
    static bool configured = false;  // 4 blocks per SM at HS = 64: 4 x 37 KB of static shared memory
    if (!configured) {
        kernel_shared_memory(flash_forward_kernel<Act, HS, WIN>, "flash_forward_kernel", 0);
        if (FA_FWD_CARVEOUT >= 0) {
            cudaError_t err = cudaFuncSetAttribute(flash_forward_kernel<Act, HS, WIN>,
                                                   cudaFuncAttributePreferredSharedMemoryCarveout, FA_FWD_CARVEOUT);
            if (err != cudaSuccess)
                fatal("flash_forward_kernel with a %d%% shared-memory carveout (FA_FWD_CARVEOUT): %s", FA_FWD_CARVEOUT,
                      BERTPRE_ERROR_STRING(err));
        }
        configured = true;
    }
    if (!flash_attention_keep_words(T)) keep = nullptr;  // the backward draws again
    LAUNCH(grid, FA_THREADS, 0, device_stream(), flash_forward_kernel<Act, HS, WIN>)(
        out, lse, keep, qkv, seq_offsets, doc_bounds, packed, T, NH, 1.0f / sqrtf((float)HS), window, dropout,
        dropout_schedule_of(dropout));
    CHECK_LAUNCH("flash_forward_kernel");
}

// The backward the engine runs: the fused kernel where the device launches clusters (sm_90
// and later, and the emulation), the delta + dq + dk/dv kernels otherwise (sm_80) or when
// BERTPRE_ATTN_BACKWARD=split asks for them (to time one against the other); read once.
// BERTPRE_ATTN_BACKWARD=fused: the fused kernel or an exit, never the split kernels in its
// place, so that a run that asks for it measures it (sequences past 512 tokens, which have no
// fused kernel, take the split ones either way).
static int fa_fused_asked = 0;
static bool fa_fused_backward() {
    static int fused = -1;
    if (fused < 0) {
        int asked = env_choice("BERTPRE_ATTN_BACKWARD", "fused", "split");  // -1: unset
        bool clusters = device_cluster_launch() != 0;
        if (asked == 0 && !clusters)
            fatal("BERTPRE_ATTN_BACKWARD=fused needs thread-block clusters, which %s does not "
                  "launch (sm_90 or later)", device_name());
        fused = clusters && asked != 1;
        fa_fused_asked = asked == 0;
    }
    return fused != 0;
}

template <typename Act, int HS, bool WIN>
static void backward_hs(Act *dqkv, const Act *dout, const Act *qkv, const Act *out, const float *lse,
                        const uint32_t *keep, const int *seq_offsets, const int *doc_bounds, int packed, int B, int T,
                        int NH, int window, dropout_t dropout) {
    cudaStream_t stream = device_stream();
    dim3 grid(ceil_div(T, FA_ROWS), NH, B);
    float scale = 1.0f / sqrtf((float)HS);
    size_t smem = sizeof(fa_fused_shared<Act, HS>);
    // Sequences longer than a cluster holds have only the split kernels (whatever
    // BERTPRE_ATTN_BACKWARD says: there is no fused kernel for them to replace), which draw
    // the dropout decisions again (the forward kept none).
    bool short_rows = grid.x <= (unsigned)FA_CLUSTER_BLOCKS;
    // Per cluster size (1 to 8 blocks, one per 64 keys): 1 when the device holds such a
    // cluster, 0 when it holds none (the split kernels run instead, said once), -1 not asked.
    static int cluster_fits[FA_CLUSTER_BLOCKS + 1] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
    if (fa_fused_backward() && short_rows && cluster_fits[grid.x] < 0) {
        static bool configured = false;  // 2 blocks per SM at HS = 64: 2 x 112 KB of the 228 KB
        if (!configured) {
            kernel_shared_memory(flash_backward_fused_kernel<Act, HS, WIN>, "flash_backward_fused_kernel", smem);
            configured = true;
        }
        const char *why;
        cluster_fits[grid.x] = cluster_occupancy(flash_backward_fused_kernel<Act, HS, WIN>, dim3(grid.x, 1, 1),
                                                 dim3(FA_THREADS), smem, &why) > 0;
        if (!cluster_fits[grid.x] && fa_fused_asked)
            fatal("BERTPRE_ATTN_BACKWARD=fused: %s runs no cluster of %u blocks with %zu bytes of "
                  "shared memory each (%s), so the fused attention backward cannot run at T = %d, head size %d",
                  device_name(), grid.x, smem, why, T, HS);
        if (!cluster_fits[grid.x])
            fprintf(stderr,
                    "bertpre: %s runs no cluster of %u blocks with %zu bytes of shared memory each (%s): the "
                    "attention backward at T = %d, head size %d runs the kernels without clusters\n",
                    device_name(), grid.x, smem, why, T, HS);
    }
    if (fa_fused_backward() && short_rows && cluster_fits[grid.x]) {
        LAUNCH_CLUSTER(grid, FA_THREADS, smem, stream, dim3(grid.x, 1, 1), flash_backward_fused_kernel<Act, HS, WIN>)(
            dqkv, keep, dout, qkv, out, lse, seq_offsets, doc_bounds, packed, T, NH, scale, window, dropout);
        CHECK_LAUNCH("flash_backward_fused_kernel");
        return;
    }
    size_t rows_all = (size_t)B * NH * T;
    float *delta = (float *)device_workspace(WS_ATTN_F32, flash_attention_workspace(B, T, NH));
    LAUNCH(ceil_div(rows_all, 8), 256, 0, stream, flash_delta_kernel<Act>)(delta, dout, out, seq_offsets, packed, B, T, NH,
                                                                                  HS);
    CHECK_LAUNCH("flash_delta_kernel");
    if (dropout.p > 0.0f && !flash_attention_keep_words(T)) {  // no record: draw again
        dropout_schedule draws = dropout_schedule_of(dropout);
        LAUNCH(grid, FA_THREADS, 0, stream, flash_backward_q_kernel<Act, HS, WIN, true>)(
            dqkv, nullptr, dout, qkv, lse, delta, seq_offsets, doc_bounds, packed, T, NH, scale, window, dropout, draws);
        CHECK_LAUNCH("flash_backward_q_kernel");
        LAUNCH(grid, FA_THREADS, 0, stream, flash_backward_kv_kernel<Act, HS, WIN, true>)(
            dqkv, dout, qkv, lse, delta, nullptr, seq_offsets, doc_bounds, packed, T, NH, scale, window, dropout, draws);
        CHECK_LAUNCH("flash_backward_kv_kernel");
        return;
    }
    LAUNCH(grid, FA_THREADS, 0, stream, flash_backward_q_kernel<Act, HS, WIN, false>)(dqkv, keep, dout, qkv, lse, delta, seq_offsets, doc_bounds, packed,
                                                                           T, NH, scale, window, dropout, dropout_schedule{});
    CHECK_LAUNCH("flash_backward_q_kernel");
    LAUNCH(grid, FA_THREADS, 0, stream, flash_backward_kv_kernel<Act, HS, WIN, false>)(dqkv, dout, qkv, lse, delta, keep, seq_offsets, doc_bounds, packed,
                                                                            T, NH, scale, window, dropout, dropout_schedule{});
    CHECK_LAUNCH("flash_backward_kv_kernel");
}

// The masked instances (WIN) take a window or documents; BERT's plain rows have no masking code.
template <typename Act>
void flash_attention_forward(void *out, void *lse, uint32_t *keep, const void *qkv, const int *seq_offsets,
                             const int *doc_bounds, int packed, int B, int T, int C, int NH, int window,
                             dropout_t dropout) {
    Act *o = (Act *)out;
    const Act *x = (const Act *)qkv;
    bool masked = window > 0 || doc_bounds;
#define FA_FORWARD(HS)                                                                                          \
    if (masked) forward_hs<Act, HS, true>(o, (float *)lse, keep, x, seq_offsets, doc_bounds, packed, B, T, NH, window, dropout); \
    else forward_hs<Act, HS, false>(o, (float *)lse, keep, x, seq_offsets, nullptr, packed, B, T, NH, 0, dropout);
    switch (C / NH) {
        case 32: FA_FORWARD(32) break;
        case 64: FA_FORWARD(64) break;
        default: FA_FORWARD(128) break;
    }
#undef FA_FORWARD
}

template <typename Act>
void flash_attention_backward(void *dqkv, const void *dout, const void *qkv, const void *out, const void *lse,
                              const uint32_t *keep, const int *seq_offsets, const int *doc_bounds, int packed, int B,
                              int T, int C, int NH, int window, dropout_t dropout) {
    Act *d = (Act *)dqkv;
    const Act *dO = (const Act *)dout, *x = (const Act *)qkv, *o = (const Act *)out;
    const float *l = (const float *)lse;
    bool masked = window > 0 || doc_bounds;
#define FA_BACKWARD(HS)                                                                                         \
    if (masked) backward_hs<Act, HS, true>(d, dO, x, o, l, keep, seq_offsets, doc_bounds, packed, B, T, NH, window, dropout); \
    else backward_hs<Act, HS, false>(d, dO, x, o, l, keep, seq_offsets, nullptr, packed, B, T, NH, 0, dropout);
    switch (C / NH) {
        case 32: FA_BACKWARD(32) break;
        case 64: FA_BACKWARD(64) break;
        default: FA_BACKWARD(128) break;
    }
#undef FA_BACKWARD
}

template bool flash_attention_fits<float>(int, int, int);
template bool flash_attention_fits<f16>(int, int, int);
template bool flash_attention_fits<bf16>(int, int, int);
#define INSTANTIATE_FLASH(Act)                                                                                  \
    template void flash_attention_forward<Act>(void *, void *, uint32_t *, const void *, const int *, const int *, int, \
                                               int, int, int, int, int, dropout_t);                              \
    template void flash_attention_backward<Act>(void *, const void *, const void *, const void *, const void *,   \
                                                const uint32_t *, const int *, const int *, int, int, int, int, int, \
                                                int, dropout_t);
INSTANTIATE_FLASH(f16)
INSTANTIATE_FLASH(bf16)

}  // namespace CUDA_NS
