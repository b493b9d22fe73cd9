// Checks of `bertpre train`'s plan against the machine (cli/train_plan.c).
#pragma once
#include "engine/config.h"
#include "engine/model.h"
#include "kernels/backend.h"

// The memory plan against the chosen device's memory: on a GPU (free memory, 5% kept back)
// a plan that does not fit ends the run naming the micro-batch that would fit, and is a
// warning under --dry-run; on the CPU (available host memory) it is a warning. A run sized
// for GPUs (over 1e17 model FLOP, or a plan that does not fit) planned on the CPU gets a
// warning naming the recipe configs meant for GPUs (bert-*-phase*.json). Warnings are
// printed when `warn` is set (rank 0); the error ends every rank.
void train_plan_check(const run_config *cfg, const backend_t *be, const memory_plan *plan, const char *path,
                      int dry_run, int warn);
