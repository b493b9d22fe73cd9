// The workspace pool of device.h, the same in both builds: one buffer per slot, grown on
// demand (after the stream has drained, since kernels may still use the old one) and never
// shrunk, so that steady-state steps allocate nothing.
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

}  // namespace CUDA_NS
