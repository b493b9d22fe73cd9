"""train.tensorboard_dir: TensorBoard events written by `bertpre train` as the run goes.

A tiny BERT on synthetic batches with a log line every 5 steps, for many steps: while the process
still runs, its event file already holds events of increasing steps (what `tensorboard --logdir`
shows live); then it is stopped (SIGTERM, its checkpoint written) and the file is read back:
  - every record's two CRC-32Cs (TFRecord's masked form) equal those that TensorBoard's own
    pure-Python code computes, and every record parses as TensorBoard's Event protocol buffer,
    the first with file_version "brain.Event:2";
  - with TensorBoard's EventAccumulator: the tags train/FIELD for every numeric field of the
    metrics file's lines (an evaluation's line, written by the same code, would be eval/FIELD),
    no others (no "step"), every value at its step equal to the metrics file's within float32's
    rounding (relative 1e-6: TensorBoard stores scalars as float32, 6e-8 relative);
  - --resume auto (10 steps more) into the same directory adds a second event file, and the
    two together hold every line of the metrics file;
  - a file already there under the name the event file would take is left as it was, the
    events going to a new file beside it (NAME.1);
  - a tensorboard_dir that cannot be made (under a file) stops the run before any step,
    naming it, and its --dry-run alike.

usage: test_tensorboard_live.py BERTPRE
"""
import glob
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import checks
from checks import expect

bertpre = os.path.abspath(sys.argv[1])
with checks.needs("the tensorboard package", hint="tools/setup.sh installs it from tools/requirements.txt"):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

MODEL = {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
         "intermediate_size": 32, "max_position_embeddings": 32}


def records(path):
    """(the records' data, CRC mismatches) of a TFRecord file."""
    out, bad = [], []
    with open(path, "rb") as f:
        raw = f.read()
    at = 0
    while at < len(raw):
        head = raw[at:at + 8]
        (n,) = struct.unpack("<Q", head)
        (crc_len,) = struct.unpack("<I", raw[at + 8:at + 12])
        data = raw[at + 12:at + 12 + n]
        (crc_data,) = struct.unpack("<I", raw[at + 12 + n:at + 16 + n])
        if crc_len != masked_crc32c(head) or crc_data != masked_crc32c(data):
            bad.append(len(out))
        out.append(data)
        at += 16 + n
    return out, bad


def events(path):
    evs = []
    for data in records(path)[0]:
        e = event_pb2.Event()
        e.ParseFromString(data)
        evs.append(e)
    return evs


def scalar_steps(path):
    return [e.step for e in events(path) if e.summary.value]


with tempfile.TemporaryDirectory() as tmp:
    tb, metrics = os.path.join(tmp, "tb", "run"), os.path.join(tmp, "metrics.jsonl")
    cfg = os.path.join(tmp, "run.json")
    with open(cfg, "w") as f:
        json.dump({"model": MODEL, "train": {"micro_batch_size": 4, "seq_length": 16, "max_predictions_per_seq": 3,
                                             "steps": 100000, "log_every": 5, "learning_rate": 0.01,
                                             "metrics_file": metrics, "tensorboard_dir": tb,
                                             "checkpoint_dir": os.path.join(tmp, "ckpt")}}, f)
    proc = subprocess.Popen([bertpre, "train", cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, deadline = [], time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        files = glob.glob(os.path.join(tb, "events.out.tfevents.*"))
        seen = scalar_steps(files[0]) if files else []
        if len(seen) >= 3:
            break
        time.sleep(0.2)
    running = proc.poll() is None
    expect(f"while the run goes, its event file holds events at steps {seen[:5]} (increasing)",
           running and len(seen) >= 3 and seen == sorted(seen) and seen[0] == 5, seen)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    expect("stopped by SIGTERM: exit 0 with its checkpoint", proc.returncode == 0, err[-1000:])
    files = sorted(glob.glob(os.path.join(tb, "events.out.tfevents.*")))
    expect(f"one event file in {tb}, said at the start", len(files) == 1 and f"TensorBoard: events in {files[0]}"
           in out, out[:1500])
    data, bad = records(files[0]) if files else ([], [0])
    first = events(files[0])[0] if files else None
    expect(f"{len(data)} records, every CRC-32C TensorBoard's, every one an Event; the first 'brain.Event:2'",
           data and not bad and first.file_version == "brain.Event:2", bad)
    lines = [json.loads(x) for x in open(metrics)]

    def compare(dirname, want_lines):
        acc = EventAccumulator(dirname, size_guidance={"scalars": 0})
        acc.Reload()
        want = {}
        for line in want_lines:
            prefix = "eval/" if line.get("eval") else "train/"
            for k, v in line.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    want.setdefault(prefix + k, []).append((line["step"], float(v)))
        got = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
        wrong = [tag for tag in want if tag not in got or len(got[tag]) != len(want[tag]) or any(
            gs != ws or abs(gv - wv) > 1e-6 * max(abs(wv), 1e-30) for (gs, gv), (ws, wv) in zip(got[tag], want[tag]))]
        return want, got, wrong

    want, got, wrong = compare(tb, lines)
    expect(f"EventAccumulator: the tags of the {len(lines)} metrics lines' numeric fields ({len(want)}: "
           f"{sorted(want)[:4]} ...), no others, every value at its step within 1e-6 relative",
           want and not wrong and set(got) == set(want), (wrong[:3], sorted(set(got) ^ set(want))))

    p = subprocess.run([bertpre, "train", cfg, "--resume", "auto", "--set", "train.steps_this_run=10"],
                       capture_output=True, text=True)
    files = sorted(glob.glob(os.path.join(tb, "events.out.tfevents.*")))
    lines = [json.loads(x) for x in open(metrics)]
    want, got, wrong = compare(tb, lines)
    expect(f"--resume auto: exit 0, a second event file ({len(files)} in all); together every one of the "
           f"{len(lines)} metrics lines", p.returncode == 0 and len(files) == 2 and not wrong and set(got) == set(want),
           (p.stderr[-800:], wrong[:3]))

    # A file already there under the name the run's event file would take (the pid is the
    # shell's, which exec hands to bertpre; the next seconds covered): left as it was, the run's
    # events in a new file beside it.
    taken = os.path.join(tmp, "taken")
    os.makedirs(taken)
    host = socket.gethostname()
    shell = ('now=$(date +%s); for s in 0 1 2 3 4 5; do echo mine > "$TB/events.out.tfevents.$((now + s)).$HOST.$$"; '
             'done; exec "$BERTPRE" train "$CFG" --set train.steps=20 --set train.checkpoint_dir= --set '
             'train.metrics_file= --set "train.tensorboard_dir=$TB"')
    p = subprocess.run(["sh", "-c", shell], capture_output=True, text=True,
                       env=dict(os.environ, TB=taken, HOST=host, BERTPRE=bertpre, CFG=cfg))
    names = sorted(os.listdir(taken))
    mine = [n for n in names if open(os.path.join(taken, n), "rb").read() == b"mine\n"]
    new = [n for n in names if n not in mine]
    expect("an event file's name already taken by a file: that file left as it was, the run's events in a new "
           f"file beside it ({new})", p.returncode == 0 and len(mine) == 6 and len(new) == 1 and
           new[0].endswith(".1") and events(os.path.join(taken, new[0]))[0].file_version == "brain.Event:2",
           (names, p.stderr[-800:]))

    blocker = os.path.join(tmp, "a-file")
    open(blocker, "w").close()
    p = subprocess.run([bertpre, "train", cfg, "--set", f"train.tensorboard_dir={blocker}/tb", "--set",
                        "train.checkpoint_dir=", "--set", f"train.metrics_file={os.path.join(tmp, 'm2.jsonl')}"],
                       capture_output=True, text=True)
    dry = subprocess.run([bertpre, "train", cfg, "--dry-run", "--set", f"train.tensorboard_dir={blocker}/tb", "--set",
                          "train.checkpoint_dir="], capture_output=True, text=True)
    expect("a tensorboard_dir under a file: exit 1 naming the field and the path, no step run; its --dry-run the same "
           "refusal", p.returncode == 1 and "train.tensorboard_dir" in p.stderr and blocker in p.stderr and
           not re.search(r"^step +\d+/", p.stdout, re.M) and dry.returncode == 1 and "train.tensorboard_dir" in
           dry.stderr and "not a directory" in dry.stderr, p.stderr[-800:] + dry.stderr[-800:])
sys.exit(checks.exit_status())
