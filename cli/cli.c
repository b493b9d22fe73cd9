// Helpers shared by the subcommands (the option parser itself is cli/options.c).
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include "cli/commands.h"
#include "engine/checkpoint.h"
#include "kernels/common/check.h"

const char *cli_program = "bertpre";  // set by main() from argv[0]

void cli_mpi_rank(int *rank, int *world_size) {
    const char *r = getenv("OMPI_COMM_WORLD_RANK"), *w = getenv("OMPI_COMM_WORLD_SIZE");
    const char *rank_name = "OMPI_COMM_WORLD_RANK", *size_name = "OMPI_COMM_WORLD_SIZE";
    if (!r || !w) r = getenv("PMI_RANK"), w = getenv("PMI_SIZE"), rank_name = "PMI_RANK", size_name = "PMI_SIZE";
    *rank = 0;
    *world_size = 1;
    if (r && w) {
        *world_size = cli_int(size_name, w, 1, 1 << 20);
        *rank = cli_int(rank_name, r, 0, *world_size - 1);
    }
}

void cli_checkpoint_dir(const char *command, const char *source, char *dir, size_t size) {
    char path[1300];
    snprintf(path, sizeof path, "%s/state.json", source);
    struct stat st;
    if (stat(path, &st) != 0 && checkpoint_latest(source, dir, size)) {
        int rank, world_size;
        cli_mpi_rank(&rank, &world_size);
        if (rank == 0) printf("%s: newest checkpoint in %s is %s\n", command, source, dir);  // once under mpirun
    } else {
        snprintf(dir, size, "%s", source);
    }
}

void cli_tokenizer_options(const char *command, const cli_casing *c, int *lower_case, int *strip_accents) {
    if (c->lower && c->cased) fatal("%s: --lower-case and --cased contradict each other; give one", command);
    if (c->strip && c->keep) fatal("%s: --strip-accents and --keep-accents contradict each other; give one", command);
    *lower_case = c->lower ? 1 : c->cased ? 0 : -1;
    *strip_accents = c->strip ? 1 : c->keep ? 0 : -1;
}

text_options cli_text_options(const cli_text_input *t, int doc_per_file, int strict, const char **pattern) {
    static const text_format formats[] = {TEXT_SENTENCE_LINES, TEXT_PLAIN, TEXT_JSONL, TEXT_PARQUET, TEXT_ARROW};
    *pattern = t->pattern                            ? t->pattern
               : formats[t->format] == TEXT_PARQUET ? "*.parquet"
               : formats[t->format] == TEXT_ARROW   ? "*.arrow"
                                                    : NULL;
    return (text_options){formats[t->format], doc_per_file, t->text_field, t->bad_lines == 1, strict, t->markup == 1};
}
