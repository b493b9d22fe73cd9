"""`bertpre train` with a metrics file: one JSON object per log step, with every field of
the log line, of the right type and consistent with the run's configuration.

Checked without outputs of bertpre itself as reference: the steps logged (every
log_every, and the last), lr against NVIDIA's formula re-implemented here (relative error
<= 1e-12: the same double formula, written with 17 digits), tokens/s = seq/s x seq_length,
model TFLOP/s / seq/s within the FLOP count of a sequence with 0 and with
max_predictions_per_seq masked positions (the formula in docs/TRAINING.md, re-implemented here),
the real-token rates (real tokens per sequence between 5 and seq_length, and their model
FLOPs within the same formula's bounds for that mean length),
losses finite and positive, accuracies in [0, 1], loss scale 1 and no skipped steps on the
FP32 CPU backend, no % of peak on the CPU, ETA 0 at the end and elapsed time increasing,
the printed log lines naming the same steps; and an unwritable metrics file is an error
naming the path and the field.

usage: test_metrics.py BERTPRE
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre = sys.argv[1]
MODEL = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 32, "max_position_embeddings": 32}
TRAIN = {"micro_batch_size": 4, "global_batch_size": 8, "seq_length": 24, "max_predictions_per_seq": 4,
         "steps": 10, "log_every": 3, "learning_rate": 0.01, "warmup_proportion": 0.25}
FIELDS = {"step": int, "steps": int, "mlm_loss": float, "nsp_loss": float, "mlm_accuracy": float,
          "nsp_accuracy": float, "lr": float, "loss_scale": float, "skipped_steps": int, "seq_per_s": float,
          "tokens_per_s": float, "model_tflops": float, "eta_s": float, "elapsed_s": float,
          "peak_percent": type(None), "real_tokens_per_s": float, "model_tflops_real": float}




def nvidia_lr(step):
    progress = step / TRAIN["steps"]
    base, warmup = TRAIN["learning_rate"], TRAIN["warmup_proportion"]
    return base * progress / warmup if progress < warmup else base * (1.0 - progress) ** 0.5


def flops_per_sequence(masked, tokens=None, tokens_sq=None):
    """Per sequence of `tokens` real tokens (mean over the sequences; tokens_sq: mean of the squared lengths)."""
    L, C, I, V = (MODEL[k] for k in ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size"))
    T = TRAIN["seq_length"]
    tokens = T if tokens is None else tokens
    tokens_sq = tokens * tokens if tokens_sq is None else tokens_sq
    return 6 * (L * tokens * (4 * C * C + 2 * C * I) + L * 2 * tokens_sq * C + C * C + 2 * C +
                masked * (C * C + C * V))


with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "run.json")
    with open(cfg, "w") as f:
        json.dump({"model": MODEL, "train": TRAIN}, f)
    metrics = os.path.join(tmp, "metrics.jsonl")
    p = subprocess.run([bertpre, "train", cfg, "--set", f"train.metrics_file={metrics}"], capture_output=True,
                       text=True)
    expect("bertpre train with a metrics file exits 0", p.returncode == 0, p.stdout + p.stderr)
    lines = [json.loads(line) for line in open(metrics)] if os.path.exists(metrics) else []
    steps = [r.get("step") for r in lines]
    expect(f"logged steps {steps} = every {TRAIN['log_every']} and the last", steps == [3, 6, 9, 10])
    printed = [line.split("|")[0].split()[1] for line in p.stdout.splitlines() if line.startswith("step ")]
    expect(f"printed log lines name the same steps ({printed})", printed == [f"{s}/{TRAIN['steps']}" for s in steps])

    for r in lines:
        s = r.get("step")
        bad = [k for k, t in FIELDS.items() if k not in r or type(r[k]) is not t]
        extra = [k for k in r if k not in FIELDS]
        expect(f"step {s}: every field present with its type (wrong: {bad}, unknown: {extra})", not bad and not extra)
        if bad:
            continue
        finite = all(math.isfinite(r[k]) for k, t in FIELDS.items() if t is float)
        expect(f"step {s}: numbers finite, losses > 0 (mlm {r['mlm_loss']:.4f}, nsp {r['nsp_loss']:.4f}), "
               f"accuracies in [0, 1]", finite and r["mlm_loss"] > 0 and r["nsp_loss"] > 0
               and 0 <= r["mlm_accuracy"] <= 1 and 0 <= r["nsp_accuracy"] <= 1)
        ref = nvidia_lr(s)
        err = abs(r["lr"] - ref) / ref if ref else abs(r["lr"])
        expect(f"step {s}: lr {r['lr']:.6e} follows NVIDIA's schedule ({ref:.6e}, rel error {err:.1e} <= 1e-12)",
               err <= 1e-12)
        expect(f"step {s}: loss scale 1, 0 skipped steps, no % of peak on the CPU",
               r["loss_scale"] == 1.0 and r["skipped_steps"] == 0 and r["peak_percent"] is None)
        tok_err = abs(r["tokens_per_s"] - r["seq_per_s"] * TRAIN["seq_length"]) / r["tokens_per_s"]
        expect(f"step {s}: tokens/s = seq/s x seq_length (rel error {tok_err:.1e} <= 1e-12)", tok_err <= 1e-12)
        per_seq = r["model_tflops"] * 1e12 / r["seq_per_s"]
        lo, hi = flops_per_sequence(0), flops_per_sequence(TRAIN["max_predictions_per_seq"])
        expect(f"step {s}: model FLOPs per sequence {per_seq:.4e} within [{lo:.4e}, {hi:.4e}] (rel slack 1e-9)",
               lo * (1 - 1e-9) <= per_seq <= hi * (1 + 1e-9))
        # The real tokens (the synthetic batches pad about 10% of their sequences): a mean
        # length in [5, T], and model FLOPs between those of that mean length (the sum of
        # squared lengths is at least n x mean^2) and those with every squared length at most
        # T x length, with 0 and with max_predictions_per_seq masked positions.
        T = TRAIN["seq_length"]
        mean_len = r["real_tokens_per_s"] / r["seq_per_s"]
        per_seq_real = r["model_tflops_real"] * 1e12 / r["seq_per_s"]
        lo = flops_per_sequence(0, mean_len, mean_len * mean_len)
        hi = flops_per_sequence(TRAIN["max_predictions_per_seq"], mean_len, mean_len * T)
        expect(f"step {s}: real tokens per sequence {mean_len:.3f} in [5, {T}]; real model FLOPs per sequence "
               f"{per_seq_real:.4e} within [{lo:.4e}, {hi:.4e}] (rel slack 1e-9), at most the padded ones",
               5 <= mean_len <= T * (1 + 1e-12) and lo * (1 - 1e-9) <= per_seq_real <= hi * (1 + 1e-9)
               and r["model_tflops_real"] <= r["model_tflops"] * (1 + 1e-12))
        expect(f"step {s}: eta {r['eta_s']:.3f} s >= 0, steps = {r['steps']}",
               r["eta_s"] >= 0 and r["steps"] == TRAIN["steps"])
    short = [r["step"] for r in lines if r.get("real_tokens_per_s", 1e300) < r.get("tokens_per_s", 0) * (1 - 1e-9)]
    expect(f"the padding of the synthetic batches shows: fewer real than padded tokens at steps {short}", short)
    if lines and all("elapsed_s" in r and "eta_s" in r for r in lines):
        elapsed = [r["elapsed_s"] for r in lines]
        expect("elapsed time increases, ETA is 0 after the last step",
               all(a < b for a, b in zip(elapsed, elapsed[1:])) and lines[-1]["eta_s"] == 0)

    missing_dir = os.path.join(tmp, "no-such-dir", "m.jsonl")
    p = subprocess.run([bertpre, "train", cfg, "--set", f"train.metrics_file={missing_dir}"], capture_output=True,
                       text=True)
    out = p.stdout + p.stderr
    expect("unwritable metrics file: non-zero exit naming the path and train.metrics_file",
           p.returncode != 0 and missing_dir in out and "metrics_file" in out, out)
sys.exit(checks.exit_status())
