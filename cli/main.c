// bertpre: command-line entry. Subcommands are added as the engine grows; each has --help.
#include <stdio.h>
#include <string.h>
#include "cli/cmd_train.h"
#include "cli/commands.h"

static const char *usage_main =
    "usage: bertpre <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG [--set section.field=value ...]   pretrain BertForPreTraining\n"
    "  tokenizer train|encode|decode|info            SentencePiece model with BERT's special tokens\n"
    "  prep --tokenizer MODEL --output DIR INPUT...   text to HDF5 shards (NSP pairs, masked LM)\n"
    "  bench data ...                                 prep MB/s and loader batches/s\n"
    "  bench gemm [--m --n --k --precision ...]      TFLOP/s of one matrix product on the backend\n"
    "  export CHECKPOINT --out DIR                    a checkpoint as a Hugging Face model directory\n"
    "  import HF_DIR --out CHECKPOINT                 a Hugging Face BERT checkpoint to train from\n"
    "\n"
    "Run 'bertpre <command> --help' for the options of a command.\n";

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage_main, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(argv[1], "tokenizer")) return cmd_tokenizer(argc - 2, argv + 2);
    if (!strcmp(argv[1], "prep")) return cmd_prep(argc - 2, argv + 2);
    if (!strcmp(argv[1], "bench") && argc > 2 && !strcmp(argv[2], "gemm")) return cmd_bench_gemm(argc - 3, argv + 3);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(argv[1], "export")) return cmd_export(argc - 2, argv + 2);
    if (!strcmp(argv[1], "import")) return cmd_import(argc - 2, argv + 2);
    fprintf(stderr, "bertpre: unknown command '%s'\n%s", argv[1], usage_main);
    return 2;
}
