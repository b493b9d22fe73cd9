// The block scheduler behind cuda_emu.h: CUDA threads as fibers, barriers as meeting points.
// See cuda_emu.h for the model. Fibers switch with swapcontext, which costs a system call,
// so emulated kernels are meant for the tiny shapes of the tests.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <vector>
#include "kernels/cuda/emu/cuda_emu.h"

namespace emu {
namespace {

enum fiber_state { RUNNABLE, WAIT_BLOCK, WAIT_WARP, DONE };

struct fiber {
    ucontext_t context;
    char *stack = nullptr;
    uint3 index;
    int linear = 0;
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
    };
    std::vector<pending_copy> copies;
    std::vector<size_t> group_ends;
};

const size_t stack_bytes = 256 * 1024;

struct block_run {
    const char *name = nullptr;
    const std::function<void()> *body = nullptr;
    std::vector<fiber> fibers;
    int n_threads = 0;
    int current = -1;
    ucontext_t scheduler;
    uint3 block_index;
    dim3 grid, block;
    std::vector<unsigned char> shared;
};

block_run run;

[[noreturn]] void deadlock(const char *why);

void fiber_entry() {
    (*run.body)();
    if (!run.fibers[run.current].copies.empty())
        deadlock("a thread exited with asynchronous copies it never waited for (cp.async without its wait)");
    run.fibers[run.current].state = DONE;
    swapcontext(&run.fibers[run.current].context, &run.scheduler);
}

fiber &self() {
    if (run.current < 0) {
        fprintf(stderr, "bertpre: error: CUDA emulation: a device function ran outside a kernel launch\n");
        exit(1);
    }
    return run.fibers[run.current];
}

void wait(fiber_state state, unsigned mask) {
    fiber &f = self();
    f.state = state;
    f.warp_mask = mask;
    swapcontext(&f.context, &run.scheduler);
}

[[noreturn]] void deadlock(const char *why) {
    fprintf(stderr, "bertpre: error: CUDA emulation: kernel %s, block (%u,%u,%u): %s\n", run.name,
            run.block_index.x, run.block_index.y, run.block_index.z, why);
    for (int t = 0; t < run.n_threads; t++) {
        const char *names[] = {"runnable", "at __syncthreads", "at a warp operation", "exited"};
        fprintf(stderr, "  thread %d: %s\n", t, names[run.fibers[t].state]);
    }
    exit(1);
}

// Opens the barriers whose threads have all arrived; returns whether any thread can run.
bool open_barriers() {
    int waiting_block = 0, alive = 0;
    for (int t = 0; t < run.n_threads; t++) {
        if (run.fibers[t].state != DONE) alive++;
        if (run.fibers[t].state == WAIT_BLOCK) waiting_block++;
    }
    if (alive == 0) return false;
    bool any = false;
    if (waiting_block == alive) {
        // CUDA requires every thread of the block at a __syncthreads; threads that exited
        // before it make the code undefined (the hardware may pass or hang).
        if (alive < run.n_threads) deadlock("a __syncthreads that part of the block never reaches (it exited)");
        for (int t = 0; t < run.n_threads; t++) run.fibers[t].state = RUNNABLE;
        return true;
    }
    for (int warp = 0; warp * 32 < run.n_threads; warp++) {
        unsigned waiting = 0, named = 0;
        for (int lane = 0; lane < 32 && warp * 32 + lane < run.n_threads; lane++) {
            const fiber &f = run.fibers[warp * 32 + lane];
            if (f.state == WAIT_WARP) {
                waiting |= 1u << lane;
                named |= f.warp_mask;
            }
        }
        if (!waiting || (named & waiting) != named) continue;
        for (int lane = 0; lane < 32; lane++)
            if (waiting >> lane & 1) run.fibers[warp * 32 + lane].state = RUNNABLE;
        any = true;
    }
    for (int t = 0; t < run.n_threads && !any; t++) any = run.fibers[t].state == RUNNABLE;
    return any;
}

void check_warp_mask(unsigned mask) {
    fiber &f = self();
    int warp = f.linear / 32;
    for (int lane = 0; lane < 32; lane++) {
        if (!(mask >> lane & 1)) continue;
        int t = warp * 32 + lane;
        if (t >= run.n_threads) deadlock("a warp operation names a lane beyond the block");
        if (run.fibers[t].state == DONE) deadlock("a warp operation names a lane that has exited");
    }
    if (!(mask >> (f.linear % 32) & 1)) deadlock("a warp operation is called by a lane outside its mask");
}

void run_block() {
    int n = run.n_threads;
    if ((int)run.fibers.size() < n) run.fibers.resize(n);
    for (int t = 0; t < n; t++) {
        fiber &f = run.fibers[t];
        if (!f.stack) {
            f.stack = (char *)malloc(stack_bytes);
            if (!f.stack) {
                fprintf(stderr, "bertpre: error: CUDA emulation: out of host memory for fiber stacks\n");
                exit(1);
            }
        }
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = f.stack;
        f.context.uc_stack.ss_size = stack_bytes;
        f.context.uc_link = nullptr;
        makecontext(&f.context, fiber_entry, 0);
        f.linear = t;
        f.index.x = t % run.block.x;
        f.index.y = t / run.block.x % run.block.y;
        f.index.z = t / (run.block.x * run.block.y);
        f.state = RUNNABLE;
        f.parity = 0;
        f.wide_parity = 0;
        f.copies.clear();
        f.group_ends.clear();
    }
    // Shared memory starts as NaN-like garbage so that reads before writes show up in tests.
    memset(run.shared.data(), 0xff, run.shared.size());
    for (;;) {
        for (int t = 0; t < n; t++) {
            if (run.fibers[t].state != RUNNABLE) continue;
            run.current = t;
            swapcontext(&run.scheduler, &run.fibers[t].context);
        }
        run.current = -1;
        if (!open_barriers()) {
            for (int t = 0; t < n; t++)
                if (run.fibers[t].state != DONE) deadlock("threads wait at barriers that can never open");
            return;
        }
    }
}

}  // namespace

void copy_async(void *dst, const void *src, size_t bytes, bool real) {
    self().copies.push_back({dst, src, bytes, real});
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
        if (c.real)
            memcpy(c.dst, c.src, c.bytes);
        else
            memset(c.dst, 0, c.bytes);
    }
    f.copies.erase(f.copies.begin(), f.copies.begin() + (long)done);
    f.group_ends.erase(f.group_ends.begin(), f.group_ends.begin() + (groups - n));
    for (size_t &end : f.group_ends) end -= done;
}

uint3 &thread_idx() { return self().index; }
uint3 &block_idx() { return run.block_index; }
dim3 &block_dim() { return run.block; }
dim3 &grid_dim() { return run.grid; }
int lane_id() { return self().linear % 32; }

void *dynamic_shared() {
    if (run.shared.empty()) deadlock("dynamic shared memory used but none was given at launch");
    return run.shared.data();
}

void syncthreads() { wait(WAIT_BLOCK, 0); }

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
    const fiber &src = run.fibers[f.linear / 32 * 32 + src_lane];
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
            memcpy((unsigned char *)all + lane * size, run.fibers[warp * 32 + lane].wide[parity], size);
}

unsigned ballot(unsigned mask, int predicate) {
    check_warp_mask(mask);
    fiber &f = self();
    f.vote = predicate != 0;
    wait(WAIT_WARP, mask);
    unsigned bits = 0;
    int warp = f.linear / 32;
    for (int lane = 0; lane < 32; lane++)
        if (mask >> lane & 1 && run.fibers[warp * 32 + lane].vote) bits |= 1u << lane;
    // A second meeting, so that no lane's next vote overwrites one still being read.
    wait(WAIT_WARP, mask);
    return bits;
}

void run_grid(const char *name, dim3 grid, dim3 block, size_t dynamic_smem, const std::function<void()> &body) {
    if (run.current >= 0) deadlock("a kernel launched from inside a kernel");
    unsigned threads = block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
        grid.z > 65535) {
        fprintf(stderr,
                "bertpre: error: CUDA emulation: kernel %s launched with grid (%u,%u,%u) and block (%u,%u,%u), "
                "outside CUDA's limits\n",
                name, grid.x, grid.y, grid.z, block.x, block.y, block.z);
        exit(1);
    }
    if (dynamic_smem > 227 * 1024) {
        fprintf(stderr, "bertpre: error: CUDA emulation: kernel %s asks for %zu bytes of shared memory\n", name,
                dynamic_smem);
        exit(1);
    }
    run.name = name;
    run.body = &body;
    run.grid = grid;
    run.block = block;
    run.n_threads = (int)threads;
    run.shared.assign(dynamic_smem, 0);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                run.block_index = make_uint3(x, y, z);
                run_block();
            }
    run.body = nullptr;
}

}  // namespace emu
