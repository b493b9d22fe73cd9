// Test driver for the optimizer comparisons: reads initial tensors "param.NAME", per-step
// gradients "grad.STEP.NAME" and learning rates "lr" [steps] from a safetensors file, lays
// the tensors out in one flat buffer (in file order, weight decay by NVIDIA's name rule),
// applies optim_step of OPTIMIZER (lamb, lars, adamw; hyper-parameters NAME=VALUE override
// its defaults) once per step, and writes the final tensors as "param.NAME".
// usage: optim_dump IN OUT OPTIMIZER [NAME=VALUE ...]
#include <stdlib.h>
#include <string.h>
#include "kernels/common/check.h"
#include "engine/optim.h"
#include "engine/safetensors.h"

int main(int argc, char **argv) {
    if (argc < 4 || optim_kind_of(argv[3]) < 0) fatal("usage: optim_dump IN OUT lamb|lars|adamw [NAME=VALUE ...]");
    st_file in;
    st_open(&in, argv[1]);
    param_info *table = xcalloc(in.n_tensors, sizeof(param_info));
    int n = 0;
    size_t total = 0;
    for (int i = 0; i < in.n_tensors; i++) {
        const st_tensor *t = &in.tensors[i];
        if (strncmp(t->name, "param.", 6) != 0) continue;
        param_info *p = &table[n++];
        snprintf(p->name, sizeof p->name, "%s", t->name + 6);
        p->ndim = t->ndim;
        for (int d = 0; d < t->ndim && d < 2; d++) p->shape[d] = (int)t->shape[d];
        p->numel = t->numel;
        p->offset = total;
        p->weight_decay = param_has_weight_decay(p->name);
        total += t->numel;
    }
    const st_tensor *lr = st_find(&in, "lr");
    if (!lr) fatal("%s: missing tensor 'lr'", in.path);
    float *lrs = xmalloc(lr->numel * sizeof(float));
    st_read_float(&in, lr, lrs);
    float *params = xmalloc(total * sizeof(float)), *grads = xmalloc(total * sizeof(float));
    char name[160];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "param.%s", table[i].name);
        st_read_float(&in, st_find(&in, name), params + table[i].offset);
    }
    optim_state opt;
    optim_init(&opt, (optim_kind)optim_kind_of(argv[3]), &backend_cpu, total);
    struct { const char *name; double *field; } fields[] = {
        {"weight_decay", &opt.weight_decay}, {"max_grad_norm", &opt.max_grad_norm}, {"beta1", &opt.beta1},
        {"beta2", &opt.beta2}, {"eps", &opt.eps}, {"momentum", &opt.momentum},
        {"trust_coefficient", &opt.trust_coefficient}};
    for (int a = 4; a < argc; a++) {
        const char *eq = strchr(argv[a], '=');
        size_t f = 0;
        while (f < sizeof fields / sizeof fields[0] &&
               (!eq || strncmp(fields[f].name, argv[a], (size_t)(eq - argv[a])) || fields[f].name[eq - argv[a]]))
            f++;
        if (f == sizeof fields / sizeof fields[0]) fatal("optim_dump: unknown hyper-parameter '%s'", argv[a]);
        *fields[f].field = atof(eq + 1);
    }
    for (size_t step = 0; step < lr->numel; step++) {
        for (int i = 0; i < n; i++) {
            snprintf(name, sizeof name, "grad.%zu.%s", step, table[i].name);
            const st_tensor *g = st_find(&in, name);
            if (!g) fatal("%s: missing tensor '%s'", in.path, name);
            st_read_float(&in, g, grads + table[i].offset);
        }
        double norm = optim_step(&opt, params, grads, table, n, lrs[step], 1.0);
        printf("step %zu: lr %.4g, gradient norm %.4g%s\n", step, lrs[step], norm, norm > opt.max_grad_norm ? " (clipped)" : "");
    }
    st_entry *out = xcalloc(n, sizeof(st_entry));
    char (*names)[160] = xcalloc(n, 160);
    for (int i = 0; i < n; i++) {
        snprintf(names[i], 160, "param.%s", table[i].name);
        out[i] = (st_entry){names[i], "F32", table[i].ndim, {table[i].shape[0], table[i].shape[1]},
                            params + table[i].offset};
    }
    st_write(argv[2], out, n, NULL);
    optim_free(&opt);
    st_close(&in);
    free(table), free(lrs), free(params), free(grads), free(out), free(names);
    return 0;
}
