// Small helpers shared by the subcommands' option parsers.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include "cli/commands.h"
#include "kernels/common/check.h"

int cli_int(const char *option, const char *value, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || *end || end == value || v < lo || v > hi)
        fatal("option %s: '%s' is not an integer in [%ld, %ld]", option, value, lo, hi);
    return (int)v;
}

double cli_real(const char *option, const char *value, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || *end || end == value || !(v >= lo && v <= hi))
        fatal("option %s: '%s' is not a number in [%g, %g]", option, value, lo, hi);
    return v;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) fatal("option %s needs a value", argv[*i]);
    return argv[++*i];
}

void cli_mpi_rank(int *rank, int *world_size) {
    const char *r = getenv("OMPI_COMM_WORLD_RANK"), *w = getenv("OMPI_COMM_WORLD_SIZE");
    if (!r || !w) r = getenv("PMI_RANK"), w = getenv("PMI_SIZE");
    *rank = 0;
    *world_size = 1;
    if (r && w) {
        *world_size = cli_int("world size (environment)", w, 1, 1 << 20);
        *rank = cli_int("rank (environment)", r, 0, *world_size - 1);
    }
}
