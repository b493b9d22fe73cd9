"""BERTPRE_PROFILE: the per-op timing of the CUDA backend (kernels/cuda/profile.cu), here on
the emulated backend (cuda-emu, fp16), or on a GPU with BACKEND=cuda.

The counts are checked against the structure of BERT, not against the profiler: one
embeddings_forward per micro-batch, L attention_forward and 4L + 4 matmul_forward per
micro-batch (q|k|v, attention output, two FFN matmuls per layer; pooler, MLM transform,
decoder and NSP classifier; as many matmul_backward, less the MLM head's two in a micro-batch
without masked positions), one lamb_step per optimizer step after the skipped ones; every
op of the backend table timed (no warning line); the per-op shares and the group shares each
add up to 100% (within the 0.01% rounding of each printed share); bad settings are errors
naming the variable and the value.

usage: test_profile.py BERTPRE [cuda-emu|cuda]
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre = sys.argv[1]
backend = sys.argv[2] if len(sys.argv) > 2 else "cuda-emu"
L = 2
MODEL = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": L, "num_attention_heads": 2,
         "intermediate_size": 32, "max_position_embeddings": 32}
STEPS, ACCUM, SKIP = 3, 2, 1
TRAIN = {"backend": backend, "precision": "fp16", "micro_batch_size": 2, "global_batch_size": 2 * ACCUM,
         "seq_length": 16, "max_predictions_per_seq": 3, "steps": STEPS, "log_every": 1, "learning_rate": 0.01,
         "warmup_proportion": 0.25}

with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "run.json")
    with open(cfg, "w") as f:
        json.dump({"model": MODEL, "train": TRAIN}, f)
    probe = subprocess.run([bertpre, "train", cfg, "--dry-run"], capture_output=True, text=True)
    why = checks.cuda_unavailable(bertpre, probe) if backend == "cuda" else (probe.stderr.strip() if probe.returncode else None)
    if why:
        print(f"SKIP: backend {backend} cannot run here: {why}")
        sys.exit(77)
    out = os.path.join(tmp, "profile.txt")
    env = dict(os.environ, BERTPRE_PROFILE=out, BERTPRE_PROFILE_SKIP_STEPS=str(SKIP))
    p = subprocess.run([bertpre, "train", cfg], capture_output=True, text=True, env=env)
    expect("bertpre train with BERTPRE_PROFILE exits 0", p.returncode == 0, p.stdout + p.stderr)
    text = open(out).read() if os.path.exists(out) else ""
    print(text)
    ops = {m.group(1): (int(m.group(2)), float(m.group(3))) for m in
           re.finditer(r"^op (\w+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)%$", text, re.M)}
    groups = [float(m.group(1)) for m in re.finditer(r"^group .*?([\d.]+)%$", text, re.M)]
    micro = (STEPS - SKIP) * ACCUM
    expect(f"header: {STEPS - SKIP} steps after the first {SKIP}, {micro} micro-batches",
           f"{STEPS - SKIP} optimizer steps after the first {SKIP}, {micro} micro-batches" in text, text[:300])
    for op, want in [("embeddings_forward", micro), ("attention_forward", L * micro), ("attention_backward", L * micro),
                     ("matmul_forward", (4 * L + 4) * micro), ("lamb_step", STEPS - SKIP)]:
        got = ops.get(op, (0, 0))[0]
        expect(f"{op}: {want} calls (got {got})", got == want)
    # The MLM head's two backward matmuls are left out for a micro-batch with no masked
    # position (random short synthetic sequences can have none).
    got = ops.get("matmul_backward", (0, 0))[0]
    expect(f"matmul_backward: between {(4 * L + 2) * micro} and {(4 * L + 4) * micro} calls (got {got})",
           (4 * L + 2) * micro <= got <= (4 * L + 4) * micro)
    expect("every op of the backend table timed (no warning)", "warning" not in text, text[:300])
    expect(f"per-op shares add up to 100% (got {sum(s for _, s in ops.values()):.2f})",
           abs(sum(s for _, s in ops.values()) - 100) <= 0.01 * len(ops) + 1e-9)
    expect(f"group shares add up to 100% (got {sum(groups):.2f})", abs(sum(groups) - 100) <= 0.01 * len(groups) + 1e-9)

    bad = subprocess.run([bertpre, "train", cfg, "--set", "train.steps=1"], capture_output=True, text=True,
                         env=dict(os.environ, BERTPRE_PROFILE=os.path.join(tmp, "no", "such", "dir", "p.txt")))
    expect("an unwritable BERTPRE_PROFILE file: exit 1 naming the variable and the path",
           bad.returncode == 1 and "BERTPRE_PROFILE" in bad.stderr and "no/such/dir" in bad.stderr, bad.stderr)
    bad = subprocess.run([bertpre, "train", cfg, "--set", "train.steps=1"], capture_output=True, text=True,
                         env=dict(os.environ, BERTPRE_PROFILE=out, BERTPRE_PROFILE_SKIP_STEPS="two"))
    expect("BERTPRE_PROFILE_SKIP_STEPS=two: exit 1 naming it and the value",
           bad.returncode == 1 and "BERTPRE_PROFILE_SKIP_STEPS" in bad.stderr and "'two'" in bad.stderr, bad.stderr)
sys.exit(checks.exit_status())
