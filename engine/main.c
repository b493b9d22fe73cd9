// bertpre: command-line entry. Subcommands are added as the engine grows; each has --help.
#include <stdio.h>
#include <string.h>
#include "cmd_train.h"

static const char *usage_main =
    "usage: bertpre <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG [--set section.field=value ...]   pretrain BertForPreTraining\n"
    "\n"
    "Run 'bertpre <command> --help' for the options of a command.\n";

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage_main, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 2, argv + 2);
    fprintf(stderr, "bertpre: unknown command '%s'\n%s", argv[1], usage_main);
    return 2;
}
