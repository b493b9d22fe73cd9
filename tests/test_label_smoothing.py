"""Label smoothing of the MLM cross-entropy (kernels/cpu/crossentropy.c) against PyTorch's
torch.nn.functional.cross_entropy(label_smoothing=s, ignore_index=-1, reduction="none"):
per-row losses, and the gradient of their sum with respect to the logits, for s = 0, 0.1
and 0.3, vocabularies of 2, 37 and 1000, some rows ignored, logits up to +-8.

Compared per case by relative error ||a - b|| / ||b|| <= 1e-5: both sides are FP32
(bertpre sums the row in double and rounds once; PyTorch accumulates in FP32, ~1e-7).
Finite differences of the same op in double precision are in ops_gradcheck.

usage: test_label_smoothing.py CE_DUMP_EXECUTABLE
"""
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect

with checks.needs("torch and safetensors"):
    import torch
    from safetensors.torch import load_file, save_file

TOL = 1e-5
torch.manual_seed(3)
with tempfile.TemporaryDirectory() as tmp:
    for V in (2, 37, 1000):
        for s in (0.0, 0.1, 0.3):
            N = 11
            logits = (torch.rand(N, V) * 16 - 8).float()
            targets = torch.randint(0, V, (N,), dtype=torch.int32)
            targets[3] = targets[7] = -1
            inp, out = os.path.join(tmp, "in.safetensors"), os.path.join(tmp, "out.safetensors")
            save_file({"logits": logits, "targets": targets}, inp)
            subprocess.run([sys.argv[1], "ce", inp, out, repr(s)], check=True)
            ours = load_file(out)
            x = logits.clone().requires_grad_(True)
            ref = torch.nn.functional.cross_entropy(x, targets.long(), ignore_index=-1, reduction="none",
                                                    label_smoothing=s)
            ref.sum().backward()
            loss_err = ((ours["losses"] - ref.detach()).norm() / ref.detach().norm()).item()
            grad_err = ((ours["dlogits"] - x.grad).norm() / x.grad.norm()).item()
            ignored = ours["losses"][3].item() == 0 and ours["dlogits"][7].abs().max().item() == 0
            expect(f"V={V:<4} smoothing {s}: losses rel error {loss_err:.1e}, gradient rel error {grad_err:.1e} "
                   f"(tolerance {TOL:.0e}); ignored rows 0", loss_err <= TOL and grad_err <= TOL and ignored)
sys.exit(checks.exit_status())
