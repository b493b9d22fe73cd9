"""bertpre's LAMB (engine/lamb.c) against timm's Lamb, an independent PyTorch implementation
of the same semantics as NVIDIA apex's FusedLAMB: global gradient-norm clipping at 1.0,
bias-corrected moments (0.9, 0.999), eps 1e-6 outside the square root, weight decay 0.01
added to the update for weights and not for biases/LayerNorm, per-tensor trust ratio
||w|| / ||u|| (1 when either is 0) only where weight decay applies.

20 steps over tensors of several shapes, including an all-zero weight (trust ratio 1) and
no-decay tensors, with gradients large enough to be clipped on some steps and not on
others, and a changing learning rate. Compared per tensor after the last step, relative
error ||a - b|| / ||b|| <= 1e-5: both sides are FP32 with different summation orders for the
norms (~1e-7 relative per step), compounded over 20 steps.

usage: test_lamb.py LAMB_DUMP_EXECUTABLE
"""
import os
import subprocess
import sys
import tempfile

try:
    import torch
    from safetensors.torch import load_file, save_file
    from timm.optim.lamb import Lamb
except ImportError as e:
    print(f"SKIP: needs torch, safetensors and timm ({e}); tools/setup.sh installs them")
    sys.exit(77)

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
lrs = torch.tensor([6e-3 * (0.5 + 0.5 * (t % 7) / 7) for t in range(STEPS)], dtype=torch.float32)
grads = []
for t in range(STEPS):
    scale = 0.5 if t % 3 else 0.002  # global norm well above 1 (clipped) on most steps, below on others
    grads.append({n: torch.randn(s) * scale for n, s in shapes.items()})

params = {n: torch.nn.Parameter(v.clone()) for n, v in init.items()}
no_decay_names = [n for n in shapes if n.endswith("bias") or "LayerNorm" in n]
groups = [
    {"params": [params[n] for n in shapes if n not in no_decay_names], "weight_decay": 0.01},
    {"params": [params[n] for n in no_decay_names], "weight_decay": 0.0},
]
opt = Lamb(groups, lr=float(lrs[0]), betas=(0.9, 0.999), eps=1e-6, max_grad_norm=1.0, bias_correction=True,
           grad_averaging=True, trust_clip=False, always_adapt=False)
clipped = 0
for t in range(STEPS):
    for g in opt.param_groups:
        g["lr"] = float(lrs[t])
    for n, p in params.items():
        p.grad = grads[t][n].clone()
    clipped += torch.sqrt(sum((g ** 2).sum() for g in grads[t].values())).item() > 1.0
    opt.step()

with tempfile.TemporaryDirectory() as tmp:
    tensors = {"param." + n: v for n, v in init.items()}
    tensors["lr"] = lrs
    for t in range(STEPS):
        for n in shapes:
            tensors[f"grad.{t}.{n}"] = grads[t][n]
    save_file(tensors, os.path.join(tmp, "in.safetensors"))
    subprocess.run([sys.argv[1], os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")],
                   check=True, stdout=subprocess.DEVNULL)
    ours = load_file(os.path.join(tmp, "out.safetensors"))

failures = 0
print(f"{STEPS} steps, {clipped} with the global gradient norm clipped")
if not 0 < clipped < STEPS:
    print("FAIL the case must have clipped and unclipped steps")
    failures += 1
for n in shapes:
    ref = params[n].detach().double()
    err = (ours["param." + n].double() - ref).norm().item() / ref.norm().item()
    moved = (ref - init[n].double()).norm().item()
    ok = err <= TOL and moved > 0
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {n:<28} rel error {err:.3e} (tolerance {TOL:.0e}), moved {moved:.3e}")
sys.exit(1 if failures else 0)
