"""Data parallelism over MPI ranks on the CPU backend: `mpirun -np 2 bertpre train` with
micro-batch 4 x 2 accumulated x 2 ranks trains like one rank with 4 x 4 accumulated (global
16 both), dropout on: every logged step's MLM and NSP loss agree within 1e-5 relative (the
same micro-batches and dropout masks, only the summation order of the gradients differs,
~1e-7 per step in FP32), the learning rates are identical, rank 0 alone logs, and the plans
name the split. The same for train.objective mlm (no NSP head: the metrics have no NSP
fields), MLM loss alone. A config error under 2 ranks is said once, on one line. Without the
gradient all-reduce the ranks would drift apart from step 2.

usage: test_mpi.py BERTPRE mpi|nompi
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre, built = sys.argv[1], sys.argv[2]
if built != "mpi":
    print("SKIP: bertpre was built without MPI (tools/setup.sh installs libopenmpi-dev; reconfigure build/)")
    sys.exit(77)
mpirun = shutil.which("mpirun")
if not mpirun:
    print("SKIP: no mpirun on PATH (tools/setup.sh installs openmpi-bin)")
    sys.exit(77)

TOL, STEPS = 1e-5, 8
MODEL = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 32, "max_position_embeddings": 32, "hidden_dropout_prob": 0.1,
         "attention_probs_dropout_prob": 0.1}
TRAIN = {"micro_batch_size": 4, "global_batch_size": 16, "seq_length": 24, "max_predictions_per_seq": 4,
         "steps": STEPS, "log_every": 1, "learning_rate": 0.01, "warmup_proportion": 0.2}




env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
if os.geteuid() == 0:  # Open MPI refuses root unless told twice
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "run.json")
    with open(cfg, "w") as f:
        json.dump({"model": MODEL, "train": TRAIN}, f)
    runs = {}
    for name, prefix, objective in (("1 rank", [], "mlm+nsp"), ("2 ranks", [mpirun, "-np", "2", "--oversubscribe"],
                                                                  "mlm+nsp"),
                                    ("1 rank, MLM only", [], "mlm"),
                                    ("2 ranks, MLM only", [mpirun, "-np", "2", "--oversubscribe"], "mlm")):
        metrics = os.path.join(tmp, name.replace(" ", "_").replace(",", "") + ".jsonl")
        p = subprocess.run(prefix + [bertpre, "train", cfg, "--set", f"train.metrics_file={metrics}",
                                     "--set", f"train.objective={objective}"],
                           capture_output=True, text=True, env=env, timeout=120)
        out = p.stdout + p.stderr
        expect(f"{name}: exits 0", p.returncode == 0, out)
        runs[name] = (out, [json.loads(line) for line in open(metrics)] if os.path.exists(metrics) else [])

    # A config error under 2 ranks: said once (rank 0), on one line, not once per rank.
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        json.dump({"model": MODEL, "train": {**TRAIN, "steps": 0}}, f)
    p = subprocess.run([mpirun, "-np", "2", "--oversubscribe", bertpre, "train", bad], capture_output=True, text=True,
                       env=env, timeout=120)
    errors = [line for line in (p.stdout + p.stderr).splitlines() if "bertpre: error:" in line]
    expect("a config error (steps 0) under 2 ranks: non-zero exit, one error line naming the file and field",
           p.returncode != 0 and len(errors) == 1 and errors[0].startswith("bertpre: error: ") and bad in errors[0]
           and "steps" in errors[0], p.stdout[-1000:] + p.stderr[-2000:])

one, two = runs["1 rank"], runs["2 ranks"]
expect("1 rank plans 16 = 4 x 4 x 1", "global batch 16 = micro-batch 4 x 4 accumulated x 1 rank," in one[0], one[0])
expect("2 ranks plan 16 = 4 x 2 x 2", "global batch 16 = micro-batch 4 x 2 accumulated x 2 ranks" in two[0], two[0])
logged = sum(line.startswith("step ") for line in two[0].splitlines())
expect(f"2 ranks: rank 0 alone logs ({logged} step lines for {STEPS} steps)", logged == STEPS, two[0])
expect(f"both runs wrote {STEPS} metrics lines", len(one[1]) == STEPS and len(two[1]) == STEPS)
for a, b in zip(two[1], one[1]):
    errs = [abs(a[k] - b[k]) / abs(b[k]) for k in ("mlm_loss", "nsp_loss")]
    expect(f"step {b['step']}: mlm loss {a['mlm_loss']:.6f} vs {b['mlm_loss']:.6f}, nsp loss {a['nsp_loss']:.6f} vs "
           f"{b['nsp_loss']:.6f}: rel errors {errs[0]:.1e}, {errs[1]:.1e} (tolerance {TOL:.0e}); same lr",
           max(errs) <= TOL and a["lr"] == b["lr"])
one, two = runs["1 rank, MLM only"], runs["2 ranks, MLM only"]
expect("MLM only: both runs wrote 8 metrics lines, without NSP fields",
       len(one[1]) == STEPS and len(two[1]) == STEPS and not any("nsp_loss" in m for m in one[1] + two[1]))
errs = [abs(a["mlm_loss"] - b["mlm_loss"]) / abs(b["mlm_loss"]) for a, b in zip(two[1], one[1])]
expect(f"MLM only, 2 ranks vs 1: every step's mlm loss within {TOL:.0e} (worst {max(errs, default=1):.1e}), same lr",
       len(errs) == STEPS and max(errs) <= TOL and all(a["lr"] == b["lr"] for a, b in zip(two[1], one[1])))
sys.exit(checks.exit_status())
