"""tools/finetune.py --data: fine-tuning on the user's own labelled text.

The labelled data come from a corpus other than linux-doc: paragraphs (8 words or more) of the
Python standard library's docstrings, labelled by their package (asyncio, email, unittest;
data_fixtures.python_docstrings). The model is pretrained here for 10 steps with bertpre (a
600-piece tokenizer and shards from the same docstrings, the tiny preset's model) and exported.
Checked: a folder per class (asyncio, email: a file per paragraph) and a TSV of
LABEL<TAB>TEXT lines (three classes) both fine-tune with exit 0 (one epoch); the classes are
the folder names / labels in sorted order; every 5th example of each class is held out
(counted here); --per-class 100 trains 100 of each; chance is the largest held-out class share
(computed here); the model saved with --save has one output per class and their names, and
its held-out accuracy recomputed here with transformers, one example at a time on the split
computed here, is the reported one (correct counts equal, or one apart: a near-tie can flip
with the batch's padding). How well such a model classifies is the `finetune` test's subject
(linux-doc, a longer pretraining); this one checks the handling of the user's data. A TSV line
without a tab, one class only and a missing --data path are errors naming them.

usage: test_finetune_data.py BERTPRE FINETUNE_SCRIPT
"""
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect
from data_fixtures import python_docstrings, require, run

with checks.needs("torch and transformers"):
    import torch
    import transformers  # noqa: F401

bertpre, script = sys.argv[1], sys.argv[2]
require(bertpre, "hdf5", "sentencepiece")
CLASSES = ["asyncio", "email", "unittest"]
PER_CLASS = 100
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

with tempfile.TemporaryDirectory() as tmp:
    examples = {}
    for package in CLASSES:
        for path in python_docstrings(os.path.join(tmp, "docstrings", package), [package]):
            examples.setdefault(package, []).extend(
                " ".join(par.split()) for par in open(path).read().split("\n\n") if len(par.split()) >= 8)
    print("paragraphs: " + ", ".join(f"{c} {len(examples[c])}" for c in CLASSES))

    # A small model pretrained on the same docstrings (the tiny preset, 10 steps), exported.
    corpus = os.path.join(tmp, "docstrings")
    spm = os.path.join(tmp, "spm")
    run([bertpre, "tokenizer", "train", "--format", "text", "--vocab-size", 600, "--input-sentence-size", 100000,
         "--model-prefix", spm, corpus])
    shards = os.path.join(tmp, "shards")
    run([bertpre, "prep", "--tokenizer", spm + ".model", "--output", shards, "--format", "text", "--seq-length", 64,
         "--max-predictions", 10, "--dupe-factor", 2, "--no-progress", corpus])
    cfg = json.load(open(os.path.join(root, "configs", "pretrain-tiny.json")))
    cfg["model"]["vocab_size"] = 600
    cfg["train"].update(steps=10, log_every=10, data=os.path.join(shards, "train-*.hdf5"), tokenizer=spm + ".model",
                        checkpoint_dir=os.path.join(tmp, "ckpt"))
    with open(os.path.join(tmp, "run.json"), "w") as f:
        json.dump(cfg, f)
    run([bertpre, "train", os.path.join(tmp, "run.json")])
    export = os.path.join(tmp, "hf")
    run([bertpre, "export", os.path.join(tmp, "ckpt"), "--out", export])

    folders = os.path.join(tmp, "labelled")
    for package in CLASSES[:2]:
        os.makedirs(os.path.join(folders, package))
        for i, text in enumerate(examples[package]):
            with open(os.path.join(folders, package, f"{i:05d}.txt"), "w") as f:
                f.write(text + "\n")
    tsv = os.path.join(tmp, "labelled.tsv")
    with open(tsv, "w") as f:
        for package in CLASSES:
            f.write("".join(f"{package}\t{text}\n" for text in examples[package]))
    result, saved = os.path.join(tmp, "result.json"), os.path.join(tmp, "finetuned")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    for data, classes in ((folders, CLASSES[:2]), (tsv, CLASSES)):
        # The split computed here: examples 4, 9, 14, ... of each class (file or line order).
        held = [(text, k) for k, c in enumerate(classes) for i, text in enumerate(examples[c]) if i % 5 == 4]
        chance = max(sum(y == k for _, y in held) for k in range(len(classes))) / len(held)
        p = subprocess.run([sys.executable, script, export, "--data", data, "--per-class", str(PER_CLASS),
                            "--epochs", "1", "--json", result, "--save", saved], capture_output=True, text=True)
        print(p.stdout.strip())
        name = os.path.basename(data)
        expect(f"--data {name}: exits 0", p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:])
        if p.returncode != 0:
            continue
        r = json.load(open(result))
        expect(f"--data {name}: classes {r['classes']} = {classes}", r["classes"] == classes)
        expect(f"--data {name}: every 5th example held out ({r['held_out']} = {len(held)}), {PER_CLASS} per class "
               f"trained ({r['train']})", r["held_out"] == len(held) and r["train"] == PER_CLASS * len(classes))
        expect(f"--data {name}: chance {r['chance']:.4f} = {chance:.4f}", abs(r["chance"] - chance) < 1e-12)
        # The reported accuracy against the saved model run here one example at a time (no
        # padding) on the held-out examples chosen here: equal counts, or one apart where a
        # near-tie of two logits flips with the batch's padding (float32 rounding).
        model = AutoModelForSequenceClassification.from_pretrained(saved).eval()
        tok = AutoTokenizer.from_pretrained(saved)
        with torch.no_grad():
            correct = sum(int(model(**tok(text, truncation=True, max_length=64, return_tensors="pt")).logits.argmax(-1))
                          == y for text, y in held)
        reported = round(r["accuracy"] * len(held))
        expect(f"--data {name}: the saved model's labels {model.config.id2label} and {model.num_labels} outputs",
               model.num_labels == len(classes) and [model.config.id2label[k] for k in range(len(classes))] == classes)
        expect(f"--data {name}: reported held-out accuracy {r['accuracy']:.4f} = {reported}/{len(held)}, recomputed "
               f"{correct}/{len(held)}", abs(reported - correct) <= 1)

    bad = os.path.join(tmp, "bad.tsv")
    with open(bad, "w") as f:
        f.write("asyncio\tan event loop runs tasks and callbacks\nno tab on this line\n")
    one = os.path.join(tmp, "one-class")
    os.makedirs(os.path.join(one, "only"))
    with open(os.path.join(one, "only", "a.txt"), "w") as f:
        f.write("some text\n")
    for data, named in ((bad, f"{bad}:2"), (one, "at least 2"), (os.path.join(tmp, "missing"), "missing")):
        p = subprocess.run([sys.executable, script, export, "--data", data], capture_output=True, text=True)
        expect(f"--data {os.path.basename(data)}: exit 1 naming '{os.path.basename(named)}': {p.stderr.strip()}",
               p.returncode == 1 and named in p.stderr, p.stderr)

sys.exit(checks.exit_status())
