"""The bertpre command line: help, and bad configs rejected with an error that names the
file, the field and the value, with a non-zero exit; output to a full device (/dev/full) is
an error (exit 1), not a success. usage: test_cli.py BERTPRE"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre = sys.argv[1]
# 'cuda' when the build has the CUDA backend; then the 'cuda' case below expects "no GPU".
HAVE_CUDA = checks.features(bertpre)["cuda"]
HAVE_GPU = HAVE_CUDA and shutil.which("nvidia-smi") is not None and subprocess.run(
    ["nvidia-smi", "-L"], capture_output=True).returncode == 0
GOOD_MODEL = {"vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 16, "max_position_embeddings": 32}
GOOD_TRAIN = {"micro_batch_size": 2, "seq_length": 16, "max_predictions_per_seq": 3, "steps": 2, "log_every": 1}


def run(*args):
    p = subprocess.run([bertpre, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr




with tempfile.TemporaryDirectory() as tmp:
    def write(name, obj):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(obj if isinstance(obj, str) else json.dumps(obj))
        return path

    rc, out = run("--help")
    expect("bertpre --help exits 0 and lists train", rc == 0 and "train" in out, out)
    rc, out = run("train", "--help")
    expect("bertpre train --help exits 0 and names the fields", rc == 0 and "micro_batch_size" in out, out)
    rc, out = run("frobnicate")
    expect("unknown command: non-zero exit naming it", rc != 0 and "frobnicate" in out, out)

    good = write("good.json", {"model": GOOD_MODEL, "train": GOOD_TRAIN})
    rc, out = run("train", good)
    expect("a good config trains 2 steps and logs them", rc == 0 and "step     2/2" in out, out)

    cases = [
        ("unknown model field", {"model": dict(GOOD_MODEL, hidden_sise=8)}, ["hidden_sise", "unknown field"]),
        ("wrong type", {"model": dict(GOOD_MODEL, hidden_size="8")}, ["hidden_size", '"8"', "integer"]),
        ("out of range", {"model": dict(GOOD_MODEL, hidden_dropout_prob=1.5)}, ["hidden_dropout_prob", "1.5"]),
        ("heads do not divide hidden", {"model": dict(GOOD_MODEL, num_attention_heads=3)},
         ["hidden_size", "num_attention_heads", "3"]),
        ("unsupported activation", {"model": dict(GOOD_MODEL, hidden_act="relu")}, ["hidden_act", "relu", "gelu"]),
        ("unknown train field", {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN, lr=1)}, ["'lr'", "train"]),
        ("sequence longer than positions", {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN, seq_length=64)},
         ["seq_length", "64", "max_position_embeddings"]),
        ("global batch not a multiple of the micro-batch",
         {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN, global_batch_size=3)},
         ["global_batch_size", "3", "micro_batch_size"]),
        ("unknown section", {"model": GOOD_MODEL, "optimizer": {}}, ["optimizer", "section"]),
        ("global batch smaller than one micro-batch", {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN,
         micro_batch_size=4, global_batch_size=2)}, ["global_batch_size", "2", "micro_batch_size", "4"]),
        ("warmup proportion out of range", {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN, warmup_proportion=1.5)},
         ["warmup_proportion", "1.5"]),
    ] + ([] if HAVE_GPU else [
        ("cuda backend in a build without one, or without a GPU",
         {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN, backend="cuda")},
         ["backend", "cuda", "no CUDA GPU is visible" if HAVE_CUDA else "this build has no CUDA backend"]),
    ]) + [
        ("fp16 on the cpu backend", {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN, backend="cpu", precision="fp16")},
         ["precision", "fp16", "fp32 only"]),
        ("unknown backend", {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN, backend="tpu")},
         ["backend", "tpu", "auto|cpu|cuda"]),
        ("metrics file not a string", {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN, metrics_file=3)},
         ["metrics_file", "3", "string"]),
        ("data path not a string", {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN, data=3)}, ["'data'", "string"]),
        ("dynamic_masking out of range", {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN, dynamic_masking=2)},
         ["dynamic_masking", "2"]),
    ]
    for name, cfg, needles in cases:
        path = write(name.replace(" ", "_") + ".json", cfg)
        rc, out = run("train", path)
        expect(f"{name}: non-zero exit, message names {needles} and the file",
               rc != 0 and all(n in out for n in needles) and path in out, out)

    bad_json = write("bad.json", '{"model": {"vocab_size": 40,,}}')
    rc, out = run("train", bad_json)
    expect("invalid JSON: names file, line and column", rc != 0 and bad_json + ":1:" in out, out)
    rc, out = run("train", os.path.join(tmp, "missing.json"))
    expect("missing file: named", rc != 0 and "missing.json" in out, out)
    model_path = write("model.json", GOOD_MODEL)
    by_path = write("by_path.json", {"model": "model.json", "train": GOOD_TRAIN})
    rc, out = run("train", by_path, "--set", "train.steps=1")
    expect("model given as a relative path, --set overrides steps", rc == 0 and "step     1/1" in out, out)
    rc, out = run("train", by_path, "--set", "model.num_hidden_layers=0")
    expect("--set value validated like the file", rc != 0 and "num_hidden_layers" in out and "0" in out, out)
    # The batch plan across ranks: global = micro x accumulation x ranks, planned with --dry-run --ranks.
    ranked = write("ranked.json", {"model": GOOD_MODEL, "train": dict(GOOD_TRAIN, micro_batch_size=2,
                                                                      global_batch_size=12)})
    rc, out = run("train", ranked, "--dry-run", "--ranks", "3")
    expect("dry run on 3 ranks: exits 0, derives 12 = 2 x 2 x 3, trains nothing",
           rc == 0 and "global batch 12 = micro-batch 2 x 2 accumulated x 3 ranks" in out
           and not any(line.startswith("step ") for line in out.splitlines()), out)
    rc, out = run("train", ranked, "--dry-run", "--ranks", "4")
    expect("global batch not a multiple of micro-batch x ranks: names the field, value, micro-batch and ranks",
           rc != 0 and all(n in out for n in ["global_batch_size", "12", "micro_batch_size", "4 ranks", ranked]), out)
    rc, out = run("train", ranked, "--dry-run", "--ranks", "8")
    expect("global batch smaller than micro-batch x ranks: named", rc != 0 and "12" in out and "8 ranks" in out
           and "smaller" in out, out)
    rc, out = run("train", ranked, "--ranks", "2")
    expect("--ranks without --dry-run: refused", rc != 0 and "--ranks" in out, out)
    rc, out = run("train", ranked, "--dry-run", "--ranks", "zero")
    expect("--ranks with a non-number: named", rc != 0 and "zero" in out, out)
    rc, out = run("train", by_path, "--set", "nonsense")
    expect("malformed --set: named", rc != 0 and "nonsense" in out, out)
    missing_data = os.path.join(tmp, "no-such-shards")
    rc, out = run("train", by_path, "--set", f"train.data={missing_data}")
    expect("train.data naming nothing: non-zero exit naming the path", rc != 0 and missing_data in out, out)
    rc, out = run("train", by_path, "--set", f"train.eval_data={missing_data}")
    expect("train.eval_data without train.data: named", rc != 0 and "eval_data" in out, out)
    for command in ("tokenizer", "prep", "bench", "export", "import"):
        rc, out = run(command, "--help")
        expect(f"bertpre {command} --help exits 0 with usage", rc == 0 and "usage: bertpre " + command in out, out)

    # Output that cannot be written is an error, not exit 0.
    for args in (["config-doc"], ["--help"], ["--version"], ["train", "--help"], ["tokenizer", "--help"]):
        with open("/dev/full", "w") as full:
            p = subprocess.run([bertpre, *args], stdout=full, stderr=subprocess.PIPE, text=True)
        expect(f"bertpre {' '.join(args)} > /dev/full: exit 1 naming standard output and the error",
               p.returncode == 1 and "writing to standard output failed: No space left on device" in p.stderr,
               f"exit {p.returncode}: {p.stderr}")

sys.exit(checks.exit_status())
