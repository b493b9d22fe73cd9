// The ranks of one training run and the sums between them. Built with MPI, a run launched
// by mpirun has one rank per process and the sums are MPI_Allreduce; built without it, a
// run is one rank and a sum over ranks leaves its input as it is.
//
// Data-parallel rule: every rank holds the same weights (same seed, same updates), runs its
// share of the global batch's micro-batches, and the gradients, the loss sums and the
// masked-position and sequence counts are summed over the ranks before the LAMB update.
#pragma once
#include <stddef.h>
#include <stdint.h>

// Starts the ranks (MPI_Init when built with MPI); safe to call more than once.
void dist_init(void);
void dist_finalize(void);
int dist_rank(void);
// 1 when a launcher started this process (MPI is initialized), also for a single rank.
int dist_launched(void);
int dist_world_size(void);
// In-place sums over all ranks, the same result on every rank.
void dist_sum_doubles(double *x, int n);
void dist_sum_floats(float *x, size_t n);
// all[world_size][n] receives every rank's mine[n], rank-major, on every rank.
void dist_gather_int64(const int64_t *mine, int n, int64_t *all);
// Copies rank 0's `bytes` bytes at buf to every rank (the NCCL communicator's unique id).
void dist_broadcast_bytes(void *buf, int bytes);
// This process's rank among the ranks on its node and their number (from the MPI library's
// shared-memory split, whatever the launcher); 0 and 1 without MPI.
void dist_local_rank(int *local_rank, int *local_size);
// all[local_size][bytes] receives the `bytes` at mine of every rank on this node, in local
// rank order (the same split as dist_local_rank); a copy of mine without MPI.
void dist_node_gather_bytes(const void *mine, int bytes, void *all);

// Failure handling. Every wait for other ranks (the sums above, and the device
// collectives through dist_poll) gives up after `seconds` without progress: the ranks still
// alive ask each other who answers, the message names the ranks that did not, the abort
// hooks run (ncclCommAbort) and MPI_Abort ends the job. 0 waits forever.
void dist_set_timeout(double seconds);
double dist_timeout(void);
// Called by a waiting loop between polls: answers the other ranks' liveness questions.
void dist_poll(void);
// Polls done(ctx) (with dist_poll between) until it returns non-zero; dist_fail after the
// timeout. For waits on the device (NCCL collectives).
void dist_wait_until(int (*done)(void *ctx), void *ctx, const char *what);
// Ends the job: names `what` (the collective that did not finish) and the ranks that did
// not answer within a few seconds, runs the abort hooks, MPI_Abort. Never returns.
void dist_fail(const char *what, double waited);
// Run at dist_fail before MPI_Abort, and at an error exit (fatal, CHECK) of a job of several
// ranks before its MPI_Abort (at most 4).
void dist_on_abort(void (*hook)(void));
// A barrier without a timeout: the others wait as long as rank 0 writes a checkpoint.
void dist_barrier_untimed(void);
