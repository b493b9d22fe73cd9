"""The large-batch options of `bertpre train` as the config reader and --dry-run see them:

  learning-rate scaling: with base_learning_rate B at base_batch_size b, the rate --dry-run
  prints is B x (G / b) for lr_scaling "linear", B x sqrt(G / b) for "sqrt" and B for "none"
  (G the global batch), computed here by formula, relative error <= 1e-5 (the plan prints 6
  significant digits); the plan names the optimizer and the schedule;
  errors: every inconsistent combination of optimizer, schedule and scaling fields stops with
  exit 1 and a message naming the field and the value.

With the argument `emu` instead: `bertpre train` with each optimizer (LAMB poly, LARS linear,
AdamW cosine with label smoothing 0.1, StableAdamW on wsd with decoupled decay, and with
max_grad_norm 0: no global clipping), 4 steps,
dropout on, FP32, on the emulated CUDA backend (cuda-emu: the multi-tensor kernels and the
smoothed cross-entropy through the engine) against the CPU backend: per-step MLM and NSP losses and learning rates, relative
error <= 1e-4 (FP32 on both sides with other summation orders, as cuda_model_emu_fp32; a
wrong rule moves the losses of steps 2-4 by far more); no warning of device allocations still
live at the backend's shutdown (every buffer of the run freed). Skipped without the emulation.

usage: test_train_options.py BERTPRE [emu]
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre = sys.argv[1]
MODEL = {"vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
         "intermediate_size": 16, "max_position_embeddings": 32}
TRAIN = {"micro_batch_size": 8, "seq_length": 16, "max_predictions_per_seq": 3, "steps": 10, "backend": "cpu"}


def dry_run(tmp, **train):
    path = os.path.join(tmp, "run.json")
    with open(path, "w") as f:
        json.dump({"model": MODEL, "train": {**TRAIN, **train}}, f)
    p = subprocess.run([bertpre, "train", path, "--dry-run"], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def emulated_runs(tmp):
    cases = {"lamb": {"learning_rate": 0.02},
             "lars": {"optimizer": "lars", "learning_rate": 0.5, "trust_coefficient": 0.02, "lr_schedule": "linear"},
             "adamw": {"optimizer": "adamw", "learning_rate": 0.003, "lr_schedule": "cosine", "label_smoothing": 0.1},
             "stableadamw": {"optimizer": "stableadamw", "learning_rate": 0.003, "lr_schedule": "wsd",
                             "decay_proportion": 0.5, "weight_decay": 0.1, "decoupled_weight_decay": 1},
             # max_grad_norm 0: no global clipping (ModernBERT's recipe), the kernels' infinite bound
             "stableadamw_unclipped": {"optimizer": "stableadamw", "learning_rate": 0.003, "max_grad_norm": 0.0}}
    rc, out = dry_run(tmp, backend="cuda-emu", precision="fp32")
    if rc != 0:
        print(f"SKIP: the cuda-emu backend cannot run here: {out.strip()}")
        sys.exit(77)
    for name, fields in cases.items():
        runs = {}
        for backend, precision in (("cpu", "fp32"), ("cuda-emu", "fp32")):
            path, metrics = os.path.join(tmp, "run.json"), os.path.join(tmp, f"{name}-{backend}.jsonl")
            with open(path, "w") as f:
                json.dump({"model": MODEL, "train": {**TRAIN, "steps": 4, "log_every": 1, "warmup_proportion": 0.25,
                                                     "backend": backend, "precision": precision,
                                                     "metrics_file": metrics, **fields}}, f)
            p = subprocess.run([bertpre, "train", path], capture_output=True, text=True, timeout=600)
            if p.returncode != 0:
                expect(f"{name} on {backend}: bertpre train exits 0", False, p.stdout[-1000:] + p.stderr)
                continue
            if backend == "cuda-emu":
                expect(f"{name} on cuda-emu: no device allocation left at shutdown", "still live" not in p.stderr,
                       p.stderr[-1000:])
            with open(metrics) as f:
                runs[backend] = [json.loads(line) for line in f]
        if len(runs) < 2:
            continue
        a, b = runs["cuda-emu"], runs["cpu"]
        worst = max(abs(x[k] - y[k]) / max(abs(y[k]), 1e-30) for x, y in zip(a, b)
                    for k in ("mlm_loss", "nsp_loss", "lr"))
        expect(f"{name}: 4 steps on cuda-emu vs cpu, losses and lr: worst rel error {worst:.1e} (tolerance 1e-4)",
               len(a) == len(b) == 4 and worst <= 1e-4, f"{a}\n{b}")


with tempfile.TemporaryDirectory() as tmp:
    if len(sys.argv) > 2 and sys.argv[2] == "emu":
        emulated_runs(tmp)
        sys.exit(checks.exit_status())
    for rule, factor in (("linear", lambda r: r), ("sqrt", math.sqrt), ("none", lambda r: 1.0)):
        for base_lr, base_batch, global_batch in ((1e-3, 256, 1024), (6e-3, 65536, 32768), (2e-3, 8, 8)):
            extra = {} if rule == "none" else {"base_batch_size": base_batch, "lr_scaling": rule}
            rc, out = dry_run(tmp, base_learning_rate=base_lr, global_batch_size=global_batch, **extra)
            want = base_lr * factor(global_batch / base_batch) if rule != "none" else base_lr
            m = re.search(r"steps, lr (\S+),", out)
            got = float(m.group(1)) if m else float("nan")
            err = abs(got - want) / want
            expect(f"lr_scaling {rule}: base {base_lr:g} at batch {base_batch}, global batch {global_batch}: "
                   f"--dry-run prints lr {got:g}, formula {want:g} (rel error {err:.1e}, tolerance 1e-5)",
                   rc == 0 and err <= 1e-5, out)
    rc, out = dry_run(tmp, optimizer="lars", lr_schedule="cosine", learning_rate=2.0)
    expect("the plan names the optimizer and the schedule",
           rc == 0 and "optimizer lars" in out and "cosine decay" in out and "lr 2," in out, out)
    rc, out = dry_run(tmp)
    expect("defaults: lamb, poly, lr 0.001", rc == 0 and "optimizer lamb" in out and "poly decay" in out
           and "lr 0.001," in out, out)

    errors = [
        ({"learning_rate": 1e-3, "base_learning_rate": 1e-3}, ["learning_rate", "base_learning_rate", "both"]),
        ({"base_learning_rate": 1e-3, "lr_scaling": "sqrt"}, ["lr_scaling", "sqrt", "base_batch_size"]),
        ({"lr_scaling": "linear", "base_batch_size": 256}, ["lr_scaling", "linear", "base_learning_rate"]),
        ({"base_learning_rate": 1e-3, "base_batch_size": 256}, ["base_batch_size", "256", "none"]),
        ({"base_batch_size": 256}, ["base_batch_size", "256", "base_learning_rate"]),
        ({"base_learning_rate": 1.0, "base_batch_size": 1, "lr_scaling": "linear", "global_batch_size": 8192},
         ["base_learning_rate", "8192", "8192", "above 1000"]),
        ({"lr_scaling": "cube"}, ["lr_scaling", "cube", "none|linear|sqrt"]),
        ({"lr_schedule": "step"}, ["lr_schedule", "step", "poly|cosine|linear|constant|wsd"]),
        ({"optimizer": "sgd"}, ["optimizer", "sgd", "lamb|lars|adamw|stableadamw"]),
        ({"optimizer": "lars", "beta1": 0.8}, ["beta1", "0.8", "lars"]),
        ({"optimizer": "adamw", "momentum": 0.9}, ["momentum", "0.9", "adamw"]),
        ({"trust_coefficient": 0.01}, ["trust_coefficient", "0.01", "lamb"]),
        ({"optimizer": "adamw", "beta2": 1.0}, ["beta2", "1", "below 1"]),
        ({"optimizer": "lars", "momentum": 1.0}, ["momentum", "1", "below 1"]),
        ({"optimizer": "adamw", "eps": 0.0}, ["eps", "0", "adamw"]),
        ({"optimizer": "lars", "trust_coefficient": 0.0}, ["trust_coefficient", "0", "above 0"]),
        ({"max_grad_norm": -1.0}, ["max_grad_norm", "-1", "out of range"]),
        ({"weight_decay": -0.1}, ["weight_decay", "-0.1", "out of range"]),
        ({"label_smoothing": 1.0}, ["label_smoothing", "1", "out of range"]),
        ({"global_batch_size": 32, "micro_batch_size": 8, "batch_warmup_min_size": 12, "batch_warmup_tokens": 1e6},
         ["batch_warmup_min_size", "12", "multiple of micro_batch_size x ranks = 8"]),
        ({"global_batch_size": 32, "micro_batch_size": 8, "batch_warmup_min_size": 32, "batch_warmup_tokens": 1e6},
         ["batch_warmup_min_size", "32", "below global_batch_size = 32"]),
        ({"global_batch_size": 32, "micro_batch_size": 8, "batch_warmup_min_size": 8},
         ["batch_warmup_min_size", "batch_warmup_tokens", "needs both"]),
        ({"batch_warmup_tokens": 1e6}, ["batch_warmup_min_size", "batch_warmup_tokens", "needs both"]),
    ]
    for fields, words in errors:
        rc, out = dry_run(tmp, **fields)
        expect(f"{json.dumps(fields)}: exit 1, error naming {', '.join(words)}",
               rc == 1 and "run.json" in out and all(w in out for w in words), out)
sys.exit(checks.exit_status())
