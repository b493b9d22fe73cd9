// Ranks and all-reduce sums over MPI, or a single rank in a build without MPI (dist.h).
#include "engine/dist.h"
#include "bertpre_config.h"
#include <string.h>
#include "kernels/common/check.h"

#if BERTPRE_HAVE_MPI
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>

#define mpi_check(call)                                                                           \
    do {                                                                                          \
        int mpi_status_ = (call);                                                                 \
        if (mpi_status_ != MPI_SUCCESS) {                                                         \
            char mpi_text_[MPI_MAX_ERROR_STRING];                                                 \
            int mpi_len_ = 0;                                                                     \
            MPI_Error_string(mpi_status_, mpi_text_, &mpi_len_);                                  \
            fatal("%s:%d: %s failed: %s (check the mpirun launch and the network)", __FILE__,     \
                  __LINE__, #call, mpi_text_);                                                    \
        }                                                                                         \
    } while (0)

static int rank = 0, world = 1, started = 0, active = 0;

// Whether a launcher (mpirun, mpiexec, srun) started this process: without one there is one
// rank and MPI stays untouched, since MPI_Init alone can cost seconds where the host name
// does not resolve.
static int launched_by_mpi(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

void dist_init(void) {
    int initialized = 0;
    mpi_check(MPI_Initialized(&initialized));
    if (!initialized && !launched_by_mpi()) return;
    active = 1;
    if (!initialized) {
        mpi_check(MPI_Init(NULL, NULL));
        started = 1;
    }
    mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &world));
}

void dist_finalize(void) {
    if (started) mpi_check(MPI_Finalize());
    started = 0;
}

void dist_sum_doubles(double *x, int n) {
    if (world > 1) mpi_check(MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}

void dist_sum_floats(float *x, size_t n) {
    // MPI counts are int: reduce in chunks for buffers beyond 2^31 elements.
    for (size_t done = 0; world > 1 && done < n;) {
        int count = n - done > (size_t)INT_MAX ? INT_MAX : (int)(n - done);
        mpi_check(MPI_Allreduce(MPI_IN_PLACE, x + done, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        done += (size_t)count;
    }
}

void dist_gather_int64(const int64_t *mine, int n, int64_t *all) {
    if (!active) {
        memcpy(all, mine, (size_t)n * sizeof *all);
        return;
    }
    mpi_check(MPI_Allgather(mine, n, MPI_INT64_T, all, n, MPI_INT64_T, MPI_COMM_WORLD));
}
#else
static const int rank = 0, world = 1;

void dist_init(void) {}
void dist_finalize(void) {}
void dist_sum_doubles(double *x, int n) {}
void dist_sum_floats(float *x, size_t n) {}
void dist_gather_int64(const int64_t *mine, int n, int64_t *all) { memcpy(all, mine, (size_t)n * sizeof *all); }
#endif

int dist_rank(void) { return rank; }
int dist_world_size(void) { return world; }
