"""What bertpre says about the machine a plan meets (cli/train_plan.c, cli/main.c):
  - a GPU-sized recipe (configs/bert-*-phase*.json) dry-run on the CPU backend: exit 0, a
    warning that it is sized for GPUs naming the four recipe files;
  - a CPU-sized config (configs/demo-tiny.json): no warning;
  - on the emulated CUDA backend with a device memory limit (BERTPRE_TEST_EMU_MEMORY,
    test-only): --dry-run warns that the memory plan does not fit, naming the device, the
    GiB and a micro-batch that fits, and exits 0; the same run without --dry-run stops with
    that message (exit 1) before training; with room, no warning;
  - without a GPU (nvidia-smi finds none), `--dry-run --set train.backend=cuda --ranks 8` of
    bert-large-phase1.json exits 0, says the plan is made with the emulation, and prints the
    memory plan of `--set train.backend=cuda-emu` line for line; the same without --dry-run
    is still refused;
  - `bertpre train --help` lists every backend (auto, cpu, cuda, cuda-emu);
  - `bertpre --version` tells "CUDA compiled" (from the build) apart from "GPU present"
    (nvidia-smi's answer as reference).
  - cuda-emu: ModernBERT-base's activation memory with attention dropout is linear in the
    sequence length (16 x 1024 and 2 x 8192 plan the same bytes), and at 512 tokens exactly the
    forward's dropout record more (22 x 12 x 16,384 x 16 x 4 bytes = 264.0 MiB); with mlp_dropout
    0.1 dropout(GeGLU) kept apart, 792.0 MiB more, and none without it.

usage: test_train_plan.py BERTPRE CONFIGS_DIR cuda|nocuda emu=0|1"""
import os
import re
import shutil
import subprocess
import sys

import checks
from checks import expect

bertpre, configs = sys.argv[1], sys.argv[2]
HAVE_CUDA, HAVE_EMU = sys.argv[3] == "cuda", "emu=1" in sys.argv[4:]
RECIPES = ["bert-base-phase1.json", "bert-base-phase2.json", "bert-large-phase1.json", "bert-large-phase2.json"]


def run(*args, env=None):
    p = subprocess.run([bertpre, *args], capture_output=True, text=True, env={**os.environ, **(env or {})})
    return p.returncode, p.stdout, p.stderr


for name in ("bert-large-phase1.json", "bert-base-phase2.json"):
    rc, out, err = run("train", os.path.join(configs, name), "--dry-run", "--set", "train.backend=cpu")
    expect(f"{name} dry-run on the cpu: exit 0, warns it is sized for GPUs, names the 4 recipes",
           rc == 0 and "bertpre: warning:" in err and "sized for GPUs" in err
           and all(os.path.join(configs, r) in err for r in RECIPES), err)

rc, out, err = run("train", os.path.join(configs, "demo-tiny.json"), "--dry-run", "--set", "train.backend=cpu")
expect("demo-tiny.json dry-run on the cpu: exit 0, no warning", rc == 0 and err == "", err)
expect("the plan prints train.unpad (auto by default)",
       "unpad auto: micro-batches with padding compute their real tokens only" in out, out[:1500])
rc, out, err = run("train", os.path.join(configs, "demo-tiny.json"), "--dry-run", "--set", "train.backend=cpu",
                   "--set", "train.unpad=sometimes")
expect("train.unpad = sometimes: exit 1 naming the field and the allowed values",
       rc == 1 and "'unpad' = \"sometimes\"" in err and "auto|on|off" in err, err)

if HAVE_EMU:
    tiny = os.path.join(configs, "demo-tiny.json")
    emu = ["--set", "train.backend=cuda-emu", "--set", "train.precision=fp32"]
    small = {"BERTPRE_TEST_EMU_MEMORY": str(60 << 20)}  # 60 MiB: below the 71 MiB plan of demo-tiny on CUDA
    rc, out, err = run("train", tiny, "--dry-run", *emu, env=small)
    m = re.search(r"a micro-batch of (\d+) would fit", err)
    expect("cuda-emu with 60 MiB, --dry-run: exit 0, warning naming the plan, the device and a micro-batch that fits",
           rc == 0 and "bertpre: warning:" in err and "does not fit" in err and "CUDA emulation" in err
           and m and 0 < int(m.group(1)) < 32, err)
    rc, out, err = run("train", tiny, *emu, env=small)
    expect("the same without --dry-run: exit 1 with the message, no step trained",
           rc == 1 and "does not fit" in err and "CUDA emulation" in err and not re.search(r"^step ", out, re.M), out + err)
    rc, out, err = run("train", tiny, "--dry-run", *emu, env={"BERTPRE_TEST_EMU_MEMORY": str(1 << 30)})
    expect("cuda-emu with 1 GiB: no warning", rc == 0 and err == "", err)

    # Activation memory linear in the sequence length on the fused attention path: ModernBERT-base
    # (22 layers, 12 heads) at FP16 with attention dropout, 16,384 tokens and 5,120 masked rows per
    # micro-batch as 16 x 1024, 2 x 8192 and 32 x 512. Every activation buffer but the dropout
    # record scales with the tokens, so the first two plans are equal (a record of one bit per
    # (query, key) pair would add 22 x 12 x 16,384 x T / 8 bytes: 792 MiB at 1024, 6.2 GiB at
    # 8192); at 512 and below the fused backward reads the forward's record, 2 words per 64 keys
    # of each query row: 22 x 12 x 16,384 x 16 x 4 bytes = 264.0 MiB more than without dropout.
    def activations(B, T, dropout, mlp_dropout=0.0):
        rc, out, err = run("train", os.path.join(configs, "modernbert-base.json"), "--dry-run",
                           "--set", "train.backend=cuda-emu", "--set", "train.precision=fp16",
                           "--set", f"train.micro_batch_size={B}", "--set", f"train.global_batch_size={B}",
                           "--set", f"train.seq_length={T}", "--set", f"train.max_predictions_per_seq={5120 // B}",
                           "--set", f"model.attention_dropout={dropout}", "--set", f"model.mlp_dropout={mlp_dropout}",
                           "--set", "train.batch_warmup_min_size=0",
                           "--set", "train.batch_warmup_tokens=0", env={"BERTPRE_TEST_EMU_MEMORY": str(1 << 40)})
        m = re.search(r"^  activations +([0-9.]+) MiB", out, re.M)
        expect(f"ModernBERT-base {B} x {T}, attention dropout {dropout}: the dry run prints its activations",
               rc == 0 and m, out + err)
        return float(m.group(1)) if m else float("nan")
    a1024, a8192 = activations(16, 1024, 0.1), activations(2, 8192, 0.1)
    a512, a512_none = activations(32, 512, 0.1), activations(32, 512, 0.0)
    expect(f"ModernBERT-base activations with attention dropout: 16 x 1024 = 2 x 8192 ({a1024} = {a8192} MiB)",
           a1024 == a8192)
    expect(f"32 x 512: the forward's dropout record, 264.0 MiB ({a512} - {a512_none} MiB), and without dropout "
           f"the 1024 plan ({a512_none} = {a1024} MiB)", abs(a512 - a512_none - 264.0) <= 0.1 and a512_none == a1024)
    # GeGLU's dropout keeps its output apart only when mlp_dropout is on: 22 x 16,384 x 1,152 x 2
    # bytes = 792.0 MiB more (the recipe's mlp_dropout 0 needs none).
    a_mlp = activations(16, 1024, 0.1, mlp_dropout=0.1)
    expect(f"mlp_dropout 0.1: dropout(GeGLU) kept apart, 792.0 MiB ({a_mlp} - {a1024} MiB)",
           abs(a_mlp - a1024 - 792.0) <= 0.1)
else:
    print("skip: cuda-emu cases (this build has no CUDA emulation)")

gpu = shutil.which("nvidia-smi") is not None and subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                                                                 text=True).stdout.count("GPU ") > 0
if HAVE_CUDA and HAVE_EMU and not gpu:
    large = os.path.join(configs, "bert-large-phase1.json")

    def plan(text):
        return text[text.find("memory plan:"):]

    rc, out, err = run("train", large, "--dry-run", "--set", "train.backend=cuda", "--ranks", "8")
    rc2, out2, _ = run("train", large, "--dry-run", "--set", "train.backend=cuda-emu", "--ranks", "8")
    expect("no GPU: --dry-run of train.backend=cuda exits 0 with the emulation's plan, said so",
           rc == 0 and "no GPU visible" in out and "memory plan:" in out and plan(out) == plan(out2), out + err)
    rc, out, err = run("train", large, "--set", "train.backend=cuda")
    expect("no GPU: the same run without --dry-run is refused", rc != 0 and "no CUDA GPU is visible" in err, err)
else:
    print("skip: the dry run of backend cuda without a GPU (needs CUDA and its emulation built, and no GPU)")

rc, out, err = run("train", "--help")
expect("train --help lists the backends auto, cpu, cuda, cuda-emu", rc == 0 and "auto|cpu|cuda|cuda-emu" in out, out)

rc, out, err = run("--version")
facts = dict(line.split(": ", 1) for line in out.splitlines()[1:] if ": " in line)
expect(f"--version: CUDA compiled {'yes' if HAVE_CUDA else 'no'} (the build), GPU present "
       f"{'yes' if gpu and HAVE_CUDA else 'no'} (nvidia-smi)",
       rc == 0 and out.startswith("bertpre ") and facts.get("CUDA compiled", "").split(" ")[0] == ("yes" if HAVE_CUDA else "no")
       and facts.get("GPU present", "").split(" ")[0] == ("yes" if gpu and HAVE_CUDA else "no"), out + err)
expect("--version names the emulation, NCCL, MPI, HDF5, SentencePiece, BLAS and the backends",
       all(k in facts for k in ("CUDA emulation compiled", "NCCL", "MPI", "HDF5", "SentencePiece", "BLAS", "backends"))
       and ("cuda-emu" in facts["backends"]) == HAVE_EMU, out)

sys.exit(checks.exit_status())
