"""Weights & Biases logging (tools/wandb_log.py, tools/pretrain.sh --wandb), in offline mode.

Runs in .venv-hf5, which holds the wandb package (tools/requirements-hf5.txt); .venv does not,
as a user's environment without it. The W&B run files written offline are read back here
without wandb's logging code: the .wandb file's records (LevelDB's log format: 32 KiB blocks
of records with a CRC, a length and a type; full, first, middle and last pieces) parsed by the
test, each a wandb Record protocol buffer (wandb.proto), its history rows compared with the
metrics file:
  - tools/wandb_log.py following a `bertpre train` while it runs (--follow-pid): a history
    row at every metrics line's step holding each numeric field as train/FIELD, equal to the
    file's value (JSON's shortest round-trip text: exact);
  - tools/pretrain.sh --wandb PROJECT --wandb-offline on a small corpus: says it logs, writes
    DIR/wandb.json and DIR/wandb/offline-run-*, whose history holds every line of the run's
    metrics file, the held-out evaluation's as eval/FIELD;
  - --wandb where the wandb package is missing (.venv's Python): exit 1 naming the package and
    how to install it, before anything is written; --wandb-offline without --wandb: exit 1.

usage: test_wandb.py BERTPRE PRETRAIN_SH
"""
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

import checks
from checks import expect
from data_fixtures import python_docstrings, require

bertpre, script = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
tools = os.path.dirname(script)
checks.run_in_hf5()
with checks.needs("the wandb package (in .venv-hf5)", hint="tools/setup.sh installs it into .venv-hf5"):
    from wandb.proto import wandb_internal_pb2


def history(run_dir):
    """{step: {key: value}} of an offline run's .wandb file."""
    path = glob.glob(os.path.join(run_dir, "run-*.wandb"))[0]
    raw = open(path, "rb").read()
    block, at, pieces, current = 32768, 7, [], b""  # after the 7-byte header (":W&B", magic, version)
    while at + 7 <= len(raw):
        room = block - at % block
        if room < 7:
            at += room
            continue
        _, length, kind = struct.unpack("<IHB", raw[at:at + 7])
        if length == 0 and kind == 0:  # the rest of a block, zeroed
            at += room
            continue
        data = raw[at + 7:at + 7 + length]
        at += 7 + length
        if kind == 1:
            pieces.append(data)
        elif kind == 2:
            current = data
        elif kind == 3:
            current += data
        elif kind == 4:
            pieces.append(current + data)
    rows = {}
    for data in pieces:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
            rows.setdefault(items.get("_step"), {}).update(items)
    return rows


def differences(rows, lines):
    wrong = []
    for line in lines:
        prefix = "eval/" if line.get("eval") else "train/"
        row = rows.get(line["step"], {})
        for k, v in line.items():
            if k == "step" or not isinstance(v, (int, float)) or isinstance(v, bool):
                continue
            if prefix + k not in row or row[prefix + k] != v:
                wrong.append(f"step {line['step']} {prefix + k}: {row.get(prefix + k)} vs {v}")
    return wrong


env = dict(os.environ, WANDB_SILENT="true", WANDB_MODE="offline")
with tempfile.TemporaryDirectory() as tmp:
    cfg, metrics = os.path.join(tmp, "run.json"), os.path.join(tmp, "metrics.jsonl")
    with open(cfg, "w") as f:
        json.dump({"model": {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                             "intermediate_size": 32, "max_position_embeddings": 32},
                   "train": {"micro_batch_size": 4, "seq_length": 16, "max_predictions_per_seq": 3, "steps": 300,
                             "log_every": 10, "learning_rate": 0.01, "metrics_file": metrics}}, f)
    train = subprocess.Popen([bertpre, "train", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    follow = subprocess.run([sys.executable, os.path.join(tools, "wandb_log.py"), metrics, "--project", "bertpre-test",
                             "--offline", "--dir", os.path.join(tmp, "w"), "--follow-pid", str(train.pid)],
                            capture_output=True, text=True, env=env, timeout=300)
    train.wait()
    lines = [json.loads(x) for x in open(metrics)]
    runs = glob.glob(os.path.join(tmp, "w", "wandb", "offline-run-*"))
    rows = history(runs[0]) if runs else {}
    wrong = differences(rows, lines)
    expect(f"wandb_log.py following a training run (offline): exit 0; {len(lines)} lines, each field at its step in "
           f"the W&B history ({len(rows)} rows)", follow.returncode == 0 and len(lines) == 30 and rows and not wrong,
           (wrong[:3], follow.stdout[-800:], follow.stderr[-800:]))

    corpus = os.path.join(tmp, "texts")
    python_docstrings(corpus, packages=["json", "email", "http"])
    out = os.path.join(tmp, "run")
    p = subprocess.run(["bash", script, corpus, "--out", out, "--vocab", "300", "--set", "train.steps=20", "--set",
                        "train.log_every=5", "--wandb", "bertpre-test", "--wandb-offline"],
                       capture_output=True, text=True, env=dict(env, BERTPRE=bertpre,
                                                                PATH=os.path.dirname(sys.executable) + ":" +
                                                                os.environ["PATH"]))
    runs = glob.glob(os.path.join(out, "wandb", "offline-run-*"))
    lines = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))] if p.returncode == 0 else []
    rows = history(runs[0]) if runs else {}
    wrong = differences(rows, lines)
    saved = json.load(open(os.path.join(out, "wandb.json"))) if os.path.exists(os.path.join(out, "wandb.json")) else {}
    expect(f"pretrain.sh --wandb bertpre-test --wandb-offline: exit 0, said; DIR/wandb.json; the offline run's history "
           f"holds all {len(lines)} metrics lines, the evaluation's as eval/FIELD",
           p.returncode == 0 and "logging the metrics to W&B project bertpre-test (offline" in p.stdout and
           saved.get("project") == "bertpre-test" and saved.get("offline") is True and len(runs) == 1 and lines and
           any(line.get("eval") for line in lines) and not wrong, (wrong[:3], p.stdout[-1500:], p.stderr[-1500:]))

    plain = dict(env, BERTPRE=bertpre, PATH="/usr/bin:/bin")
    for what, extra in (("--wandb where the package is missing (.venv's Python)", ["--wandb", "x"]),
                        ("--wandb-offline without --wandb", ["--wandb-offline"])):
        missing_out = os.path.join(tmp, "not-made")
        p = subprocess.run(["bash", script, corpus, "--out", missing_out, *extra], capture_output=True, text=True,
                           env=plain)
        said = "wandb" in p.stderr and ("pip install wandb" in p.stderr if "missing" in what else True)
        expect(f"{what}: exit 1 saying so, nothing written", p.returncode == 1 and said and
               not os.path.exists(missing_out), p.stderr[-800:])
sys.exit(checks.exit_status())
