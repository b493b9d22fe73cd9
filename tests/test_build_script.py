"""tools/build.sh: device code only where it can run, and progress while a long step runs.

Each case runs the script in a copy of the repository (the files git tracks, .venv shared by
a link) with `nvidia-smi` and `ninja` on PATH replaced: nvidia-smi lists one GPU or none, as
the real one does; the stand-in ninja answers meson's `--version` and, as the build, prints
three steps of ninja's form with a pause in the second (the configuration itself is meson's,
real). Cases:
  - no GPU, no option (the main job's build on a machine without one): the summary says the
    device code is not built, naming --gpu; build/build.ninja holds no CUDA object and no
    -gencode; meson's option cuda is disabled;
  - then --gpu on that build (CI's way): it says it reconfigures with the device code added,
    build.ninja holds the nvcc objects for compute capabilities 80 and 90, the summary says
    so; then --no-gpu removes them again (skipped where nvcc is not installed);
  - a GPU listed by nvidia-smi, no option: the device code is configured, the summary says
    a GPU is present (needs nvcc too);
  - a step of 5 s with BUILD_PROGRESS_SECONDS 1: a line naming the step that runs, its steps
    count and the seconds on it, before the last step's 100% line.

usage: test_build_script.py SOURCE_ROOT
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import checks
from checks import expect
from data_fixtures import copy_tracked

source = os.path.abspath(sys.argv[1])
NINJA = """#!/bin/sh
if [ "$1" = "--version" ]; then echo 1.11.1; exit 0; fi
case " $* " in *" -t "*) exit 0 ;; esac  # meson's compdb and other tools: nothing to say
echo "[1/3] Compiling C object cli/bertpre.p/main.c.o"
echo "[2/3] Compiling CUDA object kernels/libkernels_cuda.a.p/cuda_flash_attention.cu.o"
sleep "${FAKE_SLOW:-0}"
echo "[3/3] Linking target bertpre"
"""
SMI = """#!/bin/sh
if [ -n "$FAKE_GPU" ]; then echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)"; exit 0; fi
echo "No devices were found"; exit 6
"""
nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None)


def script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def clone(tmp, name):
    root = os.path.join(tmp, name)
    copy_tracked(source, root)
    os.symlink(os.path.join(source, ".venv"), os.path.join(root, ".venv"))
    return root


def build(root, fake, *args, **env):
    run_env = dict(os.environ, PATH=fake + os.pathsep + os.environ["PATH"], **{k: str(v) for k, v in env.items()})
    return subprocess.run(["bash", os.path.join(root, "tools", "build.sh"), *args], capture_output=True, text=True,
                          env=run_env, timeout=300)


def ninja_file(root):
    with open(os.path.join(root, "build", "build.ninja")) as f:
        return f.read()


with tempfile.TemporaryDirectory() as tmp:
    fake = os.path.join(tmp, "bin")
    os.makedirs(fake)
    script(os.path.join(fake, "ninja"), NINJA)
    script(os.path.join(fake, "nvidia-smi"), SMI)

    a = clone(tmp, "a")
    p = build(a, fake)
    text = ninja_file(a) if p.returncode == 0 else ""
    expect("no GPU, tools/build.sh: exit 0, 'device code not built (no GPU here)' naming --gpu; build.ninja holds "
           "no CUDA object and no -gencode",
           p.returncode == 0 and "build: device code not built (no GPU here)" in p.stdout and
           "tools/build.sh --gpu builds it" in p.stdout and ".cu.o" not in text and "-gencode" not in text,
           p.stdout[-1500:] + p.stderr[-1500:])
    if not nvcc:
        print("SKIP (these parts): nvcc is not installed, so --gpu and a present GPU cannot configure device code")
    else:
        p = build(a, fake, "--gpu")
        text = ninja_file(a) if p.returncode == 0 else ""
        expect("then --gpu: reconfigured with the device code added; nvcc objects for compute_80 and compute_90; "
               "the summary says compiled (--gpu)",
               p.returncode == 0 and "reconfiguring build/ with -Dcuda=enabled (device code added)" in p.stdout and
               ".cu.o" in text and "compute_80" in text and "compute_90" in text and
               "build: device code compiled for compute capabilities 80;90 (--gpu)" in p.stdout,
               p.stdout[-1500:] + p.stderr[-1500:])
        p = build(a, fake, "--no-gpu")
        text = ninja_file(a) if p.returncode == 0 else ""
        expect("then --no-gpu: reconfigured with the device code removed, no CUDA object left",
               p.returncode == 0 and "(device code removed)" in p.stdout and ".cu.o" not in text and
               "device code not built (--no-gpu)" in p.stdout, p.stdout[-1500:] + p.stderr[-1500:])
        b = clone(tmp, "b")
        p = build(b, fake, FAKE_GPU=1)
        text = ninja_file(b) if p.returncode == 0 else ""
        expect("a GPU listed by nvidia-smi, no option: the device code configured, 'a GPU is present' said",
               p.returncode == 0 and ".cu.o" in text and
               "build: device code compiled for compute capabilities 80;90 (a GPU is present)" in p.stdout,
               p.stdout[-1500:] + p.stderr[-1500:])
    p = build(a, fake, FAKE_SLOW=5, BUILD_PROGRESS_SECONDS=1)
    lines = p.stdout.splitlines()
    during = [i for i, line in enumerate(lines) if "s on: Compiling CUDA object" in line]
    done = [i for i, line in enumerate(lines) if line == "build: 3 of 3 steps (100%)"]
    expect("a 5 s step with BUILD_PROGRESS_SECONDS 1: 'build: 2 of 3 steps (66%), N s on: Compiling CUDA object ...' "
           "while it runs, then the 100% line",
           p.returncode == 0 and during and done and during[0] < done[0] and
           lines[during[0]].startswith("build: 2 of 3 steps (66%), "), p.stdout[-1500:] + p.stderr[-1500:])
sys.exit(checks.exit_status())
