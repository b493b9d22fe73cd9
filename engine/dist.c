// Ranks and all-reduce sums over MPI, or a single rank in a build without MPI (dist.h).
// Every wait is a polling loop over a non-blocking MPI call, so that a rank that died or
// hangs ends the job after the timeout instead of leaving the others blocked forever.
#include "engine/dist.h"
#include "bertpre_config.h"
#include <string.h>
#include <time.h>
#include "kernels/common/check.h"
#include "kernels/common/clock.h"

static double timeout_seconds = 60.0;
static void (*abort_hooks[4])(void);
static int n_abort_hooks = 0;

void dist_set_timeout(double seconds) { timeout_seconds = seconds; }
double dist_timeout(void) { return timeout_seconds; }
void dist_on_abort(void (*hook)(void)) {
    if (n_abort_hooks < 4) abort_hooks[n_abort_hooks++] = hook;
}
static void run_abort_hooks(void) {
    for (int i = 0; i < n_abort_hooks; i++) abort_hooks[i]();
}

// Between polls: 20 us at first, growing to 1 ms, so that a short wait costs little latency
// and a long one little CPU.
static inline void pause_between_polls(long *ns) {
    struct timespec ts = {0, *ns};
    nanosleep(&ts, NULL);
    if (*ns < 1000000) *ns *= 2;
}

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

// fatal()'s last step on a job of several ranks (check.h: fatal_abort).
static void abort_job(void) {
    run_abort_hooks();
    char line[128];
    int n = snprintf(line, sizeof line, "bertpre: rank %d of %d: ending the job (MPI_Abort)\n", rank, world);
    ssize_t written = write(STDERR_FILENO, line, (size_t)n);
    (void)written;
    MPI_Abort(MPI_COMM_WORLD, 1);
}
// Liveness questions and answers go through their own communicator, beside the sums.
static MPI_Comm probe_comm = MPI_COMM_NULL;
enum { TAG_ASK = 1, TAG_ANSWER = 2 };

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
    if (probe_comm == MPI_COMM_NULL) mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &probe_comm));
    // An error on this rank (fatal, CHECK) ends the whole job at once: the other ranks would
    // otherwise wait for it until their timeout (train.comm_timeout_s).
    if (world > 1) fatal_abort = abort_job;
}

void dist_finalize(void) {
    fatal_abort = 0;  // no MPI_Abort after MPI_Finalize
    if (started) mpi_check(MPI_Finalize());
    started = 0;
}

void dist_poll(void) {
    if (!active || probe_comm == MPI_COMM_NULL) return;
    for (;;) {
        int pending = 0;
        MPI_Status status;
        mpi_check(MPI_Iprobe(MPI_ANY_SOURCE, TAG_ASK, probe_comm, &pending, &status));
        if (!pending) return;
        int question = 0, answer = rank;
        mpi_check(MPI_Recv(&question, 1, MPI_INT, status.MPI_SOURCE, TAG_ASK, probe_comm, MPI_STATUS_IGNORE));
        MPI_Request request;  // completes even if the asking rank is already gone
        mpi_check(MPI_Isend(&answer, 1, MPI_INT, status.MPI_SOURCE, TAG_ANSWER, probe_comm, &request));
        mpi_check(MPI_Request_free(&request));
    }
}

static void wait_polling(int (*done)(void *ctx), void *ctx, const char *what, int timed);

static int request_done(void *request) {
    int done = 0;
    mpi_check(MPI_Test((MPI_Request *)request, &done, MPI_STATUS_IGNORE));
    return done;
}

// Waits for a non-blocking MPI call; after the timeout without completion, dist_fail.
static void wait_request(MPI_Request *request, const char *what, int timed) {
    wait_polling(request_done, request, what, timed);
}

void dist_fail(const char *what, double waited) {
    // Ask every other rank; those alive answer from their own waiting loop. Five seconds
    // leaves room for ranks that entered the same wait a little later.
    char silent[512] = "";
    int n_silent = 0;
    if (active && world > 1 && probe_comm != MPI_COMM_NULL) {
        int *answered = xcalloc((size_t)world, sizeof(int)), *answers = xcalloc((size_t)world, sizeof(int));
        MPI_Request *requests = xcalloc((size_t)world, sizeof(MPI_Request));
        int question = rank;
        for (int r = 0; r < world; r++) {
            requests[r] = MPI_REQUEST_NULL;
            if (r == rank) continue;
            MPI_Request sent;
            MPI_Isend(&question, 1, MPI_INT, r, TAG_ASK, probe_comm, &sent);
            MPI_Request_free(&sent);
            MPI_Irecv(&answers[r], 1, MPI_INT, r, TAG_ANSWER, probe_comm, &requests[r]);
        }
        answered[rank] = 1;
        double start = now_seconds();
        long ns = 20000;
        while (now_seconds() - start < 5.0) {
            int all = 1;
            for (int r = 0; r < world; r++) {
                if (answered[r]) continue;
                int done = 0;
                MPI_Test(&requests[r], &done, MPI_STATUS_IGNORE);
                answered[r] = done;
                all &= done;
            }
            if (all) break;
            dist_poll();
            pause_between_polls(&ns);
        }
        for (int r = 0; r < world; r++)
            if (!answered[r]) {
                size_t len = strlen(silent);
                if (n_silent++ < 16 && len + 16 < sizeof silent)
                    snprintf(silent + len, sizeof silent - len, "%s%d", len ? ", " : "", r);
            }
        free(answered);
        free(answers);
        free(requests);
    }
    fprintf(stderr, "bertpre: error: rank %d of %d: %s did not complete within %.0f s (train.comm_timeout_s = %g): ",
            rank, world, what, waited, timeout_seconds);
    if (n_silent)
        fprintf(stderr, "rank%s %s did not answer: %s, ending the job\n", n_silent > 1 ? "s" : "", silent,
                n_silent > 1 ? "they died or hang" : "it died or hangs");
    else
        fprintf(stderr, "every rank answered, so one of them is stuck outside the collective; ending the job\n");
    fflush(NULL);
    run_abort_hooks();
    if (active) MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

void dist_sum_doubles(double *x, int n) {
    if (world <= 1) return;
    MPI_Request request;
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &request));
    wait_request(&request, "a sum over the ranks (MPI_Iallreduce)", 1);
}

void dist_sum_floats(float *x, size_t n) {
    // MPI counts are int: reduce in chunks for buffers beyond 2^31 elements.
    for (size_t done = 0; world > 1 && done < n;) {
        int count = n - done > (size_t)INT_MAX ? INT_MAX : (int)(n - done);
        MPI_Request request;
        mpi_check(MPI_Iallreduce(MPI_IN_PLACE, x + done, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request));
        wait_request(&request, "the gradient sum over the ranks (MPI_Iallreduce)", 1);
        done += (size_t)count;
    }
}

void dist_gather_int64(const int64_t *mine, int n, int64_t *all) {
    if (!active) {
        memcpy(all, mine, (size_t)n * sizeof *all);
        return;
    }
    MPI_Request request;
    mpi_check(MPI_Iallgather(mine, n, MPI_INT64_T, all, n, MPI_INT64_T, MPI_COMM_WORLD, &request));
    wait_request(&request, "the gather of the data cursors (MPI_Iallgather)", 1);
}

void dist_broadcast_bytes(void *buf, int bytes) {
    if (world <= 1) return;
    MPI_Request request;
    mpi_check(MPI_Ibcast(buf, bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &request));
    wait_request(&request, "the broadcast of the NCCL id (MPI_Ibcast)", 1);
}

void dist_barrier_untimed(void) {
    if (world <= 1) return;
    MPI_Request request;
    mpi_check(MPI_Ibarrier(MPI_COMM_WORLD, &request));
    wait_request(&request, "a barrier", 0);
}

// The ranks sharing this node's memory, in world rank order.
static MPI_Comm node_comm(void) {
    MPI_Comm node;
    mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    return node;
}

void dist_local_rank(int *local_rank, int *local_size) {
    *local_rank = 0;
    *local_size = 1;
    if (!active) return;
    MPI_Comm node = node_comm();
    mpi_check(MPI_Comm_rank(node, local_rank));
    mpi_check(MPI_Comm_size(node, local_size));
    mpi_check(MPI_Comm_free(&node));
}

void dist_node_gather_bytes(const void *mine, int bytes, void *all) {
    if (!active) {
        memcpy(all, mine, (size_t)bytes);
        return;
    }
    MPI_Comm node = node_comm();
    MPI_Request request;
    mpi_check(MPI_Iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, node, &request));
    wait_request(&request, "the gather of the GPUs' bus ids over the node (MPI_Iallgather)", 1);
    mpi_check(MPI_Comm_free(&node));
}
#else
static const int rank = 0, world = 1, active = 0;

void dist_init(void) {}
void dist_finalize(void) {}
void dist_sum_doubles(double *x, int n) {}
void dist_sum_floats(float *x, size_t n) {}
void dist_gather_int64(const int64_t *mine, int n, int64_t *all) { memcpy(all, mine, (size_t)n * sizeof *all); }
void dist_broadcast_bytes(void *buf, int bytes) {}
void dist_barrier_untimed(void) {}
void dist_local_rank(int *local_rank, int *local_size) { *local_rank = 0, *local_size = 1; }
void dist_node_gather_bytes(const void *mine, int bytes, void *all) { memcpy(all, mine, (size_t)bytes); }
void dist_poll(void) {}
void dist_fail(const char *what, double waited) {
    fprintf(stderr, "bertpre: error: %s did not complete within %.0f s (train.comm_timeout_s = %g)\n", what, waited,
            timeout_seconds);
    fflush(NULL);
    run_abort_hooks();
    _exit(1);
}
#endif

static void wait_polling(int (*done)(void *ctx), void *ctx, const char *what, int timed) {
    double start = now_seconds();
    long ns = 20000;
    while (!done(ctx)) {
        dist_poll();
        double waited = now_seconds() - start;
        if (timed && timeout_seconds > 0 && waited > timeout_seconds) dist_fail(what, waited);
        pause_between_polls(&ns);
    }
}

void dist_wait_until(int (*done)(void *ctx), void *ctx, const char *what) { wait_polling(done, ctx, what, 1); }

int dist_rank(void) { return rank; }
int dist_launched(void) { return active; }
int dist_world_size(void) { return world; }
