#!/usr/bin/env python3
"""Training throughput of bertpre beside PyTorch + transformers on the same GPU and shapes,
with the GEMM rate that model-FLOPs utilization (MFU) is measured against, or the per-op
profile of bertpre. Run by `tools/gpu_suite.sh run bench|profile OUTDIR`; it can be run by
hand the same way after a build.

bench (default): for each shape SEQxMICRO:PRECISION[:HIDDEN_ACT] (default 128x256:fp16,
512x32:fp16, 128x256:bf16 for BERT-large with its exact GELU, then 128x256:fp16:gelu_new and
512x32:fp16:gelu_new: the tanh GELU, which bertpre's CUDA backend runs in the FFN GEMMs'
epilogues; a HIDDEN_ACT runs both frameworks on the model with that hidden_act):
  - bertpre trains STEPS steps of 2 accumulated micro-batches on synthetic batches with a
    metrics file; its steady-state sequences/s and model TFLOP/s are the means over the steps
    after the first two;
  - PyTorch runs tools/bench_torch.py on the same shape and precision: eager with the stock
    BertForPreTraining head, torch.compile likewise (--compile 1), and at the first shape
    eager with the gathered MLM head (bertpre's work); shapes with a HIDDEN_ACT: eager only;
  - (--torch 0 leaves the PyTorch runs out)
  - `bertpre bench gemm` measures the FP16 and BF16 rate of an 8192^3 product.
MFU = model TFLOP/s / measured GEMM TFLOP/s of the same precision ("% of peak" in the log is
against the nominal dense peak instead). Results: OUTDIR/bench.json (every run) and
OUTDIR/bench.txt (the table).

--profile SEQ MICRO: bertpre with BERTPRE_PROFILE for 4 steps (the first 2 left out), FP16;
the report goes to OUTDIR/profile-SEQ.txt.

--unpad SEQxMICRO:SHARDS,...: bertpre on real shards (a `bertpre prep` output of that
sequence length), train.unpad off and on, one after the other, STEPS steps each of 2
accumulated micro-batches, FP16: sequences/s, model TFLOP/s counted on all B x T tokens
(padding included) and on the real tokens only (`model_tflops_real`), MFU on the real
tokens (against the measured FP16 GEMM rate), and the speed-up of unpad on over off.
Results: OUTDIR/unpad.json and OUTDIR/unpad.txt.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--out", required=True)
ap.add_argument("--bertpre", default="build-gpu/bertpre")
ap.add_argument("--model", default="configs/bert-large.json")
ap.add_argument("--backend", default="cuda")
ap.add_argument("--shapes", default="128x256:fp16,512x32:fp16,128x256:bf16,128x256:fp16:gelu_new,512x32:fp16:gelu_new")
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--compile", type=int, default=1,
                help="1: torch.compile at every shape, 2: at the first shape only (compiling takes minutes), 0: none")
ap.add_argument("--torch", type=int, default=1, help="0: bertpre alone, no PyTorch runs")
ap.add_argument("--gemm-size", type=int, default=8192)
ap.add_argument("--torch-device", default="cuda")
ap.add_argument("--torch-dtype", default=None, help="override the PyTorch precision (fp32 for a CPU smoke run)")
ap.add_argument("--timeout", type=int, default=240)
ap.add_argument("--profile", nargs=2, type=int, metavar=("SEQ", "MICRO"))
ap.add_argument("--unpad", metavar="SEQxMICRO:SHARDS,...", help="padded against unpadded training on real shards")
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
fmt = lambda v, w, spec: (format(v, spec) if v is not None else "-").rjust(w)  # a table cell; "-" for None


def run(cmd, env=None):
    t0 = time.time()
    print("$", " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired as e:
        print(f"timed out after {args.timeout} s\n{e.stdout or ''}{e.stderr or ''}", flush=True)
        return None
    print(p.stdout[-4000:], p.stderr[-4000:], f"exit {p.returncode} in {time.time() - t0:.1f} s", flush=True)
    return p if p.returncode == 0 else None


def model_for(act):
    """The model config: --model itself, or a copy with hidden_act = act."""
    if not act:
        return os.path.abspath(args.model)
    path = os.path.join(args.out, f"model-{act}.json")
    with open(args.model) as f:
        cfg = json.load(f)
    json.dump(dict(cfg, hidden_act=act), open(path, "w"))
    return os.path.abspath(path)


def bertpre_config(seq, micro, precision, steps, metrics, name="", act="", **extra):
    path = os.path.join(args.out, f"bertpre-{seq}x{micro}-{precision}{name}.json")
    train = {"backend": args.backend, "precision": precision, "micro_batch_size": micro,
             "global_batch_size": 2 * micro, "seq_length": seq, "max_predictions_per_seq": max(1, seq * 20 // 128),
             "steps": steps, "learning_rate": 1e-4, "warmup_proportion": 0.1, "log_every": 1,
             "metrics_file": metrics}
    with open(path, "w") as f:
        json.dump({"model": model_for(act), "train": dict(train, **extra)}, f)
    return path


def bertpre_run(seq, micro, precision, name="", act="", **extra):
    name += f"-{act}" if act else ""
    metrics = os.path.join(args.out, f"bertpre-{seq}x{micro}-{precision}{name}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    p = run([args.bertpre, "train", bertpre_config(seq, micro, precision, args.steps, metrics, name, act, **extra)])
    if not p:
        return {"framework": "bertpre", "seq": seq, "micro": micro, "dtype": precision, "act": act,
                "error": "run failed"}
    rows = [json.loads(line) for line in open(metrics) if '"eval"' not in line]
    steady = rows[2:] if len(rows) > 2 else rows
    mean = lambda k: sum(r[k] for r in steady) / len(steady)
    return {"framework": "bertpre", "seq": seq, "micro": micro, "dtype": precision, "act": act,
            "steps_timed": len(steady),
            "seq_per_s": round(mean("seq_per_s"), 2), "model_tflops": float(f'{mean("model_tflops"):.4g}'),
            "model_tflops_real": float(f'{mean("model_tflops_real"):.4g}'),
            "real_token_fraction": round(mean("real_tokens_per_s") / mean("tokens_per_s"), 4),
            "peak_percent": steady[-1].get("peak_percent"), "last_mlm_loss": steady[-1]["mlm_loss"]}


def torch_run(seq, micro, precision, act, mode, head):
    dtype = args.torch_dtype or precision
    p = run([sys.executable, os.path.join(root, "tools/bench_torch.py"), model_for(act), str(seq), str(micro),
             "--dtype", dtype, "--mode", mode, "--head", head, "--steps", str(args.steps), "--device",
             args.torch_device])
    row = {"framework": "pytorch", "seq": seq, "micro": micro, "dtype": dtype, "act": act, "mode": mode, "head": head}
    if not p:
        return dict(row, error="run failed")
    return dict(row, **json.loads([line for line in p.stdout.splitlines() if line.startswith("{")][-1]))


def gemm_rate(precision):
    n = str(args.gemm_size)
    p = run([args.bertpre, "bench", "gemm", "--backend", args.backend, "--precision", precision, "--m", n, "--n", n,
             "--k", n])
    m = p and re.search(r"([\d.e+-]+) TFLOP/s", p.stdout)
    return float(m.group(1)) if m else None


if args.profile:
    seq, micro = args.profile
    report = os.path.join(args.out, f"profile-{seq}.txt")
    metrics = os.path.join(args.out, f"profile-{seq}.jsonl")
    env = dict(os.environ, BERTPRE_PROFILE=report, BERTPRE_PROFILE_SKIP_STEPS="2")
    ok = run([args.bertpre, "train", bertpre_config(seq, micro, "fp16", 4, metrics)], env=env)
    sys.exit(0 if ok and os.path.exists(report) else 1)

if args.unpad:
    rate = gemm_rate("fp16")
    rows, lines = [{"framework": "gemm", "size": args.gemm_size, "tflops": {"fp16": rate}}], []
    lines.append(f"GEMM {args.gemm_size}^3 fp16: " + (f"{rate:.1f} TFLOP/s" if rate else "failed"))
    lines.append(f"{'shape':<12} {'real tokens':>11} {'unpad':>5} {'seq/s':>9} {'TFLOP/s (padded)':>16} "
                 f"{'TFLOP/s (real)':>14} {'MFU (real)':>10} | {'speed-up':>8}")
    for s in args.unpad.split(","):
        m = re.fullmatch(r"(\d+)x(\d+):(.+)", s.strip())
        if not m:
            sys.exit(f"bench_gpu: --unpad: '{s}' is not SEQxMICRO:SHARDS (e.g. 128x256:shards-128)")
        seq, micro, shards = int(m.group(1)), int(m.group(2)), os.path.abspath(m.group(3))
        pair = {}
        for mode in ("off", "on"):
            r = bertpre_run(seq, micro, "fp16", f"-unpad-{mode}", data=shards, unpad=mode)
            rows.append(dict(r, unpad=mode, data=shards))
            pair[mode] = r
            mfu = 100 * r["model_tflops_real"] / rate if rate and "model_tflops_real" in r else None
            lines.append(f"{f'{seq}x{micro}':<12} {fmt(r.get('real_token_fraction'), 11, '.3f')} {mode:>5} "
                         f"{fmt(r.get('seq_per_s'), 9, '.1f')} {fmt(r.get('model_tflops'), 16, '.1f')} "
                         f"{fmt(r.get('model_tflops_real'), 14, '.1f')} {fmt(mfu, 9, '.1f')}% | " +
                         (fmt(r["seq_per_s"] / pair["off"]["seq_per_s"], 7, '.3f') + "x"
                          if mode == "on" and "seq_per_s" in r and "seq_per_s" in pair["off"] else ""))
    json.dump(rows, open(os.path.join(args.out, "unpad.json"), "w"), indent=1)
    text = "\n".join(lines) + "\n"
    open(os.path.join(args.out, "unpad.txt"), "w").write(text)
    print(text)
    sys.exit(1 if any("error" in r for r in rows) or not rate else 0)

shapes = []
for s in args.shapes.split(","):
    m = re.fullmatch(r"(\d+)x(\d+):(fp16|bf16|fp32)(?::(gelu|gelu_new|gelu_pytorch_tanh|gelu_fast))?", s.strip())
    if not m:
        sys.exit(f"bench_gpu: --shapes: '{s}' is not SEQxMICRO:PRECISION[:HIDDEN_ACT] (e.g. 128x256:fp16, "
                 f"512x32:fp16:gelu_new)")
    shapes.append((int(m.group(1)), int(m.group(2)), m.group(3), m.group(4) or ""))

rows, failed = [], 0
rates = {p: gemm_rate(p) for p in sorted({p for _, _, p, _ in shapes if p != "fp32"} | {"fp16"})}
rows.append({"framework": "gemm", "size": args.gemm_size, "tflops": rates})
for i, (seq, micro, precision, act) in enumerate(shapes):
    rows.append(bertpre_run(seq, micro, precision, act=act))
    compiled = (args.compile == 1 or (args.compile == 2 and i == 0)) and not act
    runs = [("eager", "full")] + ([("compile", "full")] if compiled else []) + ([("eager", "gathered")] if i == 0 else [])
    runs = runs if args.torch else []
    for mode, head in runs:
        rows.append(torch_run(seq, micro, precision, act, mode, head))
failed = sum(1 for r in rows if "error" in r) + sum(1 for v in rates.values() if v is None)
json.dump(rows, open(os.path.join(args.out, "bench.json"), "w"), indent=1)

lines = [f"GEMM {args.gemm_size}^3: " + ", ".join(f"{p} {v:.1f} TFLOP/s" if v else f"{p} failed" for p, v in
                                                  rates.items()),
         f"{'shape':<25} {'bertpre seq/s':>13} {'TFLOP/s':>8} {'MFU':>6} {'% peak':>7} | {'torch eager':>11} "
         f"{'compile':>8} {'gathered':>8} | {'vs eager':>8} {'vs compile':>10}"]
for seq, micro, precision, act in shapes:
    ours = next(r for r in rows if r["framework"] == "bertpre" and (r["seq"], r["micro"], r["dtype"], r["act"]) ==
                (seq, micro, precision, act))
    def torch_rate(mode, head):
        r = next((r for r in rows if r["framework"] == "pytorch" and (r["seq"], r["micro"], r["act"]) ==
                  (seq, micro, act) and r["mode"] == mode and r["head"] == head and
                  r["dtype"] == (args.torch_dtype or precision)), None)
        return r.get("seq_per_s") if r else None
    eager, comp, gath = torch_rate("eager", "full"), torch_rate("compile", "full"), torch_rate("eager", "gathered")
    rate = rates.get(precision)
    mfu = 100 * ours["model_tflops"] / rate if rate and "model_tflops" in ours else None
    ratio = lambda a, b: a / b if a and b else None
    label = f"{seq}x{micro} {precision}" + (f" {act}" if act else "")
    lines.append(f"{label:<25} {fmt(ours.get('seq_per_s'), 13, '.1f')} "
                 f"{fmt(ours.get('model_tflops'), 8, '.1f')} {fmt(mfu, 5, '.1f')}% {fmt(ours.get('peak_percent'), 6, '.1f')}% | "
                 f"{fmt(eager, 11, '.1f')} {fmt(comp, 8, '.1f')} {fmt(gath, 8, '.1f')} | "
                 f"{fmt(ratio(ours.get('seq_per_s'), eager), 8, '.2f')} {fmt(ratio(ours.get('seq_per_s'), comp), 10, '.2f')}")
text = "\n".join(lines) + "\n"
open(os.path.join(args.out, "bench.txt"), "w").write(text)
print(text)
sys.exit(1 if failed else 0)
