"""The option parser every subcommand shares (cli/options.c): each kind of bad option (unknown,
missing value, wrong type, out of range, not one of the choices, a flag given a value, a
required option or operand missing, one operand too many) exits 1 with one line naming the
command, the option and the value, before any work; --help is generated from the same
table (every option listed with its range and default) for every subcommand; "--name=value"
equals "--name value". Errors a user meets carry no source location (file.c:line): those are
for internal invariants only. usage: test_cli_options.py BERTPRE"""
import json
import os
import re
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre = os.path.abspath(sys.argv[1])


def run(*args):
    p = subprocess.run([bertpre, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


# (command line, words the error must contain). Each names the command, the option and the value.
CASES = [
    (["prep", "--tokenizer", "t.model", "--output", "o", "--sed", "3", "in"], ["prep", "unknown option", "'--sed'"]),
    (["prep", "--tokenizer", "t.model", "--output", "o", "in", "--seq-length"],
     ["prep", "--seq-length", "needs a value"]),
    (["prep", "--seq-length", "12x", "--tokenizer", "t.model", "--output", "o", "in"],
     ["prep", "--seq-length", "'12x'", "not an integer"]),
    (["prep", "--seq-length", "1.5", "--tokenizer", "t.model", "--output", "o", "in"],
     ["prep", "--seq-length", "'1.5'", "not a whole number"]),
    (["prep", "--seq-length", "4", "--tokenizer", "t.model", "--output", "o", "in"],
     ["prep", "--seq-length", "4", "out of range", "[5, 65536]"]),
    (["prep", "--seq-length", "99999999999999999999", "--tokenizer", "t.model", "--output", "o", "in"],
     ["prep", "--seq-length", "99999999999999999999", "out of range"]),
    (["prep", "--eval-fraction", "0.7", "--tokenizer", "t.model", "--output", "o", "in"],
     ["prep", "--eval-fraction", "0.7", "out of range", "[0, 0.5]"]),
    (["prep", "--masked-lm-prob", "lots", "--tokenizer", "t.model", "--output", "o", "in"],
     ["prep", "--masked-lm-prob", "'lots'", "not a number"]),
    (["prep", "--format", "xml", "--tokenizer", "t.model", "--output", "o", "in"],
     ["prep", "--format", "'xml'", "lines|text|jsonl|parquet|arrow"]),
    (["prep", "--no-progress=yes", "--tokenizer", "t.model", "--output", "o", "in"],
     ["prep", "--no-progress", "takes no value", "yes"]),
    (["prep", "--output", "o", "in"], ["prep", "--tokenizer", "required"]),
    (["prep", "--tokenizer", "t.model", "--output", "o"], ["prep", "missing INPUT"]),
    (["train", "cfg.json", "--dry-run", "--ranks", "zero"], ["train", "--ranks", "'zero'", "not an integer"]),
    (["train", "cfg.json", "--dry-run", "--ranks=0"], ["train", "--ranks", "0", "out of range"]),
    (["train", "cfg.json", "--resum", "auto"], ["train", "unknown option", "'--resum'"]),
    (["train", "cfg.json", "--set"], ["train", "--set", "needs a value"]),
    (["train", "a.json", "b.json"], ["train", "more than one CONFIG", "'a.json'", "'b.json'"]),
    (["train"], ["train", "missing CONFIG"]),
    (["export", "ck", "--out", "x", "--dtype", "fp8"], ["export", "--dtype", "'fp8'", "fp32|fp16"]),
    (["export", "ck"], ["export", "--out", "required"]),
    (["import", "hf", "--out", "ck", "--seed", "-1"], ["import", "--seed", "-1", "out of range"]),
    (["tokenizer", "train", "--model-prefix", "m", "--vocab-size", "5", "in"],
     ["tokenizer train", "--vocab-size", "5", "out of range"]),
    (["tokenizer", "encode", "--pieces"], ["tokenizer", "--model", "required"]),
    (["tokenizer", "info", "--model"], ["tokenizer", "--model", "needs a value"]),
    (["tokenizer", "frobnicate"], ["tokenizer", "unknown command", "'frobnicate'"]),
    (["bench", "data", "--tokenizer", "t.model", "--batches", "0", "in"], ["bench data", "--batches", "0", "out of range"]),
    (["eval", "ck", "--data", "d", "--batches", "-3"], ["eval", "--batches", "-3", "out of range"]),
    (["eval", "ck"], ["eval", "--data", "required"]),
    (["eval", "ck", "--data", "d", "--backend", "tpu"], ["eval", "--backend", "'tpu'", "cuda-emu"]),
]

SOURCE = re.compile(r"\.(c|cc|cpp|cu|h):\d+")

with tempfile.TemporaryDirectory() as tmp:
    os.chdir(tmp)  # nothing a case names exists: every error must come from the options, before any work
    for argv, needles in CASES:
        rc, out, err = run(*argv)
        lines = err.strip().splitlines()
        expect(f"{' '.join(argv)}: exit 1, one error line naming {needles}, no source location",
               rc == 1 and out == "" and len(lines) == 1 and lines[0].startswith("bertpre: error: ")
               and all(n in err for n in needles) and not SOURCE.search(err), out + err)

    # Generated --help: every subcommand, each option with its value name, range and default.
    helps = {
        ("prep",): ["--seq-length N", "(5..65536; default 128)", "--format lines|text|jsonl|parquet|arrow", "(default lines)",
                    "--tokenizer MODEL", "(required)", "--no-progress", "-h, --help"],
        ("train",): ["--set section.field=value", "(repeatable)", "--ranks N", "--resume auto|DIR", "--init-from DIR",
                     "auto|cpu|cuda|cuda-emu"],
        ("export",): ["--dtype fp32|fp16", "(default fp32)", "--out DIR", "(required)"],
        ("import",): ["--seed N", "default 42", "--out CHECKPOINT"],
        ("tokenizer",): ["usage: bertpre tokenizer train", "--vocab-size N", "usage: bertpre tokenizer encode",
                         "--model MODEL", "--pieces", "--lower-case", "--cased"],
        ("bench",): ["usage: bertpre bench data", "--batches N", "(1..1073741824; default 2000)"],
        ("eval",): ["usage: bertpre eval CHECKPOINT", "--data SHARDS", "--batches N", "--json FILE",
                    "--backend auto|cpu|cuda|cuda-emu"],
    }
    for words, needles in helps.items():
        rc, out, err = run(*words, "--help")
        expect(f"bertpre {' '.join(words)} --help: exit 0, lists {needles}",
               rc == 0 and err == "" and all(n in out for n in needles), out + err)
    rc, out, err = run("prep", "--seq-length", "1", "--help")
    expect("--help wins over a bad value given before it", rc == 0 and "usage: bertpre prep" in out, out + err)

    # Errors from files: the path and the cause, no source location.
    good = os.path.join(tmp, "good.json")
    with open(good, "w") as f:
        json.dump({"model": {"vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                             "intermediate_size": 16, "max_position_embeddings": 32},
                   "train": {"micro_batch_size": 2, "seq_length": 16, "max_predictions_per_seq": 3, "steps": 1}}, f)
    unwritable = os.path.join(tmp, "no-such-dir", "m.jsonl")
    for argv, needles in [(["train", good, "--set", f"train.metrics_file={unwritable}"],
                           [unwritable, "metrics", "No such file or directory"]),
                          (["train", os.path.join(tmp, "missing.json")], ["missing.json"]),
                          (["tokenizer", "info", "--model", os.path.join(tmp, "none.model")], ["none.model"])]:
        rc, out, err = run(*argv)
        expect(f"{' '.join(os.path.basename(a) for a in argv)}: exit 1 naming {needles}, no source location",
               rc == 1 and all(n in err for n in needles) and not SOURCE.search(err), err)

    # --name=value is --name value: the same plan either way.
    cfg = os.path.join(tmp, "cfg.json")
    with open(cfg, "w") as f:
        json.dump({"model": {"vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                             "intermediate_size": 16, "max_position_embeddings": 32},
                   "train": {"micro_batch_size": 2, "global_batch_size": 12, "seq_length": 16,
                             "max_predictions_per_seq": 3, "steps": 2}}, f)
    a = run("train", cfg, "--dry-run", "--ranks", "3", "--set", "train.steps=5")
    b = run("train", cfg, "--dry-run", "--ranks=3", "--set=train.steps=5")
    expect("--ranks=3 --set=... plans like --ranks 3 --set ...",
           a == b and a[0] == 0 and "x 3 ranks" in a[1] and "5 steps" in a[1], a[1] + a[2] + b[1] + b[2])

sys.exit(checks.exit_status())
