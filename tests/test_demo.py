"""tools/demo.sh at reduced size: its outputs and its closing summary.

The demo runs on one linux-doc subtree (process/) with a 1,000-piece tokenizer, 10% of the
documents held out and 30 steps (DEMO_SUBTREES, DEMO_VOCAB, DEMO_EVAL_FRACTION, --set
train.steps=30), skipping setup and build. Checked: exit
0; each long step announces itself; a complete checkpoint of step 30; an export that
transformers loads with AutoModelForPreTraining and AutoTokenizer (the tokenizer's
vocabulary size, the run's hidden size and layers, a pair framed [CLS] A [SEP] B [SEP]); the
metrics file with the training lines and one "eval" line; `bertpre eval` of the checkpoint
(eval.json) with exactly that line's numbers; a PNG plot; and a summary naming each path and
repeating the numbers. The most-frequent-token baseline of the
eval line is recomputed here with h5py from the eval shard's masked_lm_ids over the rows the
evaluation reads (exact: a count ratio). One "next:" block; its lines that take seconds (the TensorBoard
files, the half-size export) run as printed.

usage: test_demo.py DEMO_SH BERTPRE
"""
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter

import checks
from checks import expect
from data_fixtures import linux_doc, require

demo, bertpre = sys.argv[1], os.path.abspath(sys.argv[2])
require(bertpre, "hdf5", "sentencepiece")
linux_doc()
with checks.needs("h5py, torch and transformers"):
    import h5py
    import torch
    import transformers  # noqa: F401

STEPS, EVAL_BATCHES, MICRO = 30, 4, 32
with tempfile.TemporaryDirectory() as tmp:
    work = os.path.join(tmp, "demo")
    env = dict(os.environ, DEMO_WORK=work, DEMO_SUBTREES="process", DEMO_VOCAB="1000", DEMO_EVAL_FRACTION="0.1", DEMO_NO_SETUP="1",
               DEMO_EVAL_BATCHES=str(EVAL_BATCHES),
               DEMO_BERTPRE=bertpre)
    p = subprocess.run(["bash", demo, "--set", f"train.steps={STEPS}", "--set", "train.log_every=10"], capture_output=True, text=True, env=env)
    out = p.stdout
    expect("tools/demo.sh exits 0", p.returncode == 0, out[-3000:] + p.stderr[-3000:])
    for step in ("training a SentencePiece tokenizer", "writing shards", "pretraining",
                 "exporting", "plotting the metrics"):
        expect(f"announces: {step}", f"demo: {step}" in out)

    ckpt = os.path.join(work, "checkpoints", f"step-{STEPS:09d}")
    expect(f"complete checkpoint {os.path.basename(ckpt)}", os.path.exists(os.path.join(ckpt, "COMPLETE")),
           os.listdir(os.path.join(work, "checkpoints")) if os.path.isdir(os.path.join(work, "checkpoints")) else "")
    export = os.path.join(work, "export")
    from transformers import AutoModelForPreTraining, AutoTokenizer
    try:
        model = AutoModelForPreTraining.from_pretrained(export)
        tok = AutoTokenizer.from_pretrained(export)
        loaded = True
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        loaded = False
        expect("the export loads with AutoModelForPreTraining and AutoTokenizer", False, repr(e))
    if loaded:
        cfg = model.config
        expect(f"export: {type(model).__name__}, vocab {cfg.vocab_size} = the tokenizer's {len(tok)}, "
               f"hidden {cfg.hidden_size}, {cfg.num_hidden_layers} layers (configs/pretrain-tiny.json: 64, 2)",
               type(model).__name__ == "BertForPreTraining" and cfg.vocab_size == len(tok) == 1000
               and cfg.hidden_size == 64 and cfg.num_hidden_layers == 2)
        ids = tok("First part.", "Second part.")["input_ids"]
        expect(f"the tokenizer frames a pair as [CLS] A [SEP] B [SEP] (ids 2 ... 3 ... 3): {ids}",
               ids[0] == 2 and ids[-1] == 3 and ids.count(3) == 2)

    metrics = os.path.join(work, "metrics.jsonl")
    lines = [json.loads(line) for line in open(metrics)] if os.path.exists(metrics) else []
    train = [line for line in lines if not line.get("eval")]
    evals = [line for line in lines if line.get("eval")]
    expect(f"metrics: training lines at steps 10, 20, 30: {[line['step'] for line in train]}",
           [line["step"] for line in train] == [10, 20, 30])
    expect("metrics: one eval line at the last step", len(evals) == 1 and evals[0]["step"] == STEPS, evals)
    png = os.path.join(work, "metrics.png")
    expect("a PNG plot", os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n")

    if evals:
        e = evals[0]
        with h5py.File(os.path.join(work, "shards", "eval-00000.hdf5")) as f:
            rows = min(EVAL_BATCHES * MICRO, f["masked_lm_ids"].shape[0] // MICRO * MICRO or MICRO)
            pos = f["masked_lm_positions"][:rows]
            ids = f["masked_lm_ids"][:rows]
        # A masked slot is real when its position is non-zero (position 0 is [CLS], never masked).
        targets = Counter(int(i) for r in range(rows) for i, q in zip(ids[r], pos[r]) if q > 0)
        n = sum(targets.values())
        baseline = max(targets.values()) / n
        expect(f"eval: {e['sequences']} sequences = the {rows} rows read", e["sequences"] == rows)
        expect(f"eval: most-frequent-token baseline {e['mlm_baseline_accuracy']:.6f} = h5py's {baseline:.6f}",
               abs(e["mlm_baseline_accuracy"] - baseline) < 1e-12)
        evaljson = os.path.join(work, "eval.json")
        ej = json.load(open(evaljson)) if os.path.exists(evaljson) else {}
        same = all(ej.get(k) == e[k] for k in ("sequences", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy",
                                               "mlm_baseline_accuracy"))
        expect("bertpre eval of the checkpoint (eval.json) gives the train-time eval's numbers exactly", same, ej)
        summary = out[out.find("demo: done"):]
        for path in (ckpt, export, metrics, png, evaljson):
            expect(f"summary names {os.path.relpath(path, tmp)}", path in summary, summary)
        want = (f"MLM accuracy {e['mlm_accuracy']:.3f} (most frequent token alone: {e['mlm_baseline_accuracy']:.3f}), "
                f"NSP accuracy {e['nsp_accuracy']:.3f}")
        expect(f"summary repeats the eval numbers: '{want}'", want in summary, summary)
        expect("summary gives the next commands (fine-tuning) and how to watch the run in TensorBoard",
               "tools/finetune.py" in summary and "tensorboard --logdir" in summary, summary)
        nexts = summary.count("\nnext:")
        expect(f"one 'next:' block: {nexts}", nexts == 1, summary)
        # The next lines that take seconds run as printed; fine-tuning (the finetune and
        # readme tests) and the longer demo take minutes.
        for line in summary[summary.find("\nnext:") + 7:].splitlines():
            if not line.startswith("  "):
                break
            command = line.split("   #")[0].strip()
            if "finetune.py" in command or "demo.sh" in command:
                continue
            q = subprocess.run(command, shell=True, capture_output=True, text=True)
            expect(f"next: '{command[:100]}' runs as printed", q.returncode == 0, q.stdout[-1000:] + q.stderr[-1000:])

sys.exit(checks.exit_status())
