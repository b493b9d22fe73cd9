// Helpers shared by the subcommands (the option parser itself is cli/options.c).
#include <stdlib.h>
#include "cli/commands.h"

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
