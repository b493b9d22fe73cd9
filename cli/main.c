// bertpre: command-line entry. Subcommands are added as the engine grows; each has --help.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "bertpre_config.h"
#include "kernels/backend.h"
#include "cli/cmd_train.h"
#include "cli/commands.h"
#include "kernels/cpu/gemm.h"

static const char *usage_main =
    "usage: bertpre <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG [--set section.field=value ...]   pretrain BertForPreTraining\n"
    "  tokenizer train|encode|decode|info            SentencePiece model with BERT's special tokens\n"
    "  prep --tokenizer MODEL --output DIR INPUT...   text to HDF5 shards (NSP pairs, masked LM)\n"
    "  bench data ...                                 prep MB/s and loader batches/s\n"
    "  bench tokenizer --model MODEL TEXT_FILE        encoding MB/s and tokens/s on one thread\n"
    "  bench model CONFIG [--gpu h100|h200|a100]      predicted step time, every launch (roofline model)\n"
    "  bench gemm [--m --n --k --precision ...]      TFLOP/s of one matrix product on the backend\n"
    "  eval CHECKPOINT --data SHARDS                  MLM/NSP loss and accuracy of a checkpoint\n"
    "  export CHECKPOINT --out DIR                    a checkpoint as a Hugging Face model directory\n"
    "  import HF_DIR --out CHECKPOINT                 a Hugging Face BERT checkpoint to train from\n"
    "  config-doc                                     the config fields as Markdown (docs/CONFIG.md)\n"
    "\n"
    "Run 'bertpre <command> --help' for the options of a command; 'bertpre --version' prints\n"
    "what this build has (CUDA compiled, GPU present, libraries).\n";

static const char *yes_no(int v) { return v ? "yes" : "no"; }

// The build's facts, and whether a GPU is present now: compiling CUDA in does not make one.
static int print_version(void) {
    int gpus = 0;
#if BERTPRE_HAVE_CUDA
    gpus = cuda_device_count();
#endif
    printf("bertpre %s\n", BERTPRE_VERSION);
    printf("CUDA compiled: %s", yes_no(BERTPRE_HAVE_CUDA));
    if (BERTPRE_HAVE_CUDA) printf(" (compute capabilities %s)", BERTPRE_GPU_ARCHS);
    if (BERTPRE_HAVE_CUDA) printf("\nGPU present: %s (%d CUDA device%s visible)\n", yes_no(gpus > 0), gpus, gpus == 1 ? "" : "s");
    else printf("\nGPU present: no (not looked for: no CUDA backend in this build)\n");
    printf("CUDA emulation compiled: %s\n", yes_no(BERTPRE_HAVE_CUDA_EMU));
    printf("backends: auto, cpu%s%s (auto picks %s)\n", BERTPRE_HAVE_CUDA ? ", cuda" : "",
           BERTPRE_HAVE_CUDA_EMU ? ", cuda-emu" : "", gpus > 0 ? "cuda" : "cpu");
    printf("NCCL: %s\nMPI: %s\nHDF5: %s\nSentencePiece: %s\nBLAS: %s\n", yes_no(BERTPRE_HAVE_NCCL),
           yes_no(BERTPRE_HAVE_MPI), yes_no(BERTPRE_HAVE_HDF5), yes_no(BERTPRE_HAVE_SENTENCEPIECE),
           yes_no(BERTPRE_HAVE_BLAS));
    char threads[320];
    cpu_threads_describe(threads, sizeof threads);
    printf("CPU threads: %s\n", threads);
    return 0;
}

static int run_command(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage_main, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) return print_version();
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(argv[1], "tokenizer")) return cmd_tokenizer(argc - 2, argv + 2);
    if (!strcmp(argv[1], "prep")) return cmd_prep(argc - 2, argv + 2);
    if (!strcmp(argv[1], "bench") && argc > 2 && !strcmp(argv[2], "model")) return cmd_bench_model(argc - 3, argv + 3);
    if (!strcmp(argv[1], "bench") && argc > 2 && !strcmp(argv[2], "gemm")) return cmd_bench_gemm(argc - 3, argv + 3);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(argv[1], "eval")) return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(argv[1], "export")) return cmd_export(argc - 2, argv + 2);
    if (!strcmp(argv[1], "import")) return cmd_import(argc - 2, argv + 2);
    if (!strcmp(argv[1], "config-doc")) return cmd_config_doc(argc - 2, argv + 2);
    fprintf(stderr, "bertpre: unknown command '%s'\n%s", argv[1], usage_main);
    return 2;
}

// What a command printed must have reached stdout: a write that failed (a full disk,
// /dev/full, a pipe closed early with SIGPIPE ignored) turns an exit status of 0 into 1, with
// one message, as for any other file bertpre writes.
int main(int argc, char **argv) {
    if (argc > 0 && argv[0][0]) cli_program = argv[0];
    cpu_blas_threads_init();
    int status = run_command(argc, argv);
    errno = 0;
    int failed = fflush(stdout) != 0 || ferror(stdout);
    int err = errno;
    if (fclose(stdout) != 0 && !failed) failed = 1, err = errno;
    if (!failed) return status;
    fprintf(stderr, "bertpre: error: writing to standard output failed: %s\n",
            err ? strerror(err) : "an earlier write failed");
    return status ? status : 1;
}
