"""tools/tta.py end to end on the CPU at its toy size: one linux-doc subtree (process/, 10% of
the documents held out), 24 steps, evaluations every 8, bertpre and PyTorch eager with two
seeds (and torch.compile where the installed PyTorch has it).

Checked:
  - every run's JSON lines: evaluations at steps 8, 16 and 24 with step, wall_s (rising),
    train_loss, eval_accuracy in [0, 1], eval_loss and n_pred;
  - at every evaluation all runs saw the same masked positions: n_pred equals the count that
    h5py reads from the eval shard (NVIDIA's rule: the masked_lm_positions of a row up to its
    first zero) over the rows evaluated (eval_batches x batch);
  - the summary: the required fields; target_accuracy = PyTorch eager's last eval_accuracy;
    X_final_accuracy = run X's last one; X_seconds_to_target = the first wall_s at which run
    X's eval_accuracy >= the target (recomputed here from the JSON lines), null if none;
    corpus_tokens > 0;
  - the runs learned: every final held-out MLM loss below ln(vocab_size) (uniform guessing),
    and bertpre's within 0.15 nats of PyTorch's (both FP32 from different random initial
    weights and batch orders; the two PyTorch seeds differ by ~0.03 here);
  - the config given to `bertpre train` names its files by absolute paths; the plot is a PNG;
  - bad values refused before any work, naming the option (the default --eval-fraction 0.02
    on a corpus of 41 documents, --seed -1, an OUT that is a file);
  - --objective mlm, run in the first run's OUT (its tokenizer replaced): both sides MLM-only (train.objective mlm, transformers.BertForMaskedLM) on
    full-sentences shards, no NSP loss recorded, the same masked positions counted, final
    losses below ln(vocab_size) and within 0.15 nats of each other;
  - `tools/tta.py corpus DIR` stages exactly the English linux-doc sources and the Python
    documentation sources (gzipped, byte-identical after gunzip), where python3.11-doc is
    installed.
usage: test_tta.py TTA_PY BERTPRE
"""
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect
from data_fixtures import linux_doc, require

tta, bertpre = sys.argv[1], os.path.abspath(sys.argv[2])
require(bertpre, "hdf5", "sentencepiece")
corpus = os.path.join(linux_doc(), "process")
with checks.needs("h5py, torch, transformers and matplotlib"):
    import h5py
    import numpy as np
    import torch
    import transformers  # noqa: F401
    import matplotlib  # noqa: F401

REQUIRED = ["gpu", "commit", "model", "corpus_tokens", "steps", "target_accuracy", "bertpre_seconds_to_target",
            "pytorch_seconds_to_target", "bertpre_final_accuracy", "pytorch_final_accuracy"]
FIELDS = {"step", "wall_s", "train_loss", "eval_accuracy", "eval_loss", "n_pred"}

with tempfile.TemporaryDirectory() as tmp:
    # Refused before any work, naming the option, without a traceback: the default --eval-fraction
    # 0.02 on 41 documents, a negative seed, an OUT that is a file.
    few = os.path.join(tmp, "few")
    os.makedirs(few)
    for k in range(41):
        with open(os.path.join(few, f"{k}.txt"), "w") as f:
            f.write(f"Document {k} says one thing. Then it says another thing about process {k}.\n")
    afile = os.path.join(tmp, "a-file")
    open(afile, "w").close()
    for args, named in (([few], "--eval-fraction 0.02 of the corpus's 41 documents"),
                        ([corpus, "--seed", "-1"], "--seed -1"), ([corpus, "--out", afile], afile)):
        bad = os.path.join(tmp, "bad")
        p = subprocess.run([sys.executable, tta, "run", "--backend", "cpu", "--size", "toy", "--out", bad,
                            "--bertpre", bertpre, "--corpus", *args], capture_output=True, text=True)
        expect(f"tta.py run --corpus {' '.join(os.path.basename(a) for a in args)}: exit 1 naming '{named}', no "
               "traceback, no tokenizer made", p.returncode == 1 and named in p.stderr and "Traceback" not in p.stderr
               and not os.path.exists(os.path.join(bad, "spm.model")), p.stderr[-800:])
    out = os.path.join(tmp, "out")
    cmd = [sys.executable, tta, "run", "--backend", "cpu", "--size", "toy", "--corpus", corpus, "--out", out,
           "--bertpre", bertpre, "--eval-fraction", "0.1", "--dupe-factor", "1", "--second-seed"]
    compiled = hasattr(torch, "compile")
    if compiled:
        cmd.append("--compile")
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    expect("tools/tta.py run --backend cpu --size toy: exit 0", p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:])
    if p.returncode != 0:
        sys.exit(1)
    print(p.stdout)
    runs = ["bertpre", "pytorch", "pytorch_seed2"] + (["pytorch_compile"] if compiled else [])
    if not compiled:
        print("skip: torch.compile run (not in PyTorch", torch.__version__ + ")")
    records = {}
    for name in runs:
        with open(os.path.join(out, f"{name}.jsonl")) as f:
            records[name] = [json.loads(line) for line in f]
        r = records[name]
        expect(f"{name}.jsonl: evaluations at steps 8, 16, 24 with {sorted(FIELDS)}, wall_s rising, accuracy in [0, 1]",
               [x["step"] for x in r] == [8, 16, 24] and all(FIELDS <= set(x) for x in r)
               and all(b["wall_s"] > a["wall_s"] > 0 for a, b in zip(r, r[1:]))
               and all(0 <= x["eval_accuracy"] <= 1 and x["eval_loss"] > 0 for x in r), r)

    summary = json.load(open(os.path.join(out, "summary.json")))
    cfg = json.load(open(os.path.join(out, "bertpre.json")))
    rows = summary["eval_sequences"]
    with h5py.File(sorted(glob.glob(os.path.join(out, "shards", "eval-*.hdf5")))[0], "r") as f:
        pos = np.asarray(f["masked_lm_positions"][:rows])
    n_pred = int(np.cumprod(pos != 0, axis=1).sum())
    expect(f"every evaluation of every run counted the {n_pred} masked positions h5py finds in the {rows} rows",
           len(pos) == rows and all(x["n_pred"] == n_pred for r in records.values() for x in r),
           {k: [x["n_pred"] for x in r] for k, r in records.items()})

    missing = [k for k in REQUIRED if k not in summary]
    expect(f"summary.json has {REQUIRED}", not missing, missing)
    target = records["pytorch"][-1]["eval_accuracy"]
    expect(f"target_accuracy {summary.get('target_accuracy')} = PyTorch eager's final held-out accuracy {target}",
           summary.get("target_accuracy") == target)
    for name, r in records.items():
        first = next((x["wall_s"] for x in r if x["eval_accuracy"] >= target), None)
        expect(f"{name}: final accuracy {r[-1]['eval_accuracy']} and seconds to target {first} (first wall_s with "
               f"accuracy >= target) as in the summary",
               summary.get(f"{name}_final_accuracy") == r[-1]["eval_accuracy"]
               and summary.get(f"{name}_seconds_to_target") == first,
               {k: v for k, v in summary.items() if k.startswith(name)})
    gaps = (summary.get("bertpre_minus_pytorch_final_accuracy"), summary.get("pytorch_seed2_minus_pytorch_final_accuracy"))
    expect(f"summary's fidelity gaps {gaps} = the final accuracies' differences",
           gaps == (records["bertpre"][-1]["eval_accuracy"] - target, records["pytorch_seed2"][-1]["eval_accuracy"] - target))
    expect(f"corpus_tokens {summary.get('corpus_tokens')} > 0, steps 24, model size toy",
           summary.get("corpus_tokens", 0) > 0 and summary.get("steps") == 24
           and summary.get("model", {}).get("size") == "toy")

    vocab = summary["model"]["vocab_size"]
    finals = {k: r[-1]["eval_loss"] for k, r in records.items()}
    expect(f"final held-out MLM losses {finals} below ln({vocab}) = {math.log(vocab):.3f}",
           all(v < math.log(vocab) for v in finals.values()))
    gap = abs(finals["bertpre"] - finals["pytorch"])
    expect(f"bertpre's final held-out loss within 0.15 nats of PyTorch's: {gap:.3f} (seeds differ by "
           f"{abs(finals['pytorch'] - finals['pytorch_seed2']):.3f})", gap <= 0.15)
    t = cfg["train"]
    expect("the bertpre config names data, eval_data, tokenizer and metrics_file by absolute paths",
           all(os.path.isabs(t[k]) for k in ("data", "eval_data", "tokenizer", "metrics_file")), t)
    with open(os.path.join(out, "tta.png"), "rb") as f:
        expect("tta.png is a PNG", f.read(8) == b"\x89PNG\r\n\x1a\n")

    # Both sides MLM-only (--objective mlm): BertForMaskedLM and train.objective mlm on packed rows,
    # in the OUT of the run above (its tokenizer and shards replaced, not "already exists").
    out_mlm = out
    p = subprocess.run([sys.executable, tta, "run", "--backend", "cpu", "--size", "toy", "--corpus", corpus, "--out",
                        out_mlm, "--bertpre", bertpre, "--eval-fraction", "0.1", "--dupe-factor", "1", "--objective",
                        "mlm"], capture_output=True, text=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    expect("tools/tta.py run --objective mlm: exit 0, PyTorch's side a BertForMaskedLM",
           p.returncode == 0 and "transformers.BertForMaskedLM" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:])
    if p.returncode == 0:
        summary = json.load(open(os.path.join(out_mlm, "summary.json")))
        cfg = json.load(open(os.path.join(out_mlm, "bertpre.json")))
        mlm = {name: [json.loads(line) for line in open(os.path.join(out_mlm, f"{name}.jsonl"))]
               for name in ("bertpre", "pytorch")}
        with h5py.File(sorted(glob.glob(os.path.join(out_mlm, "shards", "eval-*.hdf5")))[0], "r") as f:
            packing = f.attrs.get("packing")
            pos = np.asarray(f["masked_lm_positions"][:summary["eval_sequences"]])
        n_pred = int(np.cumprod(pos != 0, axis=1).sum())
        finals = {k: r[-1]["eval_loss"] for k, r in mlm.items()}
        expect(f"MLM only: full-sentences shards ({packing}), bertpre trains train.objective mlm, no NSP loss in any "
               f"record, both runs counted the {n_pred} masked positions, final losses {finals} below "
               f"ln({vocab}) and within 0.15 nats of each other",
               packing in ("full-sentences", b"full-sentences") and cfg["train"]["objective"] == "mlm" and
               summary.get("objective") == "mlm" and
               all(FIELDS <= set(x) and "eval_nsp_loss" not in x for r in mlm.values() for x in r) and
               all(x["n_pred"] == n_pred for r in mlm.values() for x in r) and
               all(v < math.log(vocab) for v in finals.values()) and abs(finals["bertpre"] - finals["pytorch"]) <= 0.15,
               {k: r[-1] for k, r in mlm.items()})

    # tools/tta.py corpus: every English linux-doc source as installed, every Python source gzipped.
    python_doc = "/usr/share/doc/python3.11/html/_sources"
    if os.path.isdir(python_doc):
        staged = os.path.join(tmp, "corpus")
        p = subprocess.run([sys.executable, tta, "corpus", staged], capture_output=True, text=True)
        root = linux_doc()
        want_linux = [os.path.relpath(f, root) for f in glob.glob(os.path.join(root, "**", "*.rst.gz"), recursive=True)
                      if not os.path.relpath(f, root).startswith("translations/")]
        want_python = [os.path.relpath(f, python_doc)
                       for f in glob.glob(os.path.join(python_doc, "**", "*.rst.txt"), recursive=True)]
        got_linux = [os.path.relpath(f, os.path.join(staged, "linux-doc"))
                     for f in glob.glob(os.path.join(staged, "linux-doc", "**", "*"), recursive=True) if os.path.isfile(f)]
        got_python = [os.path.relpath(f, os.path.join(staged, "python-doc"))
                      for f in glob.glob(os.path.join(staged, "python-doc", "**", "*"), recursive=True)
                      if os.path.isfile(f)]
        expect(f"corpus: exit 0, the {len(want_linux)} English linux-doc sources and the {len(want_python)} Python "
               f"sources (.gz), nothing else", p.returncode == 0 and sorted(got_linux) == sorted(want_linux)
               and sorted(got_python) == sorted(f + ".gz" for f in want_python), p.stdout + p.stderr)
        import gzip
        sample = sorted(want_python)[0]
        with open(os.path.join(python_doc, sample), "rb") as a, \
                gzip.open(os.path.join(staged, "python-doc", sample + ".gz"), "rb") as b:
            expect(f"corpus: {sample} gunzips to the installed file", a.read() == b.read())
    else:
        print(f"skip: tools/tta.py corpus ({python_doc} is not installed: tools/setup.sh installs python3.11-doc)")

sys.exit(checks.exit_status())
