"""engine/schedule.c against a Python re-implementation of NVIDIA's PolyWarmUpScheduler
(DeepLearningExamples, PyTorch/LanguageModeling/BERT/schedulers.py, as run_pretraining.py
drives it), written here from its definition:

  before each optimizer step the scheduler sets last_epoch = (updates already applied) + 1,
  progress = last_epoch / total_steps,
  lr = base * progress / warmup         if progress < warmup
     = base * (1 - progress) ** degree  otherwise, degree = 0.5,

and the other schedules (train.lr_schedule) with the same counting and warmup, after warmup
with q = (progress - warmup) / (1 - warmup): linear base * (1 - q), cosine
base * (1 + cos(pi q)) / 2, constant base; wsd base until the last share d of the run, then
base * (1 - sqrt((progress - (1 - d)) / d)) (its decay shares 0.1, 0.3, 0 and one that starts
where warmup ends; transformers' get_wsd_schedule, which .venv's transformers 4.38 lacks, is
the reference of train_parity_modernbert_stableadamw). Where warmup x steps is a whole number, linear,
cosine and constant are also checked against transformers' own schedule functions
(get_linear/cosine/constant_schedule_with_warmup, their multiplier at step n = the update
number), ≤ 1e-12 x base (they compute the progress from integer step counts, so the last
bits differ; not with warmup over the whole run, where transformers' cosine divides by
max(1, 0) and returns the base rate at the last step instead of 0).

Cases: the phase-1 and phase-2 recipes (7,038 and 1,563 steps), a short run, no warmup,
warmup over the whole run, and a warmup boundary that falls exactly on an update.
Compared per update by |a - b| <= 1e-14 x base: both sides evaluate the same
double-precision formula (pow and cos from the same C library), the C side printed with 17
digits, so only the last bit may differ. Also checked: the shape NVIDIA's counting implies
(first rate non-zero, last rate 0 — the base rate for constant —, peak at the end of
warmup).

usage: test_schedule.py SCHEDULE_DUMP_EXECUTABLE
"""
import math
import subprocess
import sys

TOL = 1e-14
failures = 0


def reference_lr(kind, base, warmup, total, applied_before, decay=0.0):
    last_epoch = applied_before + 1
    progress = last_epoch / total
    if progress < warmup:
        return base * progress / warmup
    after = (progress - warmup) / (1.0 - warmup) if warmup < 1.0 else 1.0
    if kind == "wsd":  # the peak rate, then 1 - sqrt of the progress within the last `decay` of the run
        if decay <= 0.0 or progress <= 1.0 - decay:
            return base
        return base * (1.0 - math.sqrt((progress - (1.0 - decay)) / decay))
    return {"poly": base * (1.0 - progress) ** 0.5, "linear": base * (1.0 - after),
            "cosine": base * 0.5 * (1.0 + math.cos(math.pi * after)), "constant": base}[kind]


def transformers_lr(kind, base, warmup, total):
    """transformers' multiplier functions, or None where they do not apply (poly, or a warmup
    that is not a whole number of steps)."""
    warm = warmup * total
    if kind in ("poly", "wsd") or abs(warm - round(warm)) > 1e-9 or transformers is None:
        return None
    if kind == "cosine" and round(warm) == total:
        return None  # warmup over the whole run: transformers' cosine restarts at the base rate
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=base)
    make = {"linear": transformers.get_linear_schedule_with_warmup,
            "cosine": transformers.get_cosine_schedule_with_warmup,
            "constant": lambda o, w, t: transformers.get_constant_schedule_with_warmup(o, w)}[kind]
    sched = make(opt, int(round(warm)), total)
    return [base * sched.lr_lambdas[0](n) for n in range(1, total + 1)]


def expect(what, ok):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")


try:
    import torch
    import transformers
except ImportError as e:
    transformers = None
    print(f"note: transformers' schedules not compared ({e})")

cases = [(6e-3, 0.2843, 7038), (4e-3, 0.128, 1563), (0.02, 0.1, 30), (1e-3, 0.0, 20), (1e-3, 1.0, 10),
         (5e-3, 0.25, 8)]
runs = [(kind, base, warmup, total, 0.0) for kind in ("poly", "linear", "cosine", "constant")
        for base, warmup, total in cases]
# wsd: decay shares 0.1 and 0.3 (a whole number of updates or not), none, and a decay that starts
# where warmup ends
runs += [("wsd", 8e-4, 0.1, 1000, 0.1), ("wsd", 8e-4, 0.05, 77, 0.3), ("wsd", 1e-3, 0.2, 30, 0.0),
         ("wsd", 2e-3, 0.25, 8, 0.75)]
for kind, base, warmup, total, decay in runs:
    out = subprocess.run([sys.argv[1], "schedule", repr(base), repr(warmup), str(total), kind, repr(decay)],
                         check=True, capture_output=True, text=True).stdout.split()
    ours = [float(x) for x in out]
    ref = [reference_lr(kind, base, warmup, total, k, decay) for k in range(total)]
    worst = max(abs(a - b) for a, b in zip(ours, ref)) / base if len(ours) == total else float("inf")
    expect(f"{kind}: base {base:g}, warmup {warmup:g}, {total} steps: {len(ours)} rates, worst error "
           f"{worst:.1e} x base (tolerance {TOL:.0e})", len(ours) == total and worst <= TOL)
    if len(ours) != total:
        continue
    hf = transformers_lr(kind, base, warmup, total)
    if hf is not None:
        worst_hf = max(abs(a - b) for a, b in zip(ours, hf)) / base
        expect(f"  transformers' {kind} schedule: worst error {worst_hf:.1e} x base (tolerance 1e-12)",
               worst_hf <= 1e-12)
    peak = max(range(total), key=lambda k: ours[k] * (1 + 1e-12) ** -k)  # the first of equal maxima
    last_ok = ours[-1] == base if kind == "constant" or (kind == "wsd" and decay == 0) \
        else abs(ours[-1]) <= 1e-15 * base
    expect(f"  first rate {ours[0]:.3e} > 0, last rate {ours[-1]:g}, peak {ours[peak]:.3e} at update "
           f"{peak + 1}", ours[0] > 0 and last_ok and abs(peak + 1 - max(1, warmup * total)) <= 1)
sys.exit(1 if failures else 0)
