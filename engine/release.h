// The end of a command's use of its backend, after every buffer of the command was released:
// the backend's shutdown (backend_t.shutdown: workspaces, and on a GPU cuBLASLt, streams,
// events and staging; nothing on the CPU), and a warning naming the count and bytes of
// device allocations still live, which would be a leak.
#pragma once
#include "kernels/backend.h"

void backend_release(const backend_t *be);
