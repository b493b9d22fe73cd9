"""tools/bench_gpu.py, the script the GPU machine runs for the throughput table, end to end on
the emulated CUDA backend with a tiny model and PyTorch on the CPU, so that a broken script is
found here and not in the first minutes of a GPU: exit 0; bench.json holds the GEMM rates,
bertpre rows (the exact GELU and gelu_new: the FFN's GELU epilogues) with positive
sequences/s and model TFLOP/s over the steps after the first two, and the PyTorch rows
(stock head and gathered head; eager on the gelu_new model); bench.txt has the table rows;
--profile writes the per-op report with its group lines; a stand-in PyTorch script that runs out of memory: exit 0, its rows "baseline unavailable: out
of memory (asked 3.73 GiB more)" in bench.json and bench.txt, no FAIL line; a torch.compile run
that does not fit before --deadline is unavailable with the seconds left; a 16x2x4 row
trains 4 micro-batches per step (global batch 8 in its config, 2 steps timed); a stand-in
bertpre whose training fails: exit 1 and a FAIL line naming the shape; one whose training
outlasts --deadline: exit 0 and a "cut:" line, not a failure; a ModernBERT training config as
--model: its model section written out, bertpre trained MLM only, a tokens/s line (rows x seq
and real tokens); --unpad on an h5py
shard whose rows all hold
10 real tokens of 16: an off and an on row, each with the real-token fraction 10/16 (exact:
every row has that length), real TFLOP/s below the padded count, and last MLM losses of the
two within 1e-3 relative (the same function: test_unpad sees the FP16 loss equal to the
last bit, and three steps of updates from gradients that differ by ~1e-7 move it far less).

usage: test_bench_gpu.py BENCH_GPU_PY BERTPRE MODEL_CONFIG
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import checks
from checks import expect

script, bertpre, model = sys.argv[1:4]
with checks.needs("torch", hint=None):
    import torch  # noqa: F401
with tempfile.TemporaryDirectory() as out:
    common = ["--out", out, "--bertpre", bertpre, "--model", model, "--backend", "cuda-emu", "--gemm-size", "48",
              "--torch-device", "cpu", "--torch-dtype", "fp32"]
    probe = subprocess.run([bertpre, "bench", "gemm", "--backend", "cuda-emu", "--m", "8", "--n", "8", "--k", "8"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: no CUDA emulation in this build: {probe.stderr.strip()}")
        sys.exit(77)
    p = subprocess.run([sys.executable, script] + common + ["--shapes", "16x2:fp16,16x2:fp16:gelu_new", "--steps", "3",
                                                             "--compile", "0"],
                       capture_output=True, text=True, timeout=600)
    expect("bench_gpu.py exits 0", p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:])
    rows = json.load(open(os.path.join(out, "bench.json"))) if os.path.exists(os.path.join(out, "bench.json")) else []
    gemm = [r for r in rows if r["framework"] == "gemm"]
    expect("bench.json: GEMM rates for fp16", gemm and (gemm[0]["tflops"].get("fp16") or 0) > 0, gemm)
    ours = [r for r in rows if r["framework"] == "bertpre"]
    expect("bench.json: the bertpre rows (exact and tanh GELU), 1 step timed after the first two, seq/s and model "
           "TFLOP/s > 0", [r.get("act") for r in ours] == ["", "gelu_new"] and
           all(r.get("steps_timed") == 1 and r.get("seq_per_s", 0) > 0 and r.get("model_tflops", -1) >= 0
               for r in ours), ours)
    theirs = {(r["act"], r["mode"], r["head"]) for r in rows if r["framework"] == "pytorch" and r.get("seq_per_s", 0) > 0}
    expect("bench.json: PyTorch eager with the stock and the gathered head, and eager on the gelu_new model",
           theirs == {("", "eager", "full"), ("", "eager", "gathered"), ("gelu_new", "eager", "full")}, rows)
    tanh_model = os.path.join(out, "model-gelu_new.json")
    expect("the gelu_new runs' model is the given one with hidden_act gelu_new",
           os.path.exists(tanh_model) and json.load(open(tanh_model)) == dict(json.load(open(model)),
                                                                            hidden_act="gelu_new"))
    table = open(os.path.join(out, "bench.txt")).read() if os.path.exists(os.path.join(out, "bench.txt")) else ""
    expect("bench.txt: the table rows for 16x2 fp16 and 16x2 fp16 gelu_new",
           "16x2 fp16 " in table and "16x2 fp16 gelu_new" in table and "bertpre seq/s" in table, table)

    # A baseline that cannot run is "unavailable" with its reason, never a failed check.
    oom = os.path.join(out, "oom.py")
    with open(oom, "w") as f:
        f.write("import sys\nsys.stderr.write('Traceback (most recent call last):\\n  File \"bench_torch.py\"\\n"
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.73 GiB. GPU 0 has a total capacity "
                "of 79.19 GiB\\n')\nsys.exit(1)\n")
    o2 = os.path.join(out, "oom")
    p = subprocess.run([sys.executable, script] + common[2:] + ["--out", o2, "--shapes", "16x2:fp16,16x2x4:fp16",
                       "--steps", "3", "--compile", "2", "--torch-script", oom, "--deadline", str(time.time() + 600),
                       "--compile-seconds", "100000"], capture_output=True, text=True, timeout=600)
    expect("a PyTorch stand-in out of memory: bench_gpu.py exits 0 and prints no FAIL line",
           p.returncode == 0 and "FAIL" not in p.stdout, p.stdout[-3000:] + p.stderr[-2000:])
    rows = json.load(open(os.path.join(o2, "bench.json"))) if os.path.exists(os.path.join(o2, "bench.json")) else []
    torch_rows = {(r["mode"], r["head"]): r.get("unavailable", "") for r in rows if r["framework"] == "pytorch"}
    expect("bench.json: eager (stock and gathered head) unavailable: out of memory (asked 3.73 GiB more); no error "
           "row", torch_rows.get(("eager", "full")) == torch_rows.get(("eager", "gathered")) ==
           "out of memory (asked 3.73 GiB more)" and not any("error" in r for r in rows), rows)
    expect("bench.json: torch.compile not run, naming the seconds left and the 100000 it needs",
           re.fullmatch(r"not run: \d+ s left before the command's limit, torch.compile needs about 100000",
                        torch_rows.get(("compile", "full"), "")), torch_rows)
    table = open(os.path.join(o2, "bench.txt")).read() if os.path.exists(os.path.join(o2, "bench.txt")) else ""
    expect("bench.txt: 'baseline unavailable: PyTorch eager (full head) at 16x2 fp16: out of memory (asked 3.73 GiB "
           "more)'", "baseline unavailable: PyTorch eager (full head) at 16x2 fp16: out of memory (asked 3.73 GiB "
           "more)" in table, table)
    acc = [r for r in rows if r["framework"] == "bertpre" and r.get("accum") == 4]
    cfg = os.path.join(o2, "bertpre-16x2-fp16-accum4.json")
    expect("16x2x4: a bertpre row of 4 micro-batches per step, 2 steps timed, global batch 8, no PyTorch row",
           len(acc) == 1 and acc[0].get("steps_timed") == 2 and acc[0].get("seq_per_s", 0) > 0 and
           os.path.exists(cfg) and json.load(open(cfg))["train"]["global_batch_size"] == 8 and
           len(torch_rows) == 3, acc)
    expect("bench.txt: the 16x2x4 row, and the GPU named first ('GPU: CUDA emulation')",
           "\n16x2x4 fp16 " in table and table.startswith("GPU: CUDA emulation;"), table)

    # A failing bertpre run is a failure, with its own FAIL line.
    stand_in = os.path.join(out, "bertpre-fails")
    with open(stand_in, "w") as f:
        f.write(f'#!/bin/sh\n[ "$1" = train ] && {{ echo "error: stand-in training fails" >&2; exit 1; }}\n'
                f'exec {os.path.abspath(bertpre)} "$@"\n')
    os.chmod(stand_in, 0o755)
    o3 = os.path.join(out, "fails")
    p = subprocess.run([sys.executable, script] + [c if c != bertpre else stand_in for c in common[2:]] +
                       ["--out", o3, "--shapes", "16x2:fp16", "--torch", "0"], capture_output=True, text=True,
                       timeout=600)
    expect("bertpre's training fails: exit 1 and 'FAIL bertpre at 16x2 fp16: exit 1: error: stand-in training fails'",
           p.returncode == 1 and "FAIL bertpre at 16x2 fp16: exit 1: error: stand-in training fails" in p.stdout,
           p.stdout[-3000:] + p.stderr[-2000:])

    # A bertpre run that the command's --deadline ends is cut, not failed.
    slow = os.path.join(out, "bertpre-slow")
    with open(slow, "w") as f:
        f.write(f'#!/bin/sh\n[ "$1" = train ] && exec sleep 120\nexec {os.path.abspath(bertpre)} "$@"\n')
    os.chmod(slow, 0o755)
    o4 = os.path.join(out, "cut")
    p = subprocess.run([sys.executable, script] + [c if c != bertpre else slow for c in common[2:]] +
                       ["--out", o4, "--shapes", "16x2:fp16", "--torch", "0", "--deadline", str(time.time() + 20)],
                       capture_output=True, text=True, timeout=600)
    table = open(os.path.join(o4, "bench.txt")).read() if os.path.exists(os.path.join(o4, "bench.txt")) else ""
    expect("a bertpre run ended by --deadline (or not started before it): exit 0, no FAIL line, 'cut: bertpre at 16x2 "
           "fp16: ...the command's time limit...' in bench.txt",
           p.returncode == 0 and "FAIL" not in p.stdout and
           re.search(r"^cut: bertpre at 16x2 fp16: (timed out after \d+ s: the command's time limit \(--deadline\)|"
                     r"not run: the command's time limit had passed)$", table, re.M) is not None, p.stdout[-3000:] + p.stderr[-2000:] + table)

    # A ModernBERT from a training config's model section: bertpre trains it MLM only (no NSP
    # head), and the table adds its tokens/s (PyTorch left out: this environment's transformers
    # may predate ModernBERT; test bench_torch_modernbert runs that side).
    o5 = os.path.join(out, "modernbert")
    modern_model = {"model_type": "modernbert", "vocab_size": 101, "hidden_size": 64, "num_hidden_layers": 3,
                    "num_attention_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64,
                    "local_attention": 8, "global_attn_every_n_layers": 3, "pad_token_id": 0}
    recipe = os.path.join(out, "modernbert-recipe.json")
    json.dump({"model": modern_model, "train": {"optimizer": "stableadamw"}}, open(recipe, "w"))
    p = subprocess.run([sys.executable, script] + [c if c != model else recipe for c in common[2:]] +
                       ["--out", o5, "--shapes", "16x2:fp16", "--torch", "0", "--steps", "3"],
                       capture_output=True, text=True, timeout=600)
    cfg = os.path.join(o5, "bertpre-16x2-fp16.json")
    train = json.load(open(cfg))["train"] if os.path.exists(cfg) else {}
    written = os.path.join(o5, "model.json")
    rows = json.load(open(os.path.join(o5, "bench.json"))) if os.path.exists(os.path.join(o5, "bench.json")) else []
    ours = [r for r in rows if r["framework"] == "bertpre"]
    expect("a ModernBERT training config as --model: exit 0, its model section written as model.json, bertpre "
           "trained MLM only (objective mlm), seq/s > 0",
           p.returncode == 0 and os.path.exists(written) and json.load(open(written)) == modern_model
           and train.get("objective") == "mlm" and len(ours) == 1 and ours[0].get("seq_per_s", 0) > 0,
           p.stdout[-3000:] + p.stderr[-2000:])
    table = open(os.path.join(o5, "bench.txt")).read() if os.path.exists(os.path.join(o5, "bench.txt")) else ""
    m = re.search(r"^tokens/s at 16x2 fp16: bertpre ([\d,]+) \(([\d,]+) real\)$", table, re.M)
    expect("bench.txt: the ModernBERT's tokens/s = seq/s x 16, and the real tokens' = that x the real-token fraction",
           m and ours and abs(int(m.group(1).replace(",", "")) - ours[0]["seq_per_s"] * 16) <= 1
           and abs(int(m.group(2).replace(",", "")) - ours[0]["seq_per_s"] * 16 * ours[0]["real_token_fraction"]) <= 1,
           table)

    p = subprocess.run([sys.executable, script] + common + ["--profile", "16", "2"], capture_output=True, text=True,
                       timeout=600)
    report = os.path.join(out, "profile-16.txt")
    text = open(report).read() if os.path.exists(report) else ""
    expect("--profile 16 2: exit 0 and a report with group lines", p.returncode == 0 and "group attention" in text,
           p.stdout[-2000:] + text)

    if checks.features(bertpre)["hdf5"]:
        import h5py
        import numpy as np
        shards = os.path.join(out, "shards")
        os.makedirs(shards)
        n, T, L = 32, 16, 10  # masked positions: bench_gpu.py's seq x 20 / 128 = 2
        rng = np.random.default_rng(5)
        ids = np.zeros((n, T), "i4")
        ids[:, :L] = rng.integers(5, 90, (n, L))
        ids[:, 0], ids[:, L - 1] = 2, 3
        mask = np.zeros((n, T), "i1")
        mask[:, :L] = 1
        positions = np.tile(np.array([2, 5], "i4"), (n, 1))
        with h5py.File(os.path.join(shards, "train-00000.hdf5"), "w") as f:
            f.create_dataset("input_ids", data=ids)
            f.create_dataset("input_mask", data=mask)
            f.create_dataset("segment_ids", data=np.zeros((n, T), "i1"))
            f.create_dataset("masked_lm_positions", data=positions)
            f.create_dataset("masked_lm_ids", data=np.take_along_axis(ids, positions, 1))
            f.create_dataset("next_sentence_labels", data=rng.integers(0, 2, n).astype("i1"))
        p = subprocess.run([sys.executable, script] + common + ["--unpad", f"16x2:{shards}", "--steps", "3"],
                           capture_output=True, text=True, timeout=600)
        expect("--unpad 16x2:SHARDS exits 0", p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:])
        path = os.path.join(out, "unpad.json")
        rows = [r for r in (json.load(open(path)) if os.path.exists(path) else []) if r["framework"] == "bertpre"]
        by = {r.get("unpad"): r for r in rows}
        expect("unpad.json: an off and an on row, real-token fraction 10/16 in both, real TFLOP/s below the padded "
               "count", set(by) == {"off", "on"} and all(r.get("real_token_fraction") == 0.625 and
                                                         0 < r.get("model_tflops_real", 0) <= r["model_tflops"]
                                                         for r in rows), rows)
        if set(by) == {"off", "on"} and all("last_mlm_loss" in r for r in rows):
            a, b = by["off"]["last_mlm_loss"], by["on"]["last_mlm_loss"]
            expect(f"unpad on and off: last MLM loss {b:.6f} against {a:.6f} (<= 1e-3 relative)",
                   abs(a - b) <= 1e-3 * abs(a), rows)
        table = open(os.path.join(out, "unpad.txt")).read() if os.path.exists(os.path.join(out, "unpad.txt")) else ""
        expect("unpad.txt: the two rows and the speed-up", table.count("16x2") == 2 and "x\n" in table, table)
    else:
        print("skip: --unpad (needs a build with HDF5)")
sys.exit(checks.exit_status())
