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
int dist_world_size(void);
// In-place sums over all ranks, the same result on every rank.
void dist_sum_doubles(double *x, int n);
void dist_sum_floats(float *x, size_t n);
// all[world_size][n] receives every rank's mine[n], rank-major, on every rank.
void dist_gather_int64(const int64_t *mine, int n, int64_t *all);
