// Learning-rate schedules (train.lr_schedule), all with NVIDIA's step counting and linear
// warmup. The default, poly, is NVIDIA's BERT pretraining schedule (DeepLearningExamples,
// PyTorch, PolyWarmUpScheduler with degree 0.5).
//
// NVIDIA's scheduler runs before each optimizer step and reads the optimizer's count of
// updates already applied, plus one. So update n (1-based, n = 1..total_steps) uses
//   p     = n / total_steps,  w = warmup_proportion
//   lr(n) = base_lr * p / w                                  if p < w   (every schedule)
// and otherwise, with q = (p - w) / (1 - w) the progress after warmup (1 when w = 1):
//   poly      base_lr * (1 - p) ^ 0.5    (NVIDIA's: the decay counts from the run's start)
//   linear    base_lr * (1 - q)
//   cosine    base_lr * (1 + cos(pi q)) / 2
//   constant  base_lr
//   wsd       warmup-stable-decay (MiniCPM's; ModernBERT's, with its 1-sqrt decay): base_lr
//             until the last decay_proportion d of the run, then base_lr * (1 - sqrt(r)),
//             r = (p - (1 - d)) / d the progress within the decay (base_lr throughout when
//             d = 0); as transformers' get_wsd_schedule(decay_type="1-sqrt") where the
//             warmup and the decay are whole numbers of updates
// The first update already has a non-zero rate and the last one has rate 0 (constant: the
// base rate). An update that is skipped (loss-scale overflow) does not advance n, so the
// next try uses the same rate.
//
// Learning-rate scaling (Goyal et al. 2017; You et al. 2019): with train.base_learning_rate
// set, learning_rate = base_learning_rate * f(global_batch_size / base_batch_size), f =
// the ratio (lr_scaling "linear"), its square root ("sqrt") or 1 ("none").
//
// Batch-size warmup (train.batch_warmup_min_size m0 sequences, train.batch_warmup_tokens W;
// ModernBERT's BatchSizeWarmupScheduler): the global batch starts at m0 and grows one
// micro-batch per rank at a time to global_batch_size. In micro-batches per rank, from m =
// m0 / (micro_batch_size x ranks) to A = accumulation_steps: with u = micro_batch_size x
// seq_length the tokens of one micro-batch and W_r = ceil(W / ranks) a rank's share, size m + i
// lasts while the rank's tokens so far are below
//   threshold_i = ceil(W_r / (m + ... + A - 1) x (m + ... + m + i)),   i = 0 .. A - m - 1,
// so every size gets about the same number of steps, and A from W_r tokens on. Tokens count
// every row as seq_length (ModernBERT counts the real tokens of its nearly full packed rows),
// so the sizes are a function of the step alone and a resumed run repeats them. The
// learning-rate schedule stays in optimizer steps.
#pragma once
#include <stdint.h>
#include "engine/config.h"

typedef enum { SCHEDULE_POLY, SCHEDULE_COSINE, SCHEDULE_LINEAR, SCHEDULE_CONSTANT, SCHEDULE_WSD } schedule_kind;

// The kind named by train.lr_schedule ("poly", "cosine", "linear", "constant", "wsd"); -1 otherwise.
int schedule_kind_of(const char *name);
// The rate of update n (1 <= n <= total_steps); exits with a message naming the arguments
// when they are outside that range. decay_proportion: wsd's decay (the others ignore it).
double schedule_rate(schedule_kind kind, double base_lr, double warmup_proportion, long total_steps, long update,
                     double decay_proportion);
// NVIDIA's poly schedule: schedule_rate(SCHEDULE_POLY, ...).
double schedule_lr(double base_lr, double warmup_proportion, long total_steps, long update);
// The rate of update n under a training config (its schedule, learning_rate, warmup, steps).
double schedule_config_lr(const train_config *t, long update);
// Config: derives learning_rate from base_learning_rate, base_batch_size and lr_scaling (or
// takes learning_rate, default 1e-3); an inconsistent combination is an error naming the
// fields. `where` names the config in messages.
// Also checks the batch-size warmup's fields against the batch plan.
void schedule_config_resolve(train_config *t, const char *where);
// Micro-batches per rank in iteration i (0-based; accumulation_steps without warmup), and
// the sum over iterations 0 .. i - 1 (this rank's micro-batches before iteration i).
int schedule_accumulation(const train_config *t, long iteration);
long schedule_micro_batches_before(const train_config *t, long iteration);
// The iterations before the first at the full batch (0 without warmup).
long schedule_batch_warmup_iterations(const train_config *t);
// The run's number of this rank's first micro-batch in iteration i: the micro-batches of
// every rank before it, then those of the ranks before this one (the data and dropout key).
uint32_t schedule_first_micro_batch(const train_config *t, long iteration, int rank);
