"""Shared by the Python tests that check bertpre's output: one ok/FAIL line per check, with
the detail (the program's output) printed under a failure, and the failure count that sets
the exit status (checks.exit_status())."""
import contextlib
import sys

SKIP = 77  # the exit status the test harness reads as a skip

failures = 0


def expect(what, ok, detail=""):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok and detail:
        print("     " + str(detail).strip().replace("\n", "\n     "))


def exit_status():
    return 1 if failures else 0


@contextlib.contextmanager
def needs(what, hint="tools/setup.sh installs them"):
    """Skip the test when an import in the block fails: print `SKIP: needs <what> (<the
    ImportError>); <hint>` (no `; <hint>` when hint is None or empty) and exit SKIP.
    Otherwise the block's imports stand where they are, as if written without it:

        with checks.needs("numpy and safetensors"):
            import numpy as np
    """
    try:
        yield
    except ImportError as e:
        skip(f"needs {what} ({e})" + (f"; {hint}" if hint else ""))


def rel_error(a, b):
    """||a - b|| / ||b|| of two torch tensors, in double (inf where either has a NaN; 0 when both
    are zero)."""
    import torch
    a, b = a.double(), b.double()
    if torch.isnan(a).any() or torch.isnan(b).any():
        return float("inf")
    ref = b.norm().item()
    return (a - b).norm().item() / ref if ref > 0 else (0.0 if a.norm().item() == 0 else float("inf"))


def run_in_hf5():
    """Runs the calling test again in .venv-hf5 (transformers 5 with torch 2, made by
    tools/setup.sh), where transformers' ModernBERT runs; skips when it is missing. Returns in
    that run only."""
    import os
    if os.environ.get("BERTPRE_TEST_IN_HF5") == "1":
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    python = os.path.join(root, ".venv-hf5", "bin", "python")
    if not os.path.exists(python):
        skip(f"needs {python} (transformers 5 with torch 2); tools/setup.sh makes it")
    sys.stdout.flush()
    os.execve(python, [python, os.path.abspath(sys.argv[0]), *sys.argv[1:]], {**os.environ, "BERTPRE_TEST_IN_HF5": "1"})


def skip(reason):
    """The test cannot run here: `SKIP: reason` and the exit status SKIP."""
    print(f"SKIP: {reason}", flush=True)
    sys.exit(SKIP)


_features = {}


def features(bertpre):
    """What this build of bertpre has, as `bertpre --version` says it (the one place the tests
    learn it): hdf5, sentencepiece, mpi, nccl, blas, cuda (compiled), emu (the CUDA emulation
    compiled) and gpu (a GPU present), each True or False."""
    import subprocess
    if bertpre not in _features:
        p = subprocess.run([bertpre, "--version"], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"FAIL: {bertpre} --version exited {p.returncode}: {p.stderr.strip()}")
        said = dict(l.split(": ", 1) for l in p.stdout.splitlines() if ": " in l)
        keys = {"hdf5": "HDF5", "sentencepiece": "SentencePiece", "mpi": "MPI", "nccl": "NCCL", "blas": "BLAS",
                "cuda": "CUDA compiled", "emu": "CUDA emulation compiled", "gpu": "GPU present"}
        missing = [line for line in keys.values() if line not in said]
        if missing:
            raise SystemExit(f"FAIL: {bertpre} --version has no line for {', '.join(missing)}:\n{p.stdout}")
        _features[bertpre] = {k: said[line].startswith("yes") for k, line in keys.items()}
    return _features[bertpre]


def cuda_unavailable(bertpre, probe):
    """Why the cuda backend cannot train here, or None. probe: the finished `bertpre train
    --dry-run` of a config with train.backend cuda. Its error says why; without a GPU a dry
    run plans with the CUDA emulation and exits 0, so `bertpre --version` must also find one."""
    import subprocess
    if probe.returncode != 0:
        return probe.stderr.strip()
    version = subprocess.run([bertpre, "--version"], capture_output=True, text=True).stdout
    if "GPU present: yes" not in version:
        line = next((l for l in version.splitlines() if l.startswith("GPU present")), "GPU present: no")
        return f"bertpre --version says '{line}'"
    return None
