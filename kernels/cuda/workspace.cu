// The workspace pool of device.h, the same in both builds, above either implementation of
// device memory: one buffer per slot, grown on demand (after the stream has drained, since
// kernels may still use the old one) and never shrunk, so that steady-state steps allocate
// nothing; released at the backend's shutdown (device_release).
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

void *device_workspace_current(workspace_slot slot) { return workspaces[slot]; }

void workspaces_release() {
    for (int i = 0; i < WS_COUNT; i++) {
        device_free(workspaces[i]);
        workspaces[i] = nullptr;
        workspace_sizes[i] = 0;
    }
}

// backend_t.shutdown: the workspaces freed once the device has finished the work queued on
// them, then what the implementation keeps (device_shutdown).
size_t device_release(size_t *live_bytes) {
    device_drain();
    workspaces_release();
    return device_shutdown(live_bytes);
}

}  // namespace CUDA_NS
