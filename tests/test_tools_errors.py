"""tools/finetune.py and tools/plot_metrics.py: bad values are errors naming them (no Python
traceback), checked before any work, and the tools run as the README writes them with a
Python that lacks their packages.

finetune.py (an export folder of empty files: every case here stops before the model loads):
--epochs 0, --batch-size 0, --max-length 0, --lr 0, --save in a folder that cannot be made (under
a file), --max-length past the config's max_position_embeddings and a class folder without an
example each exit 1 naming the value, without a
traceback or a training line. The split of --data with a subfolder per document (its
load_user_task, called here): every 5th document of a class is held out whole (no document on
both sides), flat files every 5th file as before.
plot_metrics.py: a metrics line of random bytes exits 1 naming FILE:LINE, no traceback; the
default label of RUN/metrics.jsonl is RUN (--describe).
The project's environment: Debian's /usr/bin/python3 (without the tensorboard package)
running `tools/plot_metrics.py M --tensorboard DIR` as the README writes it gets the event
files (the tool runs again with .venv/bin/python); a copy of the tools beside no .venv exits 1
naming the package, the Python tried and tools/setup.sh, no traceback. Skipped parts say why.

usage: test_tools_errors.py TOOLS_DIR
"""
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import checks
from checks import expect

tools = os.path.abspath(sys.argv[1])
finetune, plot = os.path.join(tools, "finetune.py"), os.path.join(tools, "plot_metrics.py")


def run(*args, python=sys.executable, cwd=None):
    p = subprocess.run([python, *args], capture_output=True, text=True, cwd=cwd)
    return p.returncode, p.stdout + p.stderr


with tempfile.TemporaryDirectory() as tmp:
    export = os.path.join(tmp, "export")
    os.makedirs(export)
    for name in ("config.json", "model.safetensors", "spiece.model"):
        open(os.path.join(export, name), "w").close()
    labelled = os.path.join(tmp, "labelled")
    for label in ("alpha", "beta"):
        os.makedirs(os.path.join(labelled, label))
        for k in range(6):
            with open(os.path.join(labelled, label, f"{k}.txt"), "w") as f:
                f.write(f"{label} example number {k} with a few words\n")
    blocker = os.path.join(tmp, "a-file")
    open(blocker, "w").close()
    for args, named in ((["--epochs", "0"], "--epochs 0"), (["--batch-size", "0"], "--batch-size 0"),
                        (["--max-length", "0"], "--max-length 0"), (["--lr", "0"], "--lr 0"),
                        (["--save", os.path.join(blocker, "model")], "--save")):
        rc, out = run(finetune, export, "--data", labelled, *args)
        expect(f"finetune.py {' '.join(args)}: exit 1 naming '{named}', no traceback, nothing trained",
               rc == 1 and named in out and "Traceback" not in out and "epoch 1/" not in out, out[-1500:])
    with open(os.path.join(export, "config.json"), "w") as f:
        json.dump({"model_type": "bert", "max_position_embeddings": 64}, f)
    rc, out = run(finetune, export, "--data", labelled, "--max-length", "100")
    expect("finetune.py --max-length 100 on a model of 64 positions: exit 1 naming both, no traceback, nothing "
           "trained", rc == 1 and "--max-length 100" in out and "64" in out and "Traceback" not in out
           and "epoch 1/" not in out, out[-1500:])
    os.makedirs(os.path.join(labelled, "gamma"))
    rc, out = run(finetune, export, "--data", labelled)
    expect("finetune.py --data with an empty class folder: exit 1 naming it, no traceback",
           rc == 1 and "'gamma'" in out and "Traceback" not in out, out[-1500:])
    os.rmdir(os.path.join(labelled, "gamma"))

    sys.path.insert(0, tools)
    spec = importlib.util.spec_from_file_location("finetune", finetune)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    grouped = os.path.join(tmp, "grouped")
    for label in ("alpha", "beta"):
        for doc in range(10):
            os.makedirs(os.path.join(grouped, label, f"doc{doc}"))
            for par in range(3):
                with open(os.path.join(grouped, label, f"doc{doc}", f"{par}.txt"), "w") as f:
                    f.write(f"{label} document {doc} paragraph {par}\n")
    classes, train, held = module.load_user_task(grouped, None)
    held_docs = {t.split()[2] for t, _ in held}
    train_docs = {t.split()[2] for t, _ in train}
    expect(f"--data with a subfolder per document: documents {sorted(held_docs)} held out whole "
           f"({len(held)} held-out, {len(train)} training paragraphs), none on both sides",
           held_docs == {"4", "9"} and not held_docs & train_docs and len(held) == 12 and len(train) == 48)
    classes, train, held = module.load_user_task(labelled, None)
    expect(f"flat files: every 5th of each class held out ({len(held)} of {len(train) + len(held)})",
           len(held) == 2 and len(train) == 10)

    run_dir = os.path.join(tmp, "my-run")
    os.makedirs(run_dir)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    with open(metrics, "w") as f:
        for step in (1, 2):
            f.write(json.dumps({"step": step, "mlm_loss": 5.0 - step, "nsp_loss": 0.7, "mlm_accuracy": 0.1,
                                "nsp_accuracy": 0.5, "lr": 1e-3, "seq_per_s": 10.0}) + "\n")
    rc, out = run(plot, metrics, "--out", os.path.join(tmp, "m.png"), "--describe")
    labels = set()
    if rc == 0:
        described = json.loads(out.strip().splitlines()[-1])
        labels = {s["run"] for panel in described["panels"] for s in panel["series"]}
    expect(f"plot_metrics.py my-run/metrics.jsonl: the run labelled by its folder: {labels}", labels == {"my-run"},
           out[-800:])
    bad = os.path.join(tmp, "bad.jsonl")
    shutil.copy(metrics, bad)
    with open(bad, "ab") as f:
        f.write(bytes(random.Random(3).randrange(128, 256) for _ in range(64)) + b"\n")
    rc, out = run(plot, bad, "--out", os.path.join(tmp, "b.png"))
    expect("plot_metrics.py on a line of random bytes: exit 1 naming bad.jsonl:3, no traceback",
           rc == 1 and "bad.jsonl:3" in out and "Traceback" not in out, out[-800:])

    debian = "/usr/bin/python3"
    venv_python = os.path.join(os.path.dirname(tools), ".venv", "bin", "python")
    lacks = os.path.exists(debian) and subprocess.run(
        [debian, "-c", "import tensorboard"], capture_output=True, env={"PATH": "/usr/bin:/bin"},
        cwd=tmp).returncode != 0
    has = os.path.exists(venv_python) and subprocess.run([venv_python, "-c", "import tensorboard, torch"],
                                                         capture_output=True).returncode == 0
    if not (lacks and has):
        print(f"SKIP: the re-run with .venv/bin/python (needs {debian} without the tensorboard package: {lacks}, "
              f"and {venv_python} with it: {has})")
    else:
        tb = os.path.join(tmp, "tb")
        rc, out = run(plot, metrics, "--tensorboard", tb, python=debian)
        expect(f"{debian} tools/plot_metrics.py ... --tensorboard: exit 0 and event files (run again with .venv)",
               rc == 0 and os.path.isdir(os.path.join(tb, "my-run")) and os.listdir(os.path.join(tb, "my-run")),
               out[-1500:])
        copy = os.path.join(tmp, "bare", "tools")
        os.makedirs(copy)
        for name in ("plot_metrics.py", "common.py"):
            shutil.copy(os.path.join(tools, name), copy)
        rc, out = run(os.path.join(copy, "plot_metrics.py"), metrics, "--tensorboard", tb, python=debian)
        expect("without .venv: exit 1 naming the package, the Python tried and tools/setup.sh, no traceback",
               rc == 1 and "tensorboard" in out and debian in out and "tools/setup.sh" in out and "Traceback" not in out,
               out[-1500:])

sys.exit(checks.exit_status())
