"""`bertpre train` run directly does not run OpenBLAS's own thread pool beside the CPU
backend's OpenMP threads: the binary sets OpenBLAS's threads itself (kernels/cpu/gemm.c,
cpu_blas_threads_init), to 1 unless OPENBLAS_NUM_THREADS or GOTO_NUM_THREADS names a count.

The test asserts the mechanism, not a cost: the thread count that OpenBLAS reports after the
binary's set-up, as `bertpre --version` and the CPU run's header print it ("CPU threads:
OpenMP N, BLAS M (...)"), under each environment below. The reference is OpenBLAS by itself:
the same libopenblas that bertpre loads (found with ldd), loaded through ctypes in a Python
child with the same environment, reports its parallel mode and its own count. Where
OpenBLAS runs its own pthreads and no variable names a count, bertpre must report 1 whatever
OMP_NUM_THREADS says; where a variable names one, bertpre must report what OpenBLAS alone
reports. On a machine with more than one core the library alone reports more than 1, so a
binary without the setting fails here. What the pool costs in CPU time is a benchmark,
tools/bench_blas_threads.py (docs/PERFORMANCE.md), not a verdict.

usage: test_blas_threads.py BERTPRE
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre = os.path.abspath(sys.argv[1])
VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "BERTPRE_CPU_GEMM")
bare = {k: v for k, v in os.environ.items() if k not in VARS}
LINE = re.compile(r"CPU threads: OpenMP (\d+), BLAS (\w+) \((.*)\)")


def reported(args, extra):
    p = subprocess.run([bertpre, *args], env={**bare, **extra}, capture_output=True, text=True, timeout=300)
    m = LINE.search(p.stdout)
    return (int(m.group(1)), m.group(2), m.group(3)) if p.returncode == 0 and m else None, p


got, p = reported(["--version"], {})
if "BLAS: yes" not in p.stdout:
    expect("a build without a BLAS reports 'BLAS none' in --version", got is not None and got[1] == "none",
           p.stdout)
    print("SKIP: built without a BLAS (the GEMM is the plain loops); only the --version line checked")
    sys.exit(77 if checks.exit_status() == 0 else 1)

ldd = subprocess.run(["ldd", bertpre], capture_output=True, text=True).stdout
lib = next((l.split("=>")[1].split("(")[0].strip() for l in ldd.splitlines() if "libopenblas" in l and "=>" in l),
           None)
if not lib or not os.path.exists(lib):
    print(f"BLAS line: {got}")
    print("SKIP: the BLAS is not a shared libopenblas (ldd names none), so there is no OpenBLAS to ask")
    sys.exit(77)

PROBE = ("import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); "
         "print(l.openblas_get_parallel(), l.openblas_get_num_threads())")


def openblas_alone(extra):
    """OpenBLAS's parallel mode (0 sequential, 1 pthreads, 2 OpenMP) and thread count, by itself."""
    p = subprocess.run([sys.executable, "-c", PROBE, lib], env={**bare, **extra}, capture_output=True, text=True,
                       timeout=60)
    parallel, n = map(int, p.stdout.split())
    return parallel, n


print(f"bertpre loads {lib}")
parallel, default = openblas_alone({})
mode = {0: "single-threaded", 1: "its own pthreads", 2: "OpenMP"}.get(parallel, f"mode {parallel}")
print(f"OpenBLAS alone: {mode}, {default} thread{'s' if default != 1 else ''} by default on {os.cpu_count()} cores")
if default == 1:
    print("note: OpenBLAS alone takes 1 thread here, so the default case cannot tell the setting from its absence")

CASES = [  # (environment, what bertpre must do)
    ({}, "no variable"),
    ({"OMP_NUM_THREADS": "3"}, "OMP_NUM_THREADS=3 alone (it sets the OpenMP team, not OpenBLAS's pool)"),
    ({"OPENBLAS_NUM_THREADS": "0"}, "OPENBLAS_NUM_THREADS=0 (no count: OpenBLAS takes its default)"),
    ({"OPENBLAS_NUM_THREADS": "2"}, "OPENBLAS_NUM_THREADS=2 (the user's count)"),
    ({"GOTO_NUM_THREADS": "2"}, "GOTO_NUM_THREADS=2 (the user's count)"),
    ({"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "1"}, "OPENBLAS_NUM_THREADS=2 with OMP_NUM_THREADS=1"),
]


def user_count(env):
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS"):
        if name in env:
            return int(env[name]) > 0
    return False


def expected(env):
    """OpenBLAS alone's count under env, and the count bertpre must report: 1 for OpenBLAS's
    own pthreads with no count named; otherwise OpenBLAS's own (the user's count, or an OpenMP
    or single-threaded build left as it is)."""
    parallel_here, alone = openblas_alone(env)
    return alone, 1 if parallel_here == 1 and not user_count(env) else alone


for env, what in CASES:
    got, p = reported(["--version"], env)
    alone, want = expected(env)
    team = int(env.get("OMP_NUM_THREADS", 0))
    expect(f"--version with {what}: BLAS {got[1] if got else None} threads (OpenBLAS alone: {alone}; want {want})"
           + (f", OpenMP {got[0] if got else None} (want {team})" if team else ""),
           got is not None and got[1] == str(want) and (not team or got[0] == team), p.stdout + p.stderr)

got, p = reported(["--version"], {"BERTPRE_CPU_GEMM": "loops"})
expect("--version with BERTPRE_CPU_GEMM=loops: BLAS none (the GEMM does not go through OpenBLAS)",
       got is not None and got[1] == "none", p.stdout + p.stderr)

# The same count where it matters: the header of a CPU training run, printed after the
# backend's set-up and before the first step.
CONFIG = {"model": {"vocab_size": 200, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                    "intermediate_size": 64, "max_position_embeddings": 64},
          "train": {"backend": "cpu", "micro_batch_size": 2, "seq_length": 32, "max_predictions_per_seq": 5,
                    "steps": 1, "log_every": 1}}
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "tiny.json")
    with open(path, "w") as f:
        json.dump(CONFIG, f)
    for env in ({}, {"OMP_NUM_THREADS": "2"}, {"OPENBLAS_NUM_THREADS": "2"}):
        want = expected(env)[1]
        got, p = reported(["train", path], env)
        expect(f"train on the CPU with {env or 'no variable'}: the header says BLAS {got[1] if got else None} "
               f"threads (want {want}) and the step ran", got is not None and got[1] == str(want) and
               "step     1/1" in p.stdout, p.stdout[-1500:] + p.stderr[-1500:])

sys.exit(checks.exit_status())
