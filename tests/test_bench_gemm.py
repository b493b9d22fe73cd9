"""`bertpre bench gemm` on the CPU and the emulated CUDA backend at small sizes: exit 0, the
line names the backend, precision and sizes, and its rate agrees with its own time per product
by the FLOP count 2·M·N·K computed here (within 0.1%: both are printed to 4 significant
digits, 5e-4 relative each); on cuda-emu no warning of device allocations still live at the
backend's shutdown; bad options are errors naming the option and the value.

usage: test_bench_gemm.py BERTPRE
"""
import re
import subprocess
import sys

import checks
from checks import expect

bertpre = sys.argv[1]
M, N, K = 96, 80, 64
for backend, precision in [("cpu", "fp32"), ("cuda-emu", "fp16"), ("cuda-emu", "bf16")]:
    p = subprocess.run([bertpre, "bench", "gemm", "--backend", backend, "--precision", precision, "--m", str(M),
                        "--n", str(N), "--k", str(K), "--iters", "3", "--warmup", "1"], capture_output=True, text=True)
    if backend == "cuda-emu" and p.returncode != 0 and "no CUDA emulation" in p.stderr:
        print(f"SKIP: {p.stderr.strip()}")
        continue
    m = re.search(r"gemm (\S+) (\w+) M=(\d+) N=(\d+) K=(\d+): 3 products in [\d.]+ s, ([\d.e+-]+) ms each, ([\d.e+-]+) TFLOP/s",
                  p.stdout)
    expect(f"bench gemm {backend} {precision}: exit 0 and the result line", p.returncode == 0 and m,
           p.stdout + p.stderr)
    if not m:
        continue
    if backend == "cuda-emu":
        expect(f"{backend} {precision}: no device allocation left at shutdown", "still live" not in p.stderr, p.stderr)
    expect(f"{backend} {precision}: names the backend table, precision and sizes",
           m.group(1).startswith(backend) and m.group(2) == precision and
           (int(m.group(3)), int(m.group(4)), int(m.group(5))) == (M, N, K), m.group(0))
    ms, tflops = float(m.group(6)), float(m.group(7))
    want = 2 * M * N * K / (ms * 1e-3) / 1e12 if ms > 0 else float("inf")
    expect(f"{backend} {precision}: {tflops} TFLOP/s = 2MNK / {ms} ms ({want:.4f})",
           abs(tflops - want) <= 1e-3 * want)
for args, what in [(["--m", "0"], "--m"), (["--precision", "fp8"], "--precision"), (["--backend", "tpu"], "--backend"),
                   (["--frobnicate"], "--frobnicate")]:
    p = subprocess.run([bertpre, "bench", "gemm"] + args, capture_output=True, text=True)
    expect(f"bench gemm {' '.join(args)}: exit 1 naming {what}", p.returncode == 1 and what in p.stderr, p.stderr)
sys.exit(checks.exit_status())
