"""The bertpre command line: help, and bad configs rejected with an error that names the
file, the field and the value, with a non-zero exit. usage: test_cli.py BERTPRE"""
import json
import os
import subprocess
import sys
import tempfile

bertpre = sys.argv[1]
failures = 0
GOOD_MODEL = {"vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 16, "max_position_embeddings": 32}
GOOD_TRAIN = {"micro_batch_size": 2, "seq_length": 16, "max_predictions_per_seq": 3, "steps": 2, "log_every": 1}


def run(*args):
    p = subprocess.run([bertpre, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def expect(what, ok, output=""):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        print("     output: " + output.strip().replace("\n", "\n             "))


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
    rc, out = run("train", by_path, "--set", "nonsense")
    expect("malformed --set: named", rc != 0 and "nonsense" in out, out)
    missing_data = os.path.join(tmp, "no-such-shards")
    rc, out = run("train", by_path, "--set", f"train.data={missing_data}")
    expect("train.data naming nothing: non-zero exit naming the path", rc != 0 and missing_data in out, out)
    rc, out = run("train", by_path, "--set", f"train.eval_data={missing_data}")
    expect("train.eval_data without train.data: named", rc != 0 and "eval_data" in out, out)
    for command in ("tokenizer", "prep", "bench"):
        rc, out = run(command, "--help")
        expect(f"bertpre {command} --help exits 0 with usage", rc == 0 and "usage: bertpre " + command in out, out)

sys.exit(1 if failures else 0)
