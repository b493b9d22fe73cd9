#!/usr/bin/env python3
"""What OpenBLAS's own thread pool costs a CPU training run: `bertpre train` of a
BERT-mini-like shape (2 layers, hidden 256, seq 256, micro-batch 8, synthetic batches), run
three ways, alternating, REPEAT times each:

  direct   no OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or OMP_NUM_THREADS: the binary sets
           OpenBLAS's pool to one thread itself (kernels/cpu/gemm.c)
  scripts  OPENBLAS_NUM_THREADS=1, as tools/pretrain.sh and the other scripts run it
  pool     OPENBLAS_NUM_THREADS=<cores>: OpenBLAS's own pool of a thread per core beside the
           backend's OpenMP threads, which is what OpenBLAS does by itself

Each run's CPU time (user + system of the child, getrusage) and wall time are measured; the
least of each way is printed, and each way's CPU time over the scripts'. CPU time, not wall
time, and the least of several, so that other work on the machine changes the numbers
little; it still changes them, which is why this is a benchmark and not a test (the test,
tests/test_blas_threads.py, asserts the thread count OpenBLAS reports).

usage: tools/bench_blas_threads.py BERTPRE [--steps N] [--repeat N] [--json FILE]"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

CONFIG = {"model": {"vocab_size": 2000, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "intermediate_size": 1024, "max_position_embeddings": 512},
          "train": {"backend": "cpu", "micro_batch_size": 8, "seq_length": 256, "max_predictions_per_seq": 40,
                    "steps": 2, "log_every": 1}}
VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bertpre")
    ap.add_argument("--steps", type=int, default=2, help="training steps per run (default 2)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each way, alternating (default 2)")
    ap.add_argument("--json", help="also write the runs and the summary to this file")
    a = ap.parse_args()
    if a.steps < 1 or a.repeat < 1:
        sys.exit(f"bench_blas_threads: --steps {a.steps} and --repeat {a.repeat} must be at least 1")
    if not os.access(a.bertpre, os.X_OK):
        sys.exit(f"bench_blas_threads: {a.bertpre}: not an executable")
    bare = {k: v for k, v in os.environ.items() if k not in VARS}
    cores = os.cpu_count() or 1
    ways = {"direct": {}, "scripts": {"OPENBLAS_NUM_THREADS": "1"}, "pool": {"OPENBLAS_NUM_THREADS": str(cores)}}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "mini.json")
        with open(path, "w") as f:
            json.dump({**CONFIG, "train": {**CONFIG["train"], "steps": a.steps}}, f)
        for i in range(a.repeat):
            for way, extra in ways.items():
                before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
                p = subprocess.run([a.bertpre, "train", path], env={**bare, **extra}, capture_output=True, text=True)
                wall = time.monotonic() - t0
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if p.returncode != 0:
                    sys.exit(f"bench_blas_threads: {way} run exited {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
                header = next((l.strip() for l in p.stdout.splitlines() if "CPU threads:" in l), "")
                cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
                runs.append({"way": way, "run": i, "cpu_s": cpu, "wall_s": wall, "header": header})
                print(f"{way:8s} run {i + 1}: {cpu:6.2f} CPU-s, {wall:6.2f} s wall | {header}", flush=True)
    best = {w: {k: min(r[k] for r in runs if r["way"] == w) for k in ("cpu_s", "wall_s")} for w in ways}
    print(f"\n{cores} cores, load average {os.getloadavg()[0]:.2f} at the end; {a.steps} steps a run, "
          f"least of {a.repeat}")
    print(f"{'way':8s} {'CPU-s':>7s} {'wall s':>7s} {'CPU / scripts':>14s}")
    for w, b in best.items():
        print(f"{w:8s} {b['cpu_s']:7.2f} {b['wall_s']:7.2f} {b['cpu_s'] / best['scripts']['cpu_s']:14.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cores": cores, "steps": a.steps, "repeat": a.repeat, "runs": runs, "best": best}, f, indent=1)


if __name__ == "__main__":
    main()
