// Checks of a training plan against the machine, before anything is allocated: the memory
// plan against the chosen device's memory (the GPU's free memory, or the host's available
// memory for the CPU backend), and a run sized for GPUs planned on the CPU.
#include "cli/train_plan.h"
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "bertpre_config.h"
#include "engine/flops.h"
#include "kernels/common/check.h"

// A run of more model FLOPs than this is sized for GPUs: over a day at 1 TFLOP/s, a rate
// the CPU backend does not reach.
static const double GPU_SIZED_FLOP = 1e17;

// MemAvailable of /proc/meminfo, else the free pages; 0 when unknown.
static double host_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb >= 0) return kb * 1024.0;
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * size : 0.0;
}

// The recipe configs beside the config file (bert-*-phase*.json), or their names in configs/.
static void gpu_recipes(const char *path, char *out, size_t size) {
    char pattern[1200];
    const char *slash = strrchr(path, '/');
    snprintf(pattern, sizeof pattern, "%.*sbert-*-phase*.json", slash ? (int)(slash - path + 1) : 0, path);
    glob_t g;
    out[0] = 0;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++)
            snprintf(out + strlen(out), size - strlen(out), "%s%s", i ? ", " : "", g.gl_pathv[i]);
        globfree(&g);
    }
    if (!out[0])
        snprintf(out, size, "configs/bert-base-phase1.json, bert-base-phase2.json, bert-large-phase1.json, "
                            "bert-large-phase2.json");
}

static void warn_gpu_sized(const char *path, double run_flops, int fits) {
    char recipes[2400];
    gpu_recipes(path, recipes, sizeof recipes);
#if BERTPRE_HAVE_CUDA
    const char *why = cuda_device_count() > 0 ? "train.backend chose it" : "no GPU is visible to this CUDA build";
#else
    const char *why = "this build has no CUDA backend";
#endif
    fprintf(stderr,
            "bertpre: warning: %s is sized for GPUs and planned on the cpu backend (%s): %.3g PFLOP in all, "
            "about %.0f days at 1 TFLOP/s%s. The recipes meant for GPUs are %s (one 80 GB GPU per rank, "
            "train.backend cuda; docs/CUDA.md); for the CPU, see configs/pretrain-tiny.json and tools/pretrain.sh.\n",
            path, why, run_flops * 1e-15, run_flops / 1e12 / 86400.0,
            fits ? "" : ", and its memory plan does not fit this machine", recipes);
}

void train_plan_check(const run_config *cfg, const backend_t *be, const memory_plan *plan, const char *path,
                      int dry_run, int warn) {
    const train_config *t = &cfg->train;
    int on_gpu = be->memory_available != NULL;
    // 5% of a GPU's free memory stays for the CUDA context, cuBLASLt and fragmentation.
    double usable = on_gpu ? 0.95 * (double)be->memory_available() : host_available_bytes();
    const char *where = on_gpu ? be->device_name() : "this machine (available host memory)";
    int fits = usable <= 0 || memory_plan_total(plan) <= usable;
    if (!fits) {
        int micro = bert_max_micro_batch(&cfg->model, be, t->micro_batch_size, t->seq_length,
                                         t->max_predictions_per_seq, usable);
        char text[1600];
        snprintf(text, sizeof text,
                 "%s: the memory plan above (%.3g GiB) does not fit in the %.3g GiB usable on %s; "
                 "train.micro_batch_size = %d: %s%d would fit (keep global_batch_size a multiple of it times the "
                 "ranks)",
                 path, memory_plan_total(plan) / 1073741824.0, usable / 1073741824.0, where, t->micro_batch_size,
                 micro ? "a micro-batch of " : "not even ", micro ? micro : 1);
        if (on_gpu && !dry_run) fatal("%s", text);
        if (warn) fprintf(stderr, "bertpre: warning: %s\n", text);
    }
    double run_flops = model_flops(&cfg->model, t->global_batch_size, t->seq_length,
                                   (long)t->global_batch_size * t->max_predictions_per_seq) * t->steps;
    if (warn && !on_gpu && !strcmp(be->name, "cpu") && (run_flops > GPU_SIZED_FLOP || !fits))
        warn_gpu_sized(path, run_flops, fits);
}
