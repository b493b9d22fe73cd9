// The allocation ledger of device.h, kept by whichever implementation a build has
// (device_gpu.cu or emu/device_emu.cpp, each including this once): every live allocation of
// device_alloc with its size, so that shutdown can say what was never freed (the tests
// assert that nothing is). device_free of a pointer that is not live (freed twice, or never
// allocated here) is an error.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <mutex>
#include <unordered_map>
#include "kernels/common/check.h"

namespace CUDA_NS {

namespace {
std::mutex ledger_lock;
std::unordered_map<void *, size_t> &ledger() {
    // Never destroyed, so that a free during the process's exit still finds it.
    static std::unordered_map<void *, size_t> *live = new std::unordered_map<void *, size_t>;
    return *live;
}
}  // namespace

static void ledger_add(void *ptr, size_t bytes) {
    std::lock_guard<std::mutex> hold(ledger_lock);
    ledger()[ptr] = bytes;
}

static void ledger_remove(void *ptr) {
    std::lock_guard<std::mutex> hold(ledger_lock);
    if (ledger().erase(ptr) == 0)
        fatal("device memory at %p is freed but is not a live allocation (freed twice, or not "
              "from the backend's alloc)", ptr);
}

static size_t ledger_live(size_t *live_bytes) {
    std::lock_guard<std::mutex> hold(ledger_lock);
    size_t bytes = 0;
    for (const auto &entry : ledger()) bytes += entry.second;
    if (live_bytes) *live_bytes = bytes;
    return ledger().size();
}

}  // namespace CUDA_NS
