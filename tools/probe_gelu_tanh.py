#!/usr/bin/env python3
"""Which tanh a GPU path's GELU derivative computes: the dumps of test_cuda_ops
(BERTPRE_TEST_DUMP_DIR=DIR, files tanh_gelu_grad_PATH.f32) against the candidates of
tools/probe_gelu_tanh.cu (candidate_NAME.f32) and the exact derivative in double.

    tools/probe_gelu_tanh.py DIR
"""
import glob
import os
import sys

import numpy as np


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = sys.argv[1]
    x = (-12.0 + np.arange(96 * 1024, dtype=np.float32) / np.float32(4096.0)).astype(np.float64)
    k, c = np.sqrt(2 / np.pi), 0.044715
    t = np.tanh(k * (x + c * x**3))
    exact = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x)
    cands = {os.path.basename(p)[10:-4]: np.fromfile(p, np.float32) for p in sorted(glob.glob(f"{d}/candidate_*.f32"))}
    for name, a in cands.items():
        e = np.abs(a - exact)
        print(f"candidate {name:8s} max |error| {e.max():.3e} at x = {x[e.argmax()]:.6g}")
    for p in sorted(glob.glob(f"{d}/tanh_gelu_grad_*.f32")):
        got = np.fromfile(p, np.float32)
        e = np.abs(got - exact)
        print(f"{os.path.basename(p)}: max |error| {e.max():.3e} at x = {x[e.argmax()]:.6g}")
        for name, a in cands.items():
            diff = np.abs(got.astype(np.float64) - a)
            print(f"  vs {name:8s}: {np.mean(got == a) * 100:6.2f}% bit-equal, max |diff| {diff.max():.3e}")


if __name__ == "__main__":
    main()
