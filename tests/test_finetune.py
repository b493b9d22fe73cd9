"""Fine-tuning proof: a model pretrained by bertpre, exported, fine-tuned with transformers.

A SentencePiece tokenizer (2,000 pieces) and shards are made from two linux-doc subtrees
(networking, filesystems); a small BERT (2 layers, hidden 64) is pretrained on them with
`bertpre train` for 60 steps and exported with its tokenizer. tools/finetune.py then loads
it with AutoModelForSequenceClassification and AutoTokenizer and fine-tunes it with plain
PyTorch on telling paragraphs of the two subtrees apart, whole documents held out.
Checked: the classification model's encoder weights are the exported ones (bitwise, before
fine-tuning); the mlm+nsp export's trained pooler is what the classifier reads; after 150 steps (400 paragraphs per class, 6 epochs) the held-out accuracy
is at least 0.65 (chance: 0.5 with balanced classes; on 200 held-out paragraphs the binomial
standard deviation at chance is 0.035, so 0.65 is 4.2 deviations above it; seen: 0.77). The pretraining uses the demo's initializer_range 0.05:
with BERT's 0.02 at hidden size 64 the [CLS] state hardly depends on the input (see
docs/DEMO.md, "What the demo shows") and fine-tuning stayed at chance over its first 50 steps.
The same pretraining MLM-only (a BertForMaskedLM export, no pooler): finetune says so, the
classifier reads the [CLS] hidden state (the pooler's dense set to the identity and frozen),
the saved model holds that identity, and its held-out accuracy is at least 0.65 too (printed
beside the mlm+nsp export's).

usage: test_finetune.py BERTPRE FINETUNE_SCRIPT
"""
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect
from data_fixtures import linux_doc, require, run

with checks.needs("torch, transformers and safetensors"):
    import torch
    import transformers
    from safetensors.torch import load_file

bertpre, script = sys.argv[1], sys.argv[2]
require(bertpre, "hdf5", "sentencepiece")
root = linux_doc()
subtrees = [os.path.join(root, "networking"), os.path.join(root, "filesystems")]
# The demo's model (configs/pretrain-tiny.json): initializer_range 0.05, no dropout.
MODEL = {"vocab_size": 2000, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 256, "max_position_embeddings": 64, "initializer_range": 0.05,
         "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}

with tempfile.TemporaryDirectory() as tmp:
    spm = os.path.join(tmp, "spm")
    run([bertpre, "tokenizer", "train", "--format", "text", "--pattern", "*.rst.gz", "--vocab-size", 2000,
         "--input-sentence-size", 20000, "--model-prefix", spm, *subtrees])
    shards = os.path.join(tmp, "shards")
    run([bertpre, "prep", "--tokenizer", spm + ".model", "--output", shards, "--format", "text", "--pattern",
         "*.rst.gz", "--seq-length", 64, "--max-predictions", 10, "--dupe-factor", 1, "--no-progress", *subtrees])
    cfg = os.path.join(tmp, "run.json")
    with open(cfg, "w") as f:
        json.dump({"model": MODEL, "train": {"micro_batch_size": 32, "seq_length": 64, "max_predictions_per_seq": 10,
                                             "steps": 60, "learning_rate": 0.01, "warmup_proportion": 0.1,
                                             "log_every": 20, "data": os.path.join(shards, "train-*.hdf5"),
                                             "tokenizer": spm + ".model",
                                             "checkpoint_dir": os.path.join(tmp, "ckpt")}}, f)
    run([bertpre, "train", cfg])
    export = os.path.join(tmp, "hf")
    run([bertpre, "export", os.path.join(tmp, "ckpt"), "--out", export])

    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    model = AutoModelForSequenceClassification.from_pretrained(export, num_labels=2)
    exported = load_file(os.path.join(export, "model.safetensors"))
    state = model.state_dict()
    encoder = [k for k in exported if k.startswith("bert.")]
    same = [k for k in encoder if k in state and torch.equal(state[k], exported[k])]
    expect(f"{type(model).__name__} starts from the exported encoder and pooler: {len(same)} of {len(encoder)} "
           "tensors bitwise equal", len(encoder) > 30 and len(same) == len(encoder),
           sorted(set(encoder) - set(same))[:5])

    result = os.path.join(tmp, "result.json")
    p = subprocess.run([sys.executable, script, export, "--per-class", "400", "--epochs", "6", "--json", result],
                       capture_output=True, text=True)
    print(p.stdout.strip())
    expect("tools/finetune.py exits 0", p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:])
    if p.returncode == 0:
        r = json.load(open(result))
        expect(f"held-out accuracy {r['accuracy']:.3f} on {r['held_out']} paragraphs >= 0.65 (chance {r['chance']:.3f})",
               r["accuracy"] >= 0.65 and r["held_out"] >= 200 and abs(r["chance"] - 0.5) < 1e-9)
    # The same pretraining MLM-only (train.objective mlm): a BertForMaskedLM export, no pooler.
    with open(cfg) as f:
        mlm = json.load(f)
    mlm["train"].update(objective="mlm", checkpoint_dir=os.path.join(tmp, "ckpt-mlm"))
    with open(cfg, "w") as f:
        json.dump(mlm, f)
    run([bertpre, "train", cfg])
    export_mlm, saved = os.path.join(tmp, "hf-mlm"), os.path.join(tmp, "tuned-mlm")
    run([bertpre, "export", os.path.join(tmp, "ckpt-mlm"), "--out", export_mlm])
    result_mlm = os.path.join(tmp, "result-mlm.json")
    p = subprocess.run([sys.executable, script, export_mlm, "--per-class", "400", "--epochs", "6", "--json", result_mlm,
                        "--save", saved], capture_output=True, text=True)
    print(p.stdout.strip())
    r2 = json.load(open(result_mlm)) if p.returncode == 0 else {}
    expect("an MLM-only export: finetune says it has no trained pooler and that the classifier reads the [CLS] hidden "
           "state, and what is fresh", p.returncode == 0 and "no trained pooler (an MLM-only export)" in p.stdout and
           "reads the [CLS] hidden state" in p.stdout and "fresh: the classifier" in p.stdout and
           r2.get("pooling") == "cls", p.stdout[-2000:] + p.stderr[-2000:])
    if r2:
        tuned = AutoModelForSequenceClassification.from_pretrained(saved)
        w, b = tuned.bert.pooler.dense.weight, tuned.bert.pooler.dense.bias
        expect("its saved model: the pooler's dense layer the identity with zero bias (the classifier read tanh of the "
               "[CLS] state, and AutoModelForSequenceClassification computes the same)",
               torch.equal(w, torch.eye(w.shape[0])) and torch.count_nonzero(b) == 0)
        expect(f"MLM-only held-out accuracy {r2['accuracy']:.3f} >= 0.65 beside the mlm+nsp export's "
               f"{r['accuracy']:.3f} (the same pretraining budget, paragraphs and seed)",
               r2["accuracy"] >= 0.65, r2)
    p = subprocess.run([sys.executable, script, tmp], capture_output=True, text=True)
    expect("a directory without an export: exit 1 naming the missing file",
           p.returncode == 1 and "config.json" in p.stderr, p.stderr)

sys.exit(checks.exit_status())
