"""`bertpre train` run directly costs what it costs under the scripts, which export
OPENBLAS_NUM_THREADS=1: the binary sets OpenBLAS's threads itself (kernels/cpu/gemm.c,
cpu_blas_threads_init).

A CPU run of a BERT-mini-like shape (2 layers, hidden 256, seq 256, micro-batch 8, 2 steps,
synthetic batches) is timed twice each way, alternating: without any of
OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS, OMP_NUM_THREADS in the environment (run directly) and
with OPENBLAS_NUM_THREADS=1 (as the scripts run it). The measure is CPU time (user + system
of the child, from getrusage), not wall time, and the least of each pair, so that other
processes on the machine add little: the direct run's must be within 10% of the scripts'.
Without the binary's setting (OpenBLAS's own pool of a thread per core beside the backend's
OpenMP threads) the direct run took 1.32 times the CPU time at 3 steps on 2 cores with a load
of 9, and the test failed.

usage: test_blas_threads.py BERTPRE
"""
import json
import os
import resource
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre = os.path.abspath(sys.argv[1])
version = subprocess.run([bertpre, "--version"], capture_output=True, text=True).stdout
if "BLAS: yes" not in version:
    print("SKIP: built without a BLAS (the GEMM is the plain loops)")
    sys.exit(77)
CONFIG = {"model": {"vocab_size": 2000, "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                    "intermediate_size": 1024, "max_position_embeddings": 512},
          "train": {"backend": "cpu", "micro_batch_size": 8, "seq_length": 256, "max_predictions_per_seq": 40,
                    "steps": 2, "log_every": 1}}

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "mini.json")
    with open(path, "w") as f:
        json.dump(CONFIG, f)
    bare = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                                              "OMP_NUM_THREADS")}

    def cpu_seconds(extra):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run([bertpre, "train", path], env={**bare, **extra}, capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            print(p.stdout[-2000:] + p.stderr[-2000:])
            sys.exit(1)
        return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime

    direct, scripted = [], []
    for _ in range(2):
        direct.append(cpu_seconds({}))
        scripted.append(cpu_seconds({"OPENBLAS_NUM_THREADS": "1"}))
    ratio = min(direct) / min(scripted)
    print(f"CPU seconds, run directly: {[round(x, 2) for x in direct]}; with OPENBLAS_NUM_THREADS=1: "
          f"{[round(x, 2) for x in scripted]}")
    expect(f"run directly: {min(direct):.2f} CPU-s, {ratio:.3f} times the scripts' {min(scripted):.2f} (at most 1.10)",
           ratio <= 1.10)

sys.exit(checks.exit_status())
