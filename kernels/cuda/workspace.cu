// The workspace pool and the allocation ledger of device.h, the same in both builds. The
// pool: one buffer per slot, grown on demand (after the stream has drained, since kernels
// may still use the old one) and never shrunk, so that steady-state steps allocate nothing;
// released at shutdown. The ledger: every live allocation of device_alloc with its size, so
// that shutdown can say what was never freed (the tests assert that nothing is).
#include <stdio.h>
#include <stdlib.h>
#include <mutex>
#include <unordered_map>
#include "kernels/cuda/common.cuh"

namespace CUDA_NS {

static void *workspaces[WS_COUNT];
static size_t workspace_sizes[WS_COUNT];

void *device_workspace(workspace_slot slot, size_t bytes) {
    if (bytes > workspace_sizes[slot]) {
        if (workspaces[slot]) {
            device_synchronize();
            device_free(workspaces[slot]);
        }
        workspaces[slot] = device_alloc(bytes);
        workspace_sizes[slot] = bytes;
    }
    return workspaces[slot];
}

void workspaces_release() {
    for (int i = 0; i < WS_COUNT; i++) {
        device_free(workspaces[i]);
        workspaces[i] = nullptr;
        workspace_sizes[i] = 0;
    }
}

namespace {
std::mutex ledger_lock;
std::unordered_map<void *, size_t> &ledger() {
    // Never destroyed, so that a free during the process's exit still finds it.
    static std::unordered_map<void *, size_t> *live = new std::unordered_map<void *, size_t>;
    return *live;
}
}  // namespace

void ledger_add(void *ptr, size_t bytes) {
    std::lock_guard<std::mutex> hold(ledger_lock);
    ledger()[ptr] = bytes;
}

void ledger_remove(void *ptr) {
    std::lock_guard<std::mutex> hold(ledger_lock);
    if (ledger().erase(ptr) == 0) {
        fprintf(stderr,
                "bertpre: error: device memory at %p is freed but is not a live allocation (freed twice, or not "
                "from the backend's alloc)\n",
                ptr);
        exit(1);
    }
}

size_t ledger_live(size_t *live_bytes) {
    std::lock_guard<std::mutex> hold(ledger_lock);
    size_t bytes = 0;
    for (const auto &entry : ledger()) bytes += entry.second;
    if (live_bytes) *live_bytes = bytes;
    return ledger().size();
}

}  // namespace CUDA_NS
