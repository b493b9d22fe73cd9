"""tools/plot_metrics.py --tensorboard DIR: TensorBoard event files, read back.

Two metrics files written here with known values (training lines and an eval line with the
most-frequent-token baseline) are written as event files; the test reads them back with
TensorBoard's own reader (EventAccumulator, a code path separate from PyTorch's
SummaryWriter that writes them) and checks: one folder per run named by --labels, the tags
train/FIELD and eval/FIELD for every numeric field and no others (no "step", no "eval"
flag), every value at its step. TensorBoard stores scalars as float32, so values are compared
to a relative 1e-6 (float32's rounding is 6e-8 relative). Also: --tensorboard without --out
writes no PNG; neither option, and two runs with the same label, are errors.

usage: test_tensorboard.py PLOT_SCRIPT
"""
import json
import os
import subprocess
import sys
import tempfile

import checks
from checks import expect

script = sys.argv[1]
with checks.needs("the tensorboard package", hint="tools/setup.sh installs it from tools/requirements.txt"):
    import torch.utils.tensorboard  # noqa: F401
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def line(step, k, **extra):
    return dict(step=step, steps=30, mlm_loss=8.0 - 0.1 * step - k, nsp_loss=0.69 - 0.001 * step,
                mlm_accuracy=0.01 * step + 0.003 * k, nsp_accuracy=0.5 + 0.002 * step, lr=1e-3 * step / 30,
                loss_scale=1, skipped_steps=0, seq_per_s=123.25 + k, peak_percent=None, **extra)


with tempfile.TemporaryDirectory() as tmp:
    runs = {}
    for k, label in enumerate(("alpha", "beta")):
        lines = [line(s, k) for s in (10, 20, 30)]
        lines.append(dict(step=30, eval=True, sequences=64, mlm_loss=5.5 + k, nsp_loss=0.6, mlm_accuracy=0.2,
                          nsp_accuracy=0.7, mlm_baseline_accuracy=0.03))
        path = os.path.join(tmp, f"run{k}.jsonl")
        with open(path, "w") as f:
            f.write("".join(json.dumps(x) + "\n" for x in lines))
        runs[label] = (path, lines)
    tb = os.path.join(tmp, "tb")
    p = subprocess.run([sys.executable, script, *(v[0] for v in runs.values()), "--labels", "alpha,beta",
                        "--tensorboard", tb], capture_output=True, text=True)
    expect("plot_metrics.py --tensorboard exits 0", p.returncode == 0, p.stdout + p.stderr)
    expect(f"one folder per run: {sorted(os.listdir(tb)) if os.path.isdir(tb) else None}",
           os.path.isdir(tb) and sorted(os.listdir(tb)) == ["alpha", "beta"])
    expect("no PNG without --out", not any(f.endswith(".png") for f in os.listdir(tmp)))
    for label, (_, lines) in runs.items():
        acc = EventAccumulator(os.path.join(tb, label))
        acc.Reload()
        tags = sorted(acc.Tags()["scalars"])
        want = {}
        for x in lines:
            kind = "eval" if x.get("eval") else "train"
            for field, value in x.items():
                if field != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    want.setdefault(f"{kind}/{field}", []).append((x["step"], float(value)))
        expect(f"{label}: {len(tags)} tags, those of the numeric fields: {tags}", tags == sorted(want))
        worst, bad = 0.0, []
        for tag, points in want.items():
            got = [(e.step, e.value) for e in acc.Scalars(tag)] if tag in tags else []
            if [s for s, _ in got] != [s for s, _ in points]:
                bad.append(f"{tag}: steps {[s for s, _ in got]}")
                continue
            for (_, g), (_, w) in zip(got, points):
                rel = abs(g - w) / max(abs(w), 1e-30)
                worst = max(worst, rel)
        expect(f"{label}: every value at its step, relative error {worst:.1e} <= 1e-6", not bad and worst <= 1e-6,
               bad)
    for args, named in (([runs["alpha"][0]], "--out"),
                        ([runs["alpha"][0], runs["alpha"][0], "--tensorboard", os.path.join(tmp, "tb2")], "--labels")):
        p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
        expect(f"error naming {named}: {p.stderr.strip()}", p.returncode == 1 and named in p.stderr, p.stderr)

sys.exit(checks.exit_status())
