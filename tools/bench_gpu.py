#!/usr/bin/env python3
"""Training throughput of bertpre beside PyTorch + transformers on the same GPU and shapes,
with the GEMM rate that model-FLOPs utilization (MFU) is measured against, or the per-op
profile of bertpre. Run by `tools/gpu_suite.sh run bench|profile OUTDIR`; it can be run by
hand the same way after a build.

bench (default): for each shape SEQxMICRO[xACCUM]:PRECISION[:HIDDEN_ACT] (default
128x256:fp16, 512x32:fp16, 128x256:bf16 for BERT-large with its exact GELU, then
128x256:fp16:gelu_new and 512x32:fp16:gelu_new: the tanh GELU, which bertpre's CUDA backend
runs in the FFN GEMMs' epilogues; a HIDDEN_ACT runs both frameworks on the model with that
hidden_act; ACCUM micro-batches per optimizer step, 2 unless given):
  - bertpre trains STEPS steps of ACCUM accumulated micro-batches on synthetic batches with a
    metrics file (at ACCUM > 2, max(4, STEPS x 2 / ACCUM) steps); its steady-state
    sequences/s and model TFLOP/s are the means over the steps after the first two;
  - PyTorch runs tools/bench_torch.py on the same shape and precision (shapes of 2
    micro-batches per step only): eager with the stock BertForPreTraining head, and at the
    first shape eager with the gathered MLM head (bertpre's work); then torch.compile likewise
    (--compile 1: every shape but those with a HIDDEN_ACT; 2: the first shape only), after
    every other run;
  - (--torch 0 leaves the PyTorch runs out)
  - `bertpre bench gemm` measures the FP16 and BF16 rate of an 8192^3 product, and names the
    GPU: the table's first line, so that a figure is read as that GPU's.
--model: a model config (BertConfig, or a ModernBertConfig with model_type modernbert), or a
training config whose "model" section (an object or a path) is one. A ModernBERT trains MLM
only on both sides (bench_torch.py's ModernBertForMaskedLM with SDPA attention; its gathered
head is transformers' sparse_prediction), a HIDDEN_ACT sets its hidden_activation, and the
table adds the tokens/s of each shape, bertpre's rows x SEQ and its real tokens beside them
(ModernBERT's own training is quoted in tokens/s).

MFU = model TFLOP/s / measured GEMM TFLOP/s of the same precision ("% of peak" is against the
GPU's datasheet dense peak instead, named in the table). Results: OUTDIR/bench.json (every
run) and OUTDIR/bench.txt (the table), both rewritten after every run, so that a command cut
short keeps what it measured.

A PyTorch run that cannot run (out of memory, a timeout, an error, or no time left before
--deadline) is a baseline unavailable, with its reason in the table and in bench.json, not a
failure: the exit status is 1 only when a bertpre run or a GEMM rate fails. --deadline
(seconds since the epoch) bounds every run's timeout; a torch.compile run is left out when
less than --compile-seconds remain, and a run that would start after the deadline is "cut".

--profile SEQ MICRO: bertpre with BERTPRE_PROFILE for 4 steps (the first 2 left out), FP16;
the report goes to OUTDIR/profile-SEQ.txt.

--unpad SEQxMICRO:SHARDS,...: bertpre on real shards (a `bertpre prep` output of that
sequence length), train.unpad off and on, one after the other, STEPS steps each of 2
accumulated micro-batches, FP16: sequences/s, model TFLOP/s counted on all B x T tokens
(padding included) and on the real tokens only (`model_tflops_real`), MFU on the real
tokens (against the measured FP16 GEMM rate), and the speed-up of unpad on over off;
--objective mlm trains MLM only (shards packed by `bertpre prep --packing full-sentences`).
Results: OUTDIR/unpad.json and OUTDIR/unpad.txt.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import common

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
ap.add_argument("--deadline", type=float, default=0, help="seconds since the epoch by which every run has ended (0: none)")
ap.add_argument("--compile-seconds", type=int, default=240,
                help="the time a torch.compile run needs (compilation included): left out with less before --deadline")
ap.add_argument("--torch-script", default=None, help="the PyTorch benchmark script (default tools/bench_torch.py)")
ap.add_argument("--profile", nargs=2, type=int, metavar=("SEQ", "MICRO"))
ap.add_argument("--unpad", metavar="SEQxMICRO:SHARDS,...", help="padded against unpadded training on real shards")
ap.add_argument("--objective", choices=["mlm+nsp", "mlm"], default="mlm+nsp",
                help="--unpad: train.objective (mlm: MLM only, for shards packed without sentence pairs)")
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
model_cfg = common.model_section(args.model)
with open(args.model) as f:
    if "model" in json.load(f):  # a training config: its model section, written out for both frameworks
        args.model = os.path.join(args.out, "model.json")
        json.dump(model_cfg, open(args.model, "w"))
modern = model_cfg.get("model_type") == "modernbert"
fmt = lambda v, w, spec: (format(v, spec) if v is not None else "-").rjust(w)  # a table cell; "-" for None


def seconds_left():
    return args.deadline - time.time() if args.deadline else float("inf")


def run(cmd, env=None):
    """cmd's CompletedProcess (returncode None when it timed out, its output in stdout)."""
    t0 = time.time()
    limit = max(1, int(min(args.timeout, seconds_left())))
    print("$", " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env)
    except subprocess.TimeoutExpired as e:
        out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
        print(f"timed out after {limit} s\n{out[-4000:]}", flush=True)
        p = subprocess.CompletedProcess(cmd, None, out, f"timed out after {limit} s")
        p.cut = limit < args.timeout  # ended by --deadline, not by its own timeout
        return p
    print(p.stdout[-4000:], p.stderr[-4000:], f"exit {p.returncode} in {time.time() - t0:.1f} s", flush=True)
    return p


def why_failed(p):
    """Why a run failed, in a few words: out of memory, a timeout, or its last error line."""
    text = (p.stdout or "") + (p.stderr or "")
    if p.returncode is None:
        return p.stderr
    if re.search(r"OutOfMemoryError|out of memory", text):
        asked = re.search(r"Tried to allocate ([\d.]+ [KMGT]i?B)", text)
        return "out of memory" + (f" (asked {asked.group(1)} more)" if asked else "")
    last = [line.strip() for line in text.splitlines() if line.strip()]
    return f"exit {p.returncode}: " + (last[-1][:200] if last else "no output")


def model_for(act):
    """The model config: --model itself, or a copy with hidden_act = act."""
    if not act:
        return os.path.abspath(args.model)
    path = os.path.join(args.out, f"model-{act}.json")
    json.dump(dict(model_cfg, **{"hidden_activation" if modern else "hidden_act": act}), open(path, "w"))
    return os.path.abspath(path)


def bertpre_config(seq, micro, precision, steps, metrics, name="", act="", accum=2, **extra):
    path = os.path.join(args.out, f"bertpre-{seq}x{micro}-{precision}{name}.json")
    train = {"backend": args.backend, "precision": precision, "micro_batch_size": micro,
             "global_batch_size": accum * micro, "seq_length": seq, "max_predictions_per_seq": max(1, seq * 20 // 128),
             "steps": steps, "learning_rate": 1e-4, "warmup_proportion": 0.1, "log_every": 1,
             "metrics_file": metrics}
    if modern:
        train["objective"] = "mlm"  # ModernBertForMaskedLM: no NSP head
    with open(path, "w") as f:
        json.dump({"model": model_for(act), "train": dict(train, **extra)}, f)
    return path


def bertpre_run(seq, micro, precision, name="", act="", accum=2, **extra):
    name += (f"-{act}" if act else "") + (f"-accum{accum}" if accum != 2 else "")
    metrics = os.path.join(args.out, f"bertpre-{seq}x{micro}-{precision}{name}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    row = {"framework": "bertpre", "seq": seq, "micro": micro, "accum": accum, "dtype": precision, "act": act}
    if seconds_left() < 5:
        return dict(row, cut="not run: the command's time limit had passed")
    steps = args.steps if accum <= 2 else max(4, args.steps * 2 // accum)
    p = run([args.bertpre, "train", bertpre_config(seq, micro, precision, steps, metrics, name, act, accum, **extra)])
    if p.returncode is None and getattr(p, "cut", False):
        return dict(row, cut=f"{p.stderr}: the command's time limit (--deadline)")
    if p.returncode != 0:
        return dict(row, error=why_failed(p))
    rows = [json.loads(line) for line in open(metrics) if '"eval"' not in line]
    steady = rows[2:] if len(rows) > 2 else rows
    mean = lambda k: sum(r[k] for r in steady) / len(steady)
    return dict(row, **{"steps_timed": len(steady),
            "seq_per_s": round(mean("seq_per_s"), 2), "model_tflops": float(f'{mean("model_tflops"):.4g}'),
            "model_tflops_real": float(f'{mean("model_tflops_real"):.4g}'),
            "real_token_fraction": round(mean("real_tokens_per_s") / mean("tokens_per_s"), 4),
            "peak_percent": steady[-1].get("peak_percent"), "last_mlm_loss": steady[-1]["mlm_loss"]})


def torch_run(seq, micro, precision, act, mode, head):
    """A PyTorch row: its rate, or "unavailable" with the reason it could not run."""
    dtype = args.torch_dtype or precision
    row = {"framework": "pytorch", "seq": seq, "micro": micro, "dtype": dtype, "act": act, "mode": mode, "head": head}
    need = args.compile_seconds if mode == "compile" else 5
    if seconds_left() < need:
        why = f"not run: {max(0, int(seconds_left()))} s left before the command's limit"
        return dict(row, unavailable=why + (f", torch.compile needs about {need}" if mode == "compile" else ""))
    p = run([sys.executable, args.torch_script or os.path.join(root, "tools/bench_torch.py"), model_for(act), str(seq),
             str(micro), "--dtype", dtype, "--mode", mode, "--head", head, "--steps", str(args.steps), "--device",
             args.torch_device])
    found = [line for line in (p.stdout or "").splitlines() if line.startswith("{")]
    if p.returncode != 0 or not found:
        return dict(row, unavailable=why_failed(p) if p.returncode != 0 else "no result line in its output")
    return dict(row, **json.loads(found[-1]))


def gemm_rate(precision):
    n = str(args.gemm_size)
    p = run([args.bertpre, "bench", "gemm", "--backend", args.backend, "--precision", precision, "--m", n, "--n", n,
             "--k", n])
    m = p.returncode == 0 and re.search(r"([\d.e+-]+) TFLOP/s on (.+)", p.stdout)
    if m:
        device_name[0] = m.group(2).strip()
    return float(m.group(1)) if m else None


device_name = [None]  # the GPU's name, from `bertpre bench gemm`


if args.profile:
    seq, micro = args.profile
    report = os.path.join(args.out, f"profile-{seq}.txt")
    metrics = os.path.join(args.out, f"profile-{seq}.jsonl")
    env = dict(os.environ, BERTPRE_PROFILE=report, BERTPRE_PROFILE_SKIP_STEPS="2")
    p = run([args.bertpre, "train", bertpre_config(seq, micro, "fp16", 4, metrics)], env=env)
    sys.exit(0 if p.returncode == 0 and os.path.exists(report) else 1)

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
            r = bertpre_run(seq, micro, "fp16", f"-unpad-{mode}", data=shards, unpad=mode, objective=args.objective)
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
    m = re.fullmatch(r"(\d+)x(\d+)(?:x(\d+))?:(fp16|bf16|fp32)(?::(gelu|gelu_new|gelu_pytorch_tanh|gelu_fast))?",
                     s.strip())
    if not m or (m.group(3) and int(m.group(3)) < 1):
        sys.exit(f"bench_gpu: --shapes: '{s}' is not SEQxMICRO[xACCUM]:PRECISION[:HIDDEN_ACT] (e.g. 128x256:fp16, "
                 f"128x256x32:fp16, 512x32:fp16:gelu_new)")
    shapes.append((int(m.group(1)), int(m.group(2)), int(m.group(3) or 2), m.group(4), m.group(5) or ""))


def label(seq, micro, accum, precision, act):
    return f"{seq}x{micro}" + (f"x{accum}" if accum != 2 else "") + f" {precision}" + (f" {act}" if act else "")


def write_results():
    """bench.json and bench.txt from the rows so far (rewritten after every run)."""
    json.dump(rows, open(os.path.join(args.out, "bench.json"), "w"), indent=1)
    peaks = {round(100 * r["model_tflops"] / r["peak_percent"], 1) for r in rows
             if r["framework"] == "bertpre" and r.get("peak_percent") and r.get("model_tflops")}
    lines = [f"GPU: {device_name[0] or 'unknown'}" +
             (f"; datasheet dense FP16/BF16 peak {', '.join(f'{p:g}' for p in sorted(peaks))} TFLOP/s ('% peak')"
              if peaks else "") + "; these are this GPU's figures",
             f"GEMM {args.gemm_size}^3 in this command: " +
             ", ".join(f"{p} {v:.1f} TFLOP/s" if v else f"{p} failed" for p, v in rates.items()) + " (MFU's divisor)",
             f"{'shape':<25} {'bertpre seq/s':>13} {'TFLOP/s':>8} {'MFU':>6} {'% peak':>7} | {'torch eager':>11} "
             f"{'compile':>8} {'gathered':>8} | {'vs eager':>8} {'vs compile':>10}"]
    notes = []
    for seq, micro, accum, precision, act in shapes:
        ours = next((r for r in rows if r["framework"] == "bertpre" and
                     (r["seq"], r["micro"], r["accum"], r["dtype"], r["act"]) == (seq, micro, accum, precision, act)),
                    None)
        if ours is None:
            continue

        def torch_rate(mode, head):
            r = next((r for r in rows if r["framework"] == "pytorch" and (r["seq"], r["micro"], r["act"]) ==
                      (seq, micro, act) and r["mode"] == mode and r["head"] == head and
                      r["dtype"] == (args.torch_dtype or precision)), None)
            if r and "unavailable" in r:
                notes.append(f"baseline unavailable: PyTorch {mode} ({head} head) at {label(seq, micro, 2, precision, act)}"
                             f": {r['unavailable']}")
            return r.get("seq_per_s") if r else None
        eager, comp, gath = (torch_rate("eager", "full"), torch_rate("compile", "full"), torch_rate("eager", "gathered")) \
            if accum == 2 else (None, None, None)
        rate = rates.get(precision)
        mfu = 100 * ours["model_tflops"] / rate if rate and "model_tflops" in ours else None
        ratio = lambda a, b: a / b if a and b else None
        lines.append(f"{label(seq, micro, accum, precision, act):<25} {fmt(ours.get('seq_per_s'), 13, '.1f')} "
                     f"{fmt(ours.get('model_tflops'), 8, '.1f')} {fmt(mfu, 5, '.1f')}% "
                     f"{fmt(ours.get('peak_percent'), 6, '.1f')}% | "
                     f"{fmt(eager, 11, '.1f')} {fmt(comp, 8, '.1f')} {fmt(gath, 8, '.1f')} | "
                     f"{fmt(ratio(ours.get('seq_per_s'), eager), 8, '.2f')} "
                     f"{fmt(ratio(ours.get('seq_per_s'), comp), 10, '.2f')}")
        if "error" in ours:
            notes.append(f"FAIL bertpre at {label(seq, micro, accum, precision, act)}: {ours['error']}")
        if "cut" in ours:
            notes.append(f"cut: bertpre at {label(seq, micro, accum, precision, act)}: {ours['cut']}")
        if modern and "seq_per_s" in ours:
            # bertpre's synthetic rows are ~10% short (it computes their real tokens); PyTorch's are full
            notes.append(f"tokens/s at {label(seq, micro, accum, precision, act)}: bertpre {ours['seq_per_s'] * seq:,.0f}"
                         f" ({ours['seq_per_s'] * seq * ours['real_token_fraction']:,.0f} real)"
                         + (f", PyTorch eager {eager * seq:,.0f}" if eager else "")
                         + (f", torch.compile {comp * seq:,.0f}" if comp else ""))
    if any(a != 2 for _, _, a, _, _ in shapes):
        notes.append("xACCUM rows: ACCUM micro-batches per optimizer step (the others: 2), bertpre alone")
    open(os.path.join(args.out, "bench.txt"), "w").write("\n".join(lines + notes) + "\n")


rows = []
rates = {p: gemm_rate(p) for p in sorted({p for _, _, _, p, _ in shapes if p != "fp32"} | {"fp16"})}
rows.append({"framework": "gemm", "size": args.gemm_size, "tflops": rates})
rows.append({"framework": "gpu", "name": device_name[0]})
write_results()
later = []  # the torch.compile runs: after every other run, as the time allows
for i, (seq, micro, accum, precision, act) in enumerate(shapes):
    rows.append(bertpre_run(seq, micro, precision, act=act, accum=accum))
    write_results()
    if not args.torch or accum != 2:
        continue
    for mode, head in [("eager", "full")] + ([("eager", "gathered")] if i == 0 else []):
        rows.append(torch_run(seq, micro, precision, act, mode, head))
        write_results()
    if (args.compile == 1 or (args.compile == 2 and i == 0)) and not act:
        later.append((seq, micro, precision, act))
for seq, micro, precision, act in later:
    rows.append(torch_run(seq, micro, precision, act, "compile", "full"))
    write_results()
failed = [r for r in rows if "error" in r] + [p for p, v in rates.items() if v is None]
text = open(os.path.join(args.out, "bench.txt")).read()
print(text)
for p, v in rates.items():
    if v is None:
        print(f"FAIL GEMM rate {p}: `bertpre bench gemm` failed (see above)")
sys.exit(1 if failed else 0)
