// Learning-rate schedule of NVIDIA's BERT pretraining (DeepLearningExamples, PyTorch,
// PolyWarmUpScheduler with degree 0.5): linear warmup over the first warmup_proportion of
// the steps, then polynomial decay with power 0.5 to zero at the last step.
//
// NVIDIA's scheduler runs before each optimizer step and reads the optimizer's count of
// updates already applied, plus one. So update n (1-based, n = 1..total_steps) uses
//   progress = n / total_steps
//   lr(n)    = base_lr * progress / warmup_proportion      if progress < warmup_proportion
//            = base_lr * (1 - progress) ^ 0.5              otherwise
// The first update already has a non-zero rate and the last one has rate 0. An update that
// is skipped (loss-scale overflow) does not advance n, so the next try uses the same rate.
#pragma once

// The rate of update n (1 <= n <= total_steps); exits with a message naming the arguments
// when they are outside that range.
double schedule_lr(double base_lr, double warmup_proportion, long total_steps, long update);
