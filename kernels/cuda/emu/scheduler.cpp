// The block scheduler behind cuda_emu.h: CUDA threads as fibers, barriers as meeting points;
// the blocks of a thread-block cluster run together, as one set of fibers. See cuda_emu.h
// for the model. Fibers switch with swapcontext, which costs a system call,
// so emulated kernels are meant for the tiny shapes of the tests.
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>
#include "kernels/common/check.h"
#include "kernels/cuda/emu/cuda_emu.h"
#include "kernels/cuda/emu/symbols.h"

namespace emu {
namespace {

enum fiber_state { RUNNABLE, WAIT_BLOCK, WAIT_WARP, WAIT_CLUSTER, DONE };

struct fiber {
    ucontext_t context;
    char *stack = nullptr;
    uint3 index;
    int linear = 0;  // within its block
    int block = 0;   // its block's rank in the cluster
    int base = 0;    // the fiber of thread 0 of its block
    fiber_state state = DONE;
    unsigned warp_mask = 0;  // lanes named by the warp operation this fiber waits at
    unsigned char slot[2][16];
    int parity = 0;
    unsigned char wide[2][64];  // warp_gather's deposits (matrix fragments)
    int wide_parity = 0;
    int vote = 0;
    // Asynchronous copies (cp.async) issued and not yet completed, in issue order, and where
    // each committed group ends in that list.
    struct pending_copy {
        void *dst;
        const void *src;
        size_t bytes;
        bool real;
        bool landed;  // already copied (BERTPRE_EMU_CP_ASYNC=early)
    };
    std::vector<pending_copy> copies;
    std::vector<size_t> group_ends;
};

const size_t stack_bytes = 256 * 1024;

// One block of the running cluster: its index in the grid, its dynamic shared memory, and
// whether all its threads have exited.
struct block_state {
    uint3 index;
    std::vector<unsigned char> shared;
    bool exited = false;
};

// The running cluster (one block when the launch names no cluster): fibers block by block,
// n_threads per block.
struct block_run {
    const char *name = nullptr;
    const std::function<void()> *body = nullptr;
    std::vector<fiber> fibers;
    std::vector<block_state> blocks;
    int n_threads = 0;
    int current = -1;
    ucontext_t scheduler;
    dim3 grid, block, cluster;
    const kernel_symbols *symbols = nullptr;  // the kernel's static __shared__ variables
};

// The moments the emulation picks where the hardware leaves a choice (read at every launch,
// so a test may change them between launches):
// BERTPRE_EMU_ORDER: the order in which the runnable threads of a cluster run in each pass
// between barriers: forward (thread 0 first, the default), reverse, or random:SEED (a new
// permutation every pass, drawn from SEED: the same run every time).
// BERTPRE_EMU_CP_ASYNC: when a cp.async lands: wait (the default: at the copy_async_wait that
// covers its group, the latest moment the hardware may) or early (at its issue, the earliest).
enum thread_order { ORDER_FORWARD, ORDER_REVERSE, ORDER_RANDOM };
struct emu_modes {
    thread_order order = ORDER_FORWARD;
    uint64_t seed = 0;
    bool copies_early = false;
};
emu_modes modes;

void read_modes() {
    emu_modes m;
    const char *order = getenv("BERTPRE_EMU_ORDER");
    if (order && *order && strcmp(order, "forward") != 0) {
        char *end = nullptr;
        if (strcmp(order, "reverse") == 0)
            m.order = ORDER_REVERSE;
        else if (strncmp(order, "random:", 7) == 0 && order[7] && (m.seed = strtoull(order + 7, &end, 10), !*end))
            m.order = ORDER_RANDOM;
        else
            fatal("environment variable BERTPRE_EMU_ORDER is '%s': use forward, reverse or random:SEED (SEED a "
                  "number)", order);
    }
    const char *cp = getenv("BERTPRE_EMU_CP_ASYNC");
    if (cp && *cp && strcmp(cp, "wait") != 0) {
        if (strcmp(cp, "early") != 0)
            fatal("environment variable BERTPRE_EMU_CP_ASYNC is '%s': use wait or early", cp);
        m.copies_early = true;
    }
    modes = m;
}

block_run run;

[[noreturn]] void deadlock(const char *why);

// Shared memory of a block that has exited, or before its first write, reads as this
// pattern (NaN as FP32, FP16 and BF16), so that a read of it shows up in the tests.
const int shared_garbage = 0xff;

void fiber_entry() {
    (*run.body)();
    fiber &f = run.fibers[run.current];
    if (!f.copies.empty())
        deadlock("a thread exited with asynchronous copies it never waited for (cp.async without its wait)");
    f.state = DONE;
    bool block_done = true;
    for (int t = 0; t < run.n_threads; t++) block_done = block_done && run.fibers[f.base + t].state == DONE;
    if (block_done) {
        // The hardware frees an exited block's shared memory: what another block of the
        // cluster still reads there is garbage.
        block_state &b = run.blocks[f.block];
        b.exited = true;
        memset(b.shared.data(), shared_garbage, b.shared.size());
    }
    swapcontext(&f.context, &run.scheduler);
}

fiber &self() {
    if (run.current < 0) fatal("CUDA emulation: a device function ran outside a kernel launch");
    return run.fibers[run.current];
}

void wait(fiber_state state, unsigned mask) {
    fiber &f = self();
    f.state = state;
    f.warp_mask = mask;
    swapcontext(&f.context, &run.scheduler);
}

[[noreturn]] void deadlock(const char *why) {
    int blk = run.current >= 0 ? run.fibers[run.current].block : 0;
    const uint3 &at = run.blocks[blk].index;
    fprintf(stderr, "bertpre: error: CUDA emulation: kernel %s, block (%u,%u,%u): %s\n", run.name, at.x, at.y, at.z,
            why);
    for (size_t i = 0; i < run.fibers.size() && i < run.blocks.size() * run.n_threads; i++) {
        const char *names[] = {"runnable", "at __syncthreads", "at a warp operation", "at a cluster barrier",
                               "exited"};
        const fiber &f = run.fibers[i];
        if (run.blocks.size() > 1)
            fprintf(stderr, "  block %d thread %d: %s\n", f.block, f.linear, names[f.state]);
        else
            fprintf(stderr, "  thread %d: %s\n", f.linear, names[f.state]);
    }
    exit(1);
}

// Opens the barriers whose threads have all arrived; returns whether any thread can run.
bool open_barriers() {
    int n_all = (int)run.blocks.size() * run.n_threads, alive_all = 0, waiting_cluster = 0;
    for (int i = 0; i < n_all; i++) {
        if (run.fibers[i].state != DONE) alive_all++;
        if (run.fibers[i].state == WAIT_CLUSTER) waiting_cluster++;
    }
    if (alive_all == 0) return false;
    if (waiting_cluster > 0 && waiting_cluster == alive_all) {
        // barrier.cluster waits for every thread of every block of the cluster; a thread
        // that exited never arrives.
        if (alive_all < n_all) deadlock("a cluster barrier that part of the cluster never reaches (it exited)");
        for (int i = 0; i < n_all; i++) run.fibers[i].state = RUNNABLE;
        return true;
    }
    bool any = false;
    for (size_t blk = 0; blk < run.blocks.size(); blk++) {
        fiber *fibers = &run.fibers[blk * run.n_threads];
        int waiting_block = 0, alive = 0;
        for (int t = 0; t < run.n_threads; t++) {
            if (fibers[t].state != DONE) alive++;
            if (fibers[t].state == WAIT_BLOCK) waiting_block++;
        }
        if (alive > 0 && waiting_block == alive) {
            // CUDA requires every thread of the block at a __syncthreads; threads that exited
            // before it make the code undefined (the hardware may pass or hang).
            if (alive < run.n_threads) deadlock("a __syncthreads that part of the block never reaches (it exited)");
            for (int t = 0; t < run.n_threads; t++) fibers[t].state = RUNNABLE;
            any = true;
            continue;
        }
        for (int warp = 0; warp * 32 < run.n_threads; warp++) {
            unsigned waiting = 0, named = 0;
            for (int lane = 0; lane < 32 && warp * 32 + lane < run.n_threads; lane++) {
                const fiber &f = fibers[warp * 32 + lane];
                if (f.state == WAIT_WARP) {
                    waiting |= 1u << lane;
                    named |= f.warp_mask;
                }
            }
            if (!waiting || (named & waiting) != named) continue;
            for (int lane = 0; lane < 32; lane++)
                if (waiting >> lane & 1) fibers[warp * 32 + lane].state = RUNNABLE;
            any = true;
        }
    }
    for (int i = 0; i < n_all && !any; i++) any = run.fibers[i].state == RUNNABLE;
    return any;
}

void check_warp_mask(unsigned mask) {
    fiber &f = self();
    int warp = f.linear / 32;
    for (int lane = 0; lane < 32; lane++) {
        if (!(mask >> lane & 1)) continue;
        int t = warp * 32 + lane;
        if (t >= run.n_threads) deadlock("a warp operation names a lane beyond the block");
        if (run.fibers[f.base + t].state == DONE) deadlock("a warp operation names a lane that has exited");
    }
    if (!(mask >> (f.linear % 32) & 1)) deadlock("a warp operation is called by a lane outside its mask");
}

// Runs the blocks of one cluster (blocks x n_threads fibers) to their end.
void run_cluster() {
    int n = (int)run.blocks.size() * run.n_threads;
    if ((int)run.fibers.size() < n) run.fibers.resize(n);
    for (int i = 0; i < n; i++) {
        fiber &f = run.fibers[i];
        if (!f.stack) {
            f.stack = (char *)malloc(stack_bytes);
            if (!f.stack) fatal("CUDA emulation: out of host memory for fiber stacks");
        }
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = f.stack;
        f.context.uc_stack.ss_size = stack_bytes;
        f.context.uc_link = nullptr;
        makecontext(&f.context, fiber_entry, 0);
        int t = i % run.n_threads;
        f.linear = t;
        f.block = i / run.n_threads;
        f.base = f.block * run.n_threads;
        f.index.x = t % run.block.x;
        f.index.y = t / run.block.x % run.block.y;
        f.index.z = t / (run.block.x * run.block.y);
        f.state = RUNNABLE;
        f.parity = 0;
        f.wide_parity = 0;
        f.copies.clear();
        f.group_ends.clear();
    }
    // Shared memory starts as NaN-like garbage so that reads before writes show up in tests:
    // dynamic shared memory per block, and the kernel's static __shared__ variables (one copy,
    // which run_grid allows only where blocks run one at a time).
    for (block_state &b : run.blocks) {
        b.exited = false;
        memset(b.shared.data(), shared_garbage, b.shared.size());
    }
    for (const auto &s : run.symbols->statics) memset(s.first, shared_garbage, s.second);
    std::vector<int> order(n);
    for (int i = 0; i < n; i++) order[i] = modes.order == ORDER_REVERSE ? n - 1 - i : i;
    for (;;) {
        if (modes.order == ORDER_RANDOM)
            for (int i = n - 1; i > 0; i--) {  // Fisher-Yates from a 64-bit LCG
                modes.seed = modes.seed * 6364136223846793005ull + 1442695040888963407ull;
                int j = (int)((modes.seed >> 33) % (uint64_t)(i + 1));
                int tmp = order[i];
                order[i] = order[j];
                order[j] = tmp;
            }
        for (int k = 0; k < n; k++) {
            int i = order[k];
            if (run.fibers[i].state != RUNNABLE) continue;
            run.current = i;
            swapcontext(&run.scheduler, &run.fibers[i].context);
        }
        run.current = -1;
        if (!open_barriers()) {
            for (int i = 0; i < n; i++)
                if (run.fibers[i].state != DONE) deadlock("threads wait at barriers that can never open");
            return;
        }
    }
}

}  // namespace

void check_aligned(const void *p, size_t bytes, const char *what) {
    if ((uintptr_t)p % bytes == 0) return;
    char why[200];
    snprintf(why, sizeof why, "%s of %zu bytes at %p: an address not aligned to %zu bytes", what, bytes, p, bytes);
    deadlock(why);
}

void copy_async(void *dst, const void *src, size_t bytes, bool real) {
    // PTX: cp.async's source and destination addresses are aligned to the copy's size (4, 8
    // or 16 bytes), whether or not it reads (src-size 0).
    check_aligned(src, bytes, "cp.async source");
    check_aligned(dst, bytes, "cp.async destination");
    if (modes.copies_early) {
        if (real)
            memcpy(dst, src, bytes);
        else
            memset(dst, 0, bytes);
    }
    self().copies.push_back({dst, src, bytes, real, modes.copies_early});
}
void copy_async_commit() {
    fiber &f = self();
    f.group_ends.push_back(f.copies.size());
}
void copy_async_wait(int n) {
    fiber &f = self();
    int groups = (int)f.group_ends.size();
    if (groups <= n) return;
    size_t done = f.group_ends[groups - n - 1];  // the copies of every group but the newest n
    for (size_t i = 0; i < done; i++) {
        const fiber::pending_copy &c = f.copies[i];
        if (c.landed)
            continue;
        else if (c.real)
            memcpy(c.dst, c.src, c.bytes);
        else
            memset(c.dst, 0, c.bytes);
    }
    f.copies.erase(f.copies.begin(), f.copies.begin() + (long)done);
    f.group_ends.erase(f.group_ends.begin(), f.group_ends.begin() + (groups - n));
    for (size_t &end : f.group_ends) end -= done;
}

uint3 &thread_idx() { return self().index; }
uint3 &block_idx() { return run.blocks[self().block].index; }
dim3 &block_dim() { return run.block; }
dim3 &grid_dim() { return run.grid; }
int lane_id() { return self().linear % 32; }

void *dynamic_shared() {
    std::vector<unsigned char> &shared = run.blocks[self().block].shared;
    if (shared.empty()) deadlock("dynamic shared memory used but none was given at launch");
    return shared.data();
}

void syncthreads() { wait(WAIT_BLOCK, 0); }

unsigned cluster_ctarank() { return (unsigned)self().block; }
dim3 &cluster_dim() { return run.cluster; }
void cluster_sync() { wait(WAIT_CLUSTER, 0); }

void *cluster_map_shared(const void *address, unsigned rank) {
    fiber &f = self();
    std::vector<unsigned char> &own = run.blocks[f.block].shared;
    const unsigned char *p = (const unsigned char *)address;
    if (own.empty() || p < own.data() || p >= own.data() + own.size())
        deadlock("mapa of an address outside the block's dynamic shared memory (the emulation maps only "
                 "dynamic shared memory across a cluster)");
    if (rank >= run.blocks.size()) deadlock("mapa to a block rank outside the cluster");
    block_state &target = run.blocks[rank];
    if (target.exited) deadlock("distributed shared memory of a block of the cluster that has exited");
    return target.shared.data() + (p - own.data());
}

void syncwarp(unsigned mask) {
    check_warp_mask(mask);
    wait(WAIT_WARP, mask);
}

void exchange(unsigned mask, const void *value, void *result, size_t size, int src_lane) {
    if (size > sizeof(fiber::slot[0])) deadlock("a shuffle of a value wider than 16 bytes");
    check_warp_mask(mask);
    fiber &f = self();
    int parity = f.parity;
    f.parity ^= 1;
    memcpy(f.slot[parity], value, size);
    wait(WAIT_WARP, mask);
    if (!(mask >> src_lane & 1)) deadlock("a shuffle reads a lane outside its mask");
    const fiber &src = run.fibers[f.base + f.linear / 32 * 32 + src_lane];
    memcpy(result, src.slot[parity], size);
}

// Like exchange, but every lane receives the deposits of all lanes in the mask. Deposits
// alternate between two slots: a lane can be at most one gather ahead of the slowest
// reader, since the next gather's meeting waits for every lane.
void warp_gather(unsigned mask, const void *value, size_t size, void *all) {
    if (size > sizeof(fiber::wide[0])) deadlock("a warp gather of a value wider than 64 bytes");
    check_warp_mask(mask);
    fiber &f = self();
    int parity = f.wide_parity;
    f.wide_parity ^= 1;
    memcpy(f.wide[parity], value, size);
    wait(WAIT_WARP, mask);
    int warp = f.linear / 32;
    for (int lane = 0; lane < 32; lane++)
        if (mask >> lane & 1)
            memcpy((unsigned char *)all + lane * size, run.fibers[f.base + warp * 32 + lane].wide[parity], size);
}

unsigned ballot(unsigned mask, int predicate) {
    check_warp_mask(mask);
    fiber &f = self();
    f.vote = predicate != 0;
    wait(WAIT_WARP, mask);
    unsigned bits = 0;
    int warp = f.linear / 32;
    for (int lane = 0; lane < 32; lane++)
        if (mask >> lane & 1 && run.fibers[f.base + warp * 32 + lane].vote) bits |= 1u << lane;
    // A second meeting, so that no lane's next vote overwrites one still being read.
    wait(WAIT_WARP, mask);
    return bits;
}

// The dynamic shared memory each kernel opted in to (cudaFuncSetAttribute below).
static std::map<const void *, int> &opted_in_smem() {
    static std::map<const void *, int> m;
    return m;
}

// sm_90's limits: 48 KB of dynamic shared memory without an opt-in, 227 KB with one.
static const size_t SMEM_DEFAULT = 48 * 1024, SMEM_OPT_IN_MAX = 227 * 1024;

// The launch ledger (BERTPRE_EMU_LAUNCH_LEDGER=FILE): one line per distinct launch shape of a
// kernel, appended when first seen: the kernel as its symbol names it (namespace, return type
// and parameters dropped: "flash_forward_kernel<__half, 64>", as kernels/cuda/budgets.tsv
// spells it), threads per block, dynamic shared memory bytes, blocks per cluster, the bytes it
// opted in to (cudaFuncSetAttribute; 0 if none), its static __shared__ bytes in the
// emulation, and the launch site's text. tests/test_launch_ledger.py holds each line against
// the kernel's __launch_bounds__ and its sm_90 registers and shared memory in budgets.tsv.
static std::string ledger_name(const std::string &symbol) {
    // "void ns::kernel<A, B>(params)" or "ns::kernel(params)": cut the parameters, then the
    // return type and namespaces (the last "::" or space outside template brackets).
    size_t end = symbol.size(), depth = 0;
    for (size_t i = 0; i < symbol.size(); i++) {
        if (symbol[i] == '<') depth++;
        if (symbol[i] == '>') depth--;
        if (symbol[i] == '(' && depth == 0) {
            end = i;
            break;
        }
    }
    std::string head = symbol.substr(0, end);
    size_t start = 0;
    depth = 0;
    for (size_t i = 0; i < head.size(); i++) {
        if (head[i] == '<') depth++;
        if (head[i] == '>') depth--;
        if (depth == 0 && head[i] == ' ') start = i + 1;
        if (depth == 0 && head[i] == ':' && i + 1 < head.size() && head[i + 1] == ':') start = i + 2;
    }
    return head.substr(start);
}

static void record_launch(const char *site, const void *kernel, const kernel_symbols &symbols, unsigned threads,
                          size_t dynamic_smem, unsigned cluster_blocks, size_t opted_in) {
    const char *path = getenv("BERTPRE_EMU_LAUNCH_LEDGER");
    if (!path || !*path) return;
    static std::set<std::tuple<const void *, unsigned, size_t, unsigned, size_t>> seen;
    if (!seen.insert(std::make_tuple(kernel, threads, dynamic_smem, cluster_blocks, opted_in)).second) return;
    size_t static_bytes = 0;
    for (const auto &s : symbols.statics) static_bytes += s.second;
    FILE *f = fopen(path, "a");
    if (!f) fatal("CUDA emulation: cannot append to the launch ledger %s (BERTPRE_EMU_LAUNCH_LEDGER)", path);
    std::vector<std::string> names;
    for (const std::string &n : symbols.names) names.push_back(ledger_name(n));
    if (names.empty()) names.push_back(std::string("?") + site);  // no symbol table: the site's text
    for (const std::string &n : names)
        fprintf(f, "%s\t%u\t%zu\t%u\t%zu\t%zu\t%s\n", n.c_str(), threads, dynamic_smem, cluster_blocks, opted_in,
                static_bytes, site);
    fclose(f);
}

void run_grid(const char *name, const void *kernel, dim3 grid, dim3 block, size_t dynamic_smem, dim3 cluster,
              const std::function<void()> &body) {
    if (run.current >= 0) deadlock("a kernel launched from inside a kernel");
    unsigned threads = block.x * block.y * block.z, cluster_blocks = cluster.x * cluster.y * cluster.z;
    if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
        grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
        fatal("CUDA emulation: kernel %s launched with grid (%u,%u,%u) and block (%u,%u,%u), "
              "outside CUDA's limits (block: 1024 threads, x and y up to 1024, z up to 64; grid: x up to 2^31-1, "
              "y and z up to 65535)", name, grid.x, grid.y, grid.z, block.x, block.y, block.z);
    // A cluster tiles the grid and has at most 8 blocks (the portable size; more needs an
    // opt-in attribute that nothing here sets).
    if (cluster_blocks == 0 || cluster_blocks > 8 || grid.x % cluster.x || grid.y % cluster.y ||
        grid.z % cluster.z)
        fatal("CUDA emulation: kernel %s launched with clusters of (%u,%u,%u) blocks on grid "
              "(%u,%u,%u): a cluster is at most 8 blocks and must divide the grid",
              name, cluster.x, cluster.y, cluster.z, grid.x, grid.y, grid.z);
    if (dynamic_smem > SMEM_DEFAULT) {
        auto it = opted_in_smem().find(kernel);
        size_t allowed = it == opted_in_smem().end() ? SMEM_DEFAULT : (size_t)it->second;
        if (dynamic_smem > allowed)
            fatal("CUDA emulation: kernel %s launched with %zu bytes of dynamic shared memory, "
                  "more than the %zu it may use: above 48 KB a kernel must first opt in with "
                  "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), "
                  "at most 227 KB", name, dynamic_smem, allowed);
    }
    read_modes();
    const kernel_symbols &symbols = symbols_of(kernel);
    // The emulation keeps one copy of a static __shared__ variable; a cluster's blocks run
    // together, and on the GPU each has its own.
    if (cluster_blocks > 1 && !symbols.statics.empty())
        fatal("CUDA emulation: kernel %s launched in clusters of %u blocks has %zu bytes of static __shared__ "
              "variables, which the emulation cannot give each block of a cluster (it keeps one copy): a kernel "
              "launched in clusters keeps its shared memory dynamic",
              name, cluster_blocks, [&] {
                  size_t bytes = 0;
                  for (const auto &s : symbols.statics) bytes += s.second;
                  return bytes;
              }());
    auto opted = opted_in_smem().find(kernel);
    record_launch(name, kernel, symbols, threads, dynamic_smem, cluster_blocks,
                  opted == opted_in_smem().end() ? 0 : (size_t)opted->second);
    run.symbols = &symbols;
    run.name = name;
    run.body = &body;
    run.grid = grid;
    run.block = block;
    run.cluster = cluster;
    run.n_threads = (int)threads;
    run.blocks.resize(cluster_blocks);
    for (block_state &b : run.blocks) b.shared.assign(dynamic_smem, 0);
    // Clusters in grid order; within one, block rank x fastest (%cluster_ctarank).
    for (unsigned z = 0; z < grid.z; z += cluster.z)
        for (unsigned y = 0; y < grid.y; y += cluster.y)
            for (unsigned x = 0; x < grid.x; x += cluster.x) {
                for (unsigned r = 0; r < cluster_blocks; r++)
                    run.blocks[r].index = make_uint3(x + r % cluster.x, y + r / cluster.x % cluster.y,
                                                     z + r / (cluster.x * cluster.y));
                run_cluster();
            }
    run.body = nullptr;
}

cudaError_t func_set_attribute(const void *kernel, cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > SMEM_OPT_IN_MAX) return cudaErrorInvalidValue;
        opted_in_smem()[kernel] = value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout)
        return value >= -1 && value <= 100 ? cudaSuccess : cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
}

const char *error_string(cudaError_t err) {
    return err == cudaSuccess ? "no error" : err == cudaErrorInvalidValue ? "invalid argument" : "unknown error";
}

}  // namespace emu
