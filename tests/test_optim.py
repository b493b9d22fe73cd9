"""bertpre's optimizers (engine/optim.c, CPU reference) against independent PyTorch
implementations, 20 steps each over tensors of several shapes, including an all-zero weight
and no-decay tensors (biases, LayerNorm), with gradients large enough to be clipped on some
steps and not on others, and a changing learning rate.

  lamb   timm.optim.Lamb: apex FusedLAMB semantics, its own clipping at global norm 1.0,
         bias-corrected moments (0.9, 0.999), eps 1e-6 outside the square root, weight decay
         0.01 added to the update for weights only, trust ratio ||w|| / ||u|| (1 when either
         is 0) only where weight decay applies (trust_clip=False, always_adapt=False).
  lars   timm.optim.Lars with two parameter groups: the weights with weight_decay 0.01 and
         always_adapt=True, biases/LayerNorm with weight_decay 0 and always_adapt=False (no
         decay, no adaptation); momentum 0.9, dampening 0, nesterov=False, trust_coeff 0.02,
         eps 1e-8, trust_clip=False. timm's first step sets the buffer to the step itself,
         which equals bertpre's zero-initialized buffer times the momentum plus the step.
  adamw  torch.optim.AdamW, groups with weight_decay 0.01 and 0, betas (0.9, 0.999),
         eps 1e-8.
  stableadamw  torch-optimi's StableAdamW (in .venv-hf5: it needs torch 2), groups with
         weight_decay 0.01 and 0, betas (0.9, 0.98), eps 1e-6, and again with its
         decouple_lr=True and max_lr the base rate (bertpre's decoupled_weight_decay, the
         decay relative to the peak rate) at weight decay 0.3, which moves the weights
         visibly; the gradients here make the per-tensor RMS exceed 1 on the first steps
         (the rate divided) and not later (checked); and once more with max_grad_norm 0
         (ModernBERT's recipe: no global clipping, the reference's gradients unclipped).
LARS, AdamW and StableAdamW have no clipping of their own: the reference clips the gradients as bertpre
does, g *= min(1, 1.0 / ||g||) over all tensors (torch's clip_grad_norm_ adds 1e-6 to the
norm, which would differ by ~1e-7).

Compared per tensor after the last step, relative error ||a - b|| / ||b|| <= 1e-5: both
sides are FP32 with different summation orders for the norms (~1e-7 relative per step),
compounded over 20 steps.

usage: test_optim.py DUMP_EXECUTABLE lamb|lars|adamw|stableadamw
"""
import os
import subprocess
import sys
import tempfile

import checks

WHICH = sys.argv[2]
if WHICH == "stableadamw":
    checks.run_in_hf5()
    with checks.needs("torch 2, torch-optimi and safetensors (in .venv-hf5)"):
        import torch
        from optimi import StableAdamW
        from safetensors.torch import load_file, save_file
else:
    with checks.needs("torch, safetensors and timm"):
        import torch
        from safetensors.torch import load_file, save_file
        from timm.optim.lamb import Lamb
        from timm.optim.lars import Lars

STEPS, TOL = 20, 1e-5
torch.manual_seed(1)
shapes = {
    "encoder.dense.weight": (33, 17),
    "encoder.dense.bias": (33,),
    "encoder.LayerNorm.weight": (17,),
    "encoder.LayerNorm.bias": (17,),
    "head.weight": (2, 17),
    "zero.weight": (3, 4),
}
init = {n: torch.randn(s) * 0.1 for n, s in shapes.items()}
init["encoder.LayerNorm.weight"] += 1.0
init["zero.weight"].zero_()
base_lr = {"lamb": 6e-3, "lars": 0.5, "adamw": 2e-3, "stableadamw": 2e-3}[WHICH]
lrs = torch.tensor([base_lr * (0.5 + 0.5 * (t % 7) / 7) for t in range(STEPS)], dtype=torch.float32)
grads = []
for t in range(STEPS):
    scale = 0.5 if t % 3 else 0.002  # global norm well above 1 (clipped) on most steps, below on others
    grads.append({n: torch.randn(s) * scale for n, s in shapes.items()})

failures = 0


def run(variant):
    """One reference run and one bertpre run of the optimizer; returns the failures."""
    params = {n: torch.nn.Parameter(v.clone()) for n, v in init.items()}
    no_decay_names = [n for n in shapes if n.endswith("bias") or "LayerNorm" in n]
    decay = [params[n] for n in shapes if n not in no_decay_names]
    no_decay = [params[n] for n in no_decay_names]
    dump_args = []
    if WHICH == "lamb":
        opt = Lamb([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                   lr=float(lrs[0]), betas=(0.9, 0.999), eps=1e-6, max_grad_norm=1.0, bias_correction=True,
                   grad_averaging=True, trust_clip=False, always_adapt=False)
    elif WHICH == "lars":
        opt = Lars([{"params": decay, "weight_decay": 0.01, "always_adapt": True},
                    {"params": no_decay, "weight_decay": 0.0, "always_adapt": False}],
                   lr=float(lrs[0]), momentum=0.9, dampening=0, nesterov=False, trust_coeff=0.02, eps=1e-8,
                   trust_clip=False)
        dump_args = ["weight_decay=0.01", "momentum=0.9", "trust_coefficient=0.02", "eps=1e-8"]
    elif WHICH == "adamw":
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=float(lrs[0]), betas=(0.9, 0.999), eps=1e-8)
        dump_args = ["weight_decay=0.01", "beta1=0.9", "beta2=0.999", "eps=1e-8"]
    elif WHICH == "stableadamw":
        decoupled = variant == "decoupled"
        unclipped = variant == "unclipped"
        wd = 0.3 if decoupled else 0.01
        opt = StableAdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                          lr=float(lrs[0]), betas=(0.9, 0.98), eps=1e-6, decouple_lr=decoupled,
                          max_lr=base_lr if decoupled else None, foreach=False)
        dump_args = [f"weight_decay={wd}", "beta1=0.9", "beta2=0.98", "eps=1e-6"]
        if decoupled:
            dump_args.append(f"decay_lr_ref={base_lr!r}")
        if unclipped:
            dump_args.append("max_grad_norm=0")
    else:
        sys.exit(f"usage: test_optim.py DUMP lamb|lars|adamw|stableadamw (got {WHICH})")

    clipped = damped = 0
    for t in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = float(lrs[t])
        norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads[t].values())).item()
        clipped += norm > 1.0
        # Lamb clips by itself; max_grad_norm 0 clips nothing
        factor = min(1.0, 1.0 / norm) if WHICH != "lamb" and variant != "unclipped" else 1.0
        for n, p in params.items():
            p.grad = (grads[t][n].double() * factor).float()
        opt.step()
        if WHICH == "stableadamw":  # the per-tensor RMS above 1 on some steps: the rate divided there
            damped += any((p.grad.double() ** 2 / opt.state[p]["exp_avg_sq"].double().clamp(min=1e-12)).mean() > 1
                          for p in params.values())

    with tempfile.TemporaryDirectory() as tmp:
        tensors = {"param." + n: v for n, v in init.items()}
        tensors["lr"] = lrs
        for t in range(STEPS):
            for n in shapes:
                tensors[f"grad.{t}.{n}"] = grads[t][n]
        save_file(tensors, os.path.join(tmp, "in.safetensors"))
        subprocess.run([sys.argv[1], "optim", os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors"),
                        WHICH] + dump_args, check=True, stdout=subprocess.DEVNULL)
        ours = load_file(os.path.join(tmp, "out.safetensors"))

    bad = 0
    name = WHICH + (f" ({variant})" if variant else "")
    print(f"{name}: {STEPS} steps, {clipped} with the global gradient norm above 1"
          + (" (not clipped)" if variant == "unclipped" else " (clipped)")
          + (f", {damped} with a tensor's RMS above 1" if WHICH == "stableadamw" else ""))
    if not 0 < clipped < STEPS:
        print("FAIL the case must have clipped and unclipped steps")
        bad += 1
    if WHICH == "stableadamw" and not 0 < damped < STEPS:
        print("FAIL the case must have steps with a tensor's RMS above 1 and steps without")
        bad += 1
    for n in shapes:
        ref = params[n].detach().double()
        err = (ours["param." + n].double() - ref).norm().item() / ref.norm().item()
        moved = (ref - init[n].double()).norm().item()
        ok = err <= TOL and moved > 0
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {n:<28} rel error {err:.3e} (tolerance {TOL:.0e}), moved {moved:.3e}")
    return bad


for variant in (["", "decoupled", "unclipped"] if WHICH == "stableadamw" else [""]):
    failures += run(variant)
sys.exit(1 if failures else 0)
