"""engine/schedule.c against a Python re-implementation of NVIDIA's PolyWarmUpScheduler
(DeepLearningExamples, PyTorch/LanguageModeling/BERT/schedulers.py, as run_pretraining.py
drives it), written here from its definition:

  before each optimizer step the scheduler sets last_epoch = (updates already applied) + 1,
  progress = last_epoch / total_steps,
  lr = base * progress / warmup         if progress < warmup
     = base * (1 - progress) ** degree  otherwise, degree = 0.5.

Cases: the phase-1 and phase-2 recipes (7,038 and 1,563 steps), a short run, no warmup,
warmup over the whole run, and a warmup boundary that falls exactly on an update.
Compared per update by relative error |a - b| / max(|b|, 1e-300) <= 1e-14: both sides
evaluate the same double-precision formula, the C side through pow(x, 0.5) and printed
with 17 digits, so only the last bit may differ. Also checked: the shape NVIDIA's
counting implies (first rate non-zero, last rate exactly 0, peak at the end of warmup).

usage: test_schedule.py SCHEDULE_DUMP_EXECUTABLE
"""
import subprocess
import sys

TOL = 1e-14
failures = 0


def nvidia_lr(base, warmup, total, applied_before):
    last_epoch = applied_before + 1
    progress = last_epoch / total
    if progress < warmup:
        return base * progress / warmup
    return base * (1.0 - progress) ** 0.5


def expect(what, ok):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")


cases = [(6e-3, 0.2843, 7038), (4e-3, 0.128, 1563), (0.02, 0.1, 30), (1e-3, 0.0, 20), (1e-3, 1.0, 10),
         (5e-3, 0.25, 8)]
for base, warmup, total in cases:
    out = subprocess.run([sys.argv[1], repr(base), repr(warmup), str(total)], check=True, capture_output=True,
                         text=True).stdout.split()
    ours = [float(x) for x in out]
    ref = [nvidia_lr(base, warmup, total, k) for k in range(total)]
    worst = max(abs(a - b) / max(abs(b), 1e-300) for a, b in zip(ours, ref)) if len(ours) == total else float("inf")
    expect(f"base {base:g}, warmup {warmup:g}, {total} steps: {len(ours)} rates, worst rel error {worst:.1e} "
           f"(tolerance {TOL:.0e})", len(ours) == total and worst <= TOL)
    if len(ours) == total:
        peak = max(range(total), key=lambda k: ours[k])
        expect(f"  first rate {ours[0]:.3e} > 0, last rate {ours[-1]:g} == 0, peak {ours[peak]:.3e} at update "
               f"{peak + 1}", ours[0] > 0 and ours[-1] == 0.0 and abs(peak + 1 - max(1, warmup * total)) <= 1)
sys.exit(1 if failures else 0)
