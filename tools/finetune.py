#!/usr/bin/env python3
"""Fine-tunes an exported bertpre model (`bertpre export CKPT --out DIR`) on a labelled
classification task with plain transformers + PyTorch: your own labelled text (--data), or by
default which documentation subtree of the Linux kernel sources (Debian's linux-doc) a
paragraph comes from.

    tools/finetune.py EXPORT_DIR [--data DIR_OR_TSV] [--per-class N] [--epochs 4] [--lr 1e-3]
                      [--seed 0] [--json FILE] [--save DIR]
    tools/finetune.py EXPORT_DIR [--classes networking,filesystems] [--per-class 800] ...

--data DIR: a folder per class (the folder's name is the label), each file inside one example
(its text, whitespace collapsed; files starting with '.' left out); a class folder without an
example is an error. --data FILE.tsv: one example per line, LABEL<TAB>TEXT. Every 5th example
of each class (files in sorted order, lines in file order) is held out: examples cut from one
document can sit on both sides of the split, so group them: inside a class folder, a subfolder
is one document (its files its examples), and every 5th document is held out whole.
--per-class N takes at most N training examples of each class (default all).

Without --data: paragraphs of at least 8 words are taken from the .rst.gz files of two
linux-doc subtrees (--classes); whole documents are held out (every 5th document in sorted
order), so that no held-out paragraph shares a document with a training one, and classes are
balanced by taking the same number of paragraphs from each (--per-class, default 800).

The model is loaded with AutoModelForSequenceClassification (the pretrained encoder; a new
classifier with one output per class) and the tokenizer with AutoTokenizer, both from
EXPORT_DIR. What the classifier reads (--pooling): the export's pooler where pretraining
trained one (a BertForPreTraining export: mlm+nsp), else (an MLM-only BertForMaskedLM export,
which has none) the [CLS] hidden state: the pooler's dense layer set to the identity and
frozen, its tanh kept, so that the classifier sees tanh(h_CLS) and a model saved with --save
computes the same under AutoModelForSequenceClassification. --pooling pooler trains a fresh
pooler instead; the run says which, and what starts fresh. Prints the held-out accuracy beside
chance (the largest class share of the held-out set) and, with --json, writes both.
"""
import argparse
import glob
import gzip
import json
import os
import random
import re

import common

M = common.Messages("finetune")
fail = M.fail
MARKUP = re.compile(r"^(\.\.|::|[=\-~^*#+`]{3,}|\s*[|:>])")


def paragraphs(path):
    """Prose paragraphs of one .rst.gz file: blank-line blocks without markup lines, 8+ words."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.splitlines()]
        if not lines or any(MARKUP.match(line) for line in lines) or block.startswith((" ", "\t")):
            continue
        para = " ".join(lines)
        if len(para.split()) >= 8:
            out.append(para)
    return out


def load_task(root, classes, per_class, seed):
    train, held = [], []
    for label, name in enumerate(classes):
        files = sorted(glob.glob(os.path.join(root, name, "**", "*.rst.gz"), recursive=True))
        if len(files) < 5:
            fail(f"--classes: {os.path.join(root, name)} holds {len(files)} .rst.gz files, at least 5 needed")
        tr = [(p, label) for i, f in enumerate(files) if i % 5 != 4 for p in paragraphs(f)]
        he = [(p, label) for i, f in enumerate(files) if i % 5 == 4 for p in paragraphs(f)]
        rng = random.Random(seed * 1000 + label)
        rng.shuffle(tr)
        rng.shuffle(he)
        train.append(tr)
        held.append(he)
    n_train = min(per_class, *(len(t) for t in train))
    n_held = min(max(per_class // 4, 1), *(len(h) for h in held))
    if n_train < 20 or n_held < 10:
        fail(f"--classes {','.join(classes)}: too few paragraphs ({n_train} train, {n_held} held out per class)")
    train = [x for t in train for x in t[:n_train]]
    held = [x for h in held for x in h[:n_held]]
    random.Random(seed).shuffle(train)
    return train, held


def load_user_task(path, per_class):
    """Returns (class names, train rows, held-out rows) of --data: a folder per class or a TSV."""
    examples = {}  # label -> [[text, ...] per document], in order
    if os.path.isdir(path):
        def read(file):
            with open(file, encoding="utf-8", errors="replace") as f:
                return " ".join(f.read().split())

        def visible(folder):
            return [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if not n.startswith(".")]

        for folder in visible(path):
            if not os.path.isdir(folder):
                continue
            docs = []
            for entry in visible(folder):
                if os.path.isfile(entry):
                    docs.append([read(entry)])
                elif os.path.isdir(entry):  # a document: its files are its examples
                    docs.append([read(f) for f in visible(entry) if os.path.isfile(f)])
            docs = [[t for t in doc if t] for doc in docs]
            docs = [doc for doc in docs if doc]
            if not docs:
                fail(f"--data {path}: class folder '{os.path.basename(folder)}' holds no example (no file with text)")
            examples[os.path.basename(folder)] = docs
    elif os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                if "\t" not in line:
                    fail(f"{path}:{number}: expected LABEL<TAB>TEXT, found no tab")
                label, text = line.rstrip("\n").split("\t", 1)
                text = " ".join(text.split())
                if not label.strip() or not text:
                    fail(f"{path}:{number}: empty label or text")
                examples.setdefault(label.strip(), []).append([text])
    else:
        fail(f"--data {path}: no such folder or file")
    if len(examples) < 2:
        fail(f"--data {path}: {len(examples)} class(es) found ({', '.join(examples) or 'none'}), at least 2 needed "
             "(a folder per class, or LABEL<TAB>TEXT lines)")
    classes = sorted(examples)
    train, held = [], []
    for label, name in enumerate(classes):
        docs = examples[name]
        if len(docs) < 5:
            fail(f"--data {path}: class '{name}' has {len(docs)} examples (or documents), at least 5 needed (every 5th "
                 "is held out)")
        tr = [(t, label) for i, doc in enumerate(docs) if i % 5 != 4 for t in doc]
        train += tr[:per_class] if per_class else tr
        held += [(t, label) for i, doc in enumerate(docs) if i % 5 == 4 for t in doc]
    return classes, train, held


def export_tensors(directory):
    """The tensor names of an export's model.safetensors (its JSON header), or of every shard's."""
    names = []
    for path in glob.glob(os.path.join(directory, "*.safetensors")):
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            names += [k for k in json.loads(f.read(n)) if k != "__metadata__"]
    return names


def main(argv=None):
    p = argparse.ArgumentParser(description="Fine-tunes an exported bertpre model on a labelled classification "
                                            "task (--data, or by default telling two linux-doc subtrees apart), "
                                            "and reports the held-out accuracy.")
    p.add_argument("export_dir", help="a directory written by `bertpre export` (with its tokenizer)")
    p.add_argument("--data", help="labelled examples: a folder per class (a file per example; a subfolder per "
                                  "document groups its examples), or a TSV file of LABEL<TAB>TEXT lines; every 5th "
                                  "example (or document) of each class is held out")
    p.add_argument("--classes", default="networking,filesystems", help="without --data: two subtrees of "
                                                                       "linux-doc's Documentation/")
    p.add_argument("--per-class", type=int, help="training examples per class (default: all with --data, "
                                                  "800 paragraphs without)")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--pooling", choices=("auto", "pooler", "cls"), default="auto",
                   help="what the classifier reads: the pooler, or the [CLS] hidden state (auto: the pooler where "
                        "the export has a trained one, else [CLS])")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write {'accuracy', 'chance', ...} here")
    p.add_argument("--save", metavar="DIR", help="save the fine-tuned model and its tokenizer here "
                                                 "(AutoModelForSequenceClassification.from_pretrained(DIR) loads it)")
    a = p.parse_args(argv)
    classes = a.classes.split(",")
    if not a.data and len(classes) != 2:
        fail(f"--classes '{a.classes}': expected two subtree names separated by a comma")
    for option, value in (("--per-class", a.per_class), ("--epochs", a.epochs), ("--batch-size", a.batch_size),
                          ("--max-length", a.max_length)):
        if value is not None and value < 1:
            fail(f"{option} {value}: expected at least 1")
    if not a.lr > 0:
        fail(f"--lr {a.lr}: expected a rate above 0")
    # Where the results go, checked before the work: a fine-tuned model is not lost at the end.
    if a.save:
        try:
            os.makedirs(a.save, exist_ok=True)
            probe = os.path.join(a.save, ".finetune-write-test")
            open(probe, "w").close()
            os.remove(probe)
        except OSError as e:
            fail(f"--save {a.save}: cannot write there ({e.strerror}); nothing was trained")
    if a.json and not (os.access(a.json, os.W_OK) if os.path.exists(a.json)
                       else os.access(os.path.dirname(os.path.abspath(a.json)), os.W_OK)):
        fail(f"--json {a.json}: cannot write it (its folder missing or not writable); nothing was trained")
    for name in ("config.json", "model.safetensors"):
        if not os.path.exists(os.path.join(a.export_dir, name)):
            fail(f"{os.path.join(a.export_dir, name)} is missing: export with `bertpre export CKPT --out DIR`")
    if not any(os.path.exists(os.path.join(a.export_dir, n)) for n in ("spiece.model", "vocab.txt", "tokenizer.json")):
        fail(f"{a.export_dir} holds no tokenizer (spiece.model, vocab.txt or tokenizer.json): export a checkpoint "
             "trained with train.tokenizer, or pass --tokenizer to bertpre export")
    # The longest input the model holds, before it loads (a longer one fails inside transformers).
    try:
        positions = json.load(open(os.path.join(a.export_dir, "config.json"))).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        positions = None  # transformers names what is wrong with it
    if isinstance(positions, int) and a.max_length > positions:
        fail(f"--max-length {a.max_length}: the model of {a.export_dir} holds at most {positions} tokens "
             "(max_position_embeddings in its config.json); give at most that")

    if a.data:
        classes, train, held = load_user_task(a.data, a.per_class)
    else:
        train, held = load_task(common.linux_doc(M), classes, a.per_class or 800, a.seed)
    common.need("finetune", "torch", "transformers")
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()  # the new classifier's "newly initialized" notice
    torch.manual_seed(a.seed)
    torch.set_num_threads(min(2, os.cpu_count() or 1))

    if a.data:
        random.Random(a.seed).shuffle(train)
    tokenizer = AutoTokenizer.from_pretrained(a.export_dir)
    model = AutoModelForSequenceClassification.from_pretrained(a.export_dir, num_labels=len(classes))
    trained_pooler = any(k.endswith("pooler.dense.weight") for k in export_tensors(a.export_dir))
    pooler = getattr(getattr(model, "bert", None), "pooler", None)
    pooling = a.pooling if a.pooling != "auto" else ("pooler" if trained_pooler or pooler is None else "cls")
    if pooling == "cls" and pooler is not None:
        with torch.no_grad():  # tanh(I h_CLS + 0): the [CLS] state, the same function once saved and loaded again
            pooler.dense.weight.copy_(torch.eye(pooler.dense.weight.shape[0]))
            pooler.dense.bias.zero_()
        for q in pooler.parameters():
            q.requires_grad_(False)
        said = ("the classifier reads the [CLS] hidden state (the pooler's dense layer set to the identity and "
                "frozen, its tanh kept)")
    elif trained_pooler:
        said = "the classifier reads the export's pooler (trained in pretraining)"
    else:
        said = "the classifier reads a pooler that starts fresh and trains with it (--pooling pooler)"
    whence = "a trained pooler" if trained_pooler else "no trained pooler (an MLM-only export)"
    print(f"finetune: the export has {whence}: {said}; fresh: the classifier ({len(classes)} outputs)")
    print(f"finetune: {type(model).__name__} from {a.export_dir} ({sum(p.numel() for p in model.parameters())} "
          f"parameters), tokenizer {type(tokenizer).__name__}; {len(train)} training and {len(held)} held-out "
          f"examples of " + ", ".join(f"{name} (label {k})" for k, name in enumerate(classes)))

    def encode(rows):
        enc = tokenizer([t for t, _ in rows], truncation=True, max_length=a.max_length, padding=True,
                        return_tensors="pt")
        return enc, torch.tensor([y for _, y in rows])

    def accuracy(rows):
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(rows), 64):
                enc, y = encode(rows[i:i + 64])
                correct += (model(**enc).logits.argmax(-1) == y).sum().item()
        return correct / len(rows)

    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=a.lr, weight_decay=0.01)
    steps = a.epochs * ((len(train) + a.batch_size - 1) // a.batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 - s / steps)
    for epoch in range(a.epochs):
        model.train()
        order = list(range(len(train)))
        random.Random(a.seed + epoch).shuffle(order)
        total = 0.0
        for i in range(0, len(order), a.batch_size):
            enc, y = encode([train[k] for k in order[i:i + a.batch_size]])
            loss = model(**enc, labels=y).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total += loss.item() * len(y)
        print(f"finetune: epoch {epoch + 1}/{a.epochs}: training loss {total / len(train):.4f}")
    acc = accuracy(held)
    chance = max(sum(y == k for _, y in held) for k in range(len(classes))) / len(held)
    print(f"finetune: held-out accuracy {acc:.3f} on {len(held)} examples (chance: {chance:.3f})")
    if a.save:
        model.config.id2label = dict(enumerate(classes))
        model.config.label2id = {name: k for k, name in enumerate(classes)}
        model.save_pretrained(a.save)
        tokenizer.save_pretrained(a.save)
        print(f"finetune: saved the fine-tuned model and its tokenizer to {a.save}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"accuracy": acc, "chance": chance, "held_out": len(held), "train": len(train),
                       "classes": classes, "pooling": pooling}, f)


if __name__ == "__main__":
    main()
