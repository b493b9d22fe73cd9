// Test driver for the label-smoothing comparison: reads "logits" [N,V] (F32) and "targets"
// [N] (I32, -1 = ignored) from a safetensors file, runs the CPU backend's cross-entropy with
// label smoothing S, and writes "losses" [N] and "dlogits" [N,V] (the gradient of the sum of
// the losses: dloss = 1).
// usage: ce_dump IN OUT SMOOTHING
#include <stdlib.h>
#include "kernels/backend.h"
#include "kernels/common/check.h"
#include "engine/safetensors.h"

int main(int argc, char **argv) {
    if (argc != 4) fatal("usage: ce_dump IN OUT SMOOTHING");
    st_file in;
    st_open(&in, argv[1]);
    const st_tensor *lt = st_find(&in, "logits"), *tt = st_find(&in, "targets");
    if (!lt || !tt || lt->ndim != 2 || tt->numel != (size_t)lt->shape[0])
        fatal("%s: expected 'logits' [N,V] and 'targets' [N]", in.path);
    int N = (int)lt->shape[0], V = (int)lt->shape[1];
    float *logits = xmalloc(lt->numel * sizeof(float));
    float *losses = xmalloc(N * sizeof(float)), *dlogits = xmalloc(lt->numel * sizeof(float));
    int *targets = xmalloc(N * sizeof(int));
    st_read_float(&in, lt, logits);
    st_read_int(&in, tt, targets);
    float smoothing = (float)atof(argv[3]);
    backend_cpu.crossentropy_forward(losses, NULL, logits, targets, N, V, V, smoothing);
    backend_cpu.crossentropy_backward(dlogits, logits, targets, N, V, V, 1.0f, smoothing);
    st_entry out[] = {{"losses", "F32", 1, {N}, losses}, {"dlogits", "F32", 2, {N, V}, dlogits}};
    st_write(argv[2], out, 2, NULL);
    st_close(&in);
    free(logits), free(losses), free(dlogits), free(targets);
    return 0;
}
