#!/usr/bin/env python3
"""Plots `bertpre train` metrics files (JSON lines, see docs/TRAINING.md, "Log line, metrics file, FLOPs").

    tools/plot_metrics.py METRICS.jsonl [MORE.jsonl ...] --out run.png [--labels a,b] [--describe]
    tools/plot_metrics.py METRICS.jsonl [MORE.jsonl ...] --tensorboard DIR [--labels a,b]

One panel per quantity against the step: MLM loss, NSP loss, MLM accuracy, NSP accuracy,
learning rate, loss scale and throughput (sequences/s), the NSP panels only where a run has
NSP numbers (not for MLM-only runs alone); every file is one run, drawn in its own
colour on every panel. Lines with "eval": true (the evaluation on held-out data that
`bertpre train` appends after its last step) are drawn as markers on the loss and accuracy
panels, and a line's "mlm_baseline_accuracy" (the accuracy of always predicting the most
frequent masked token) as a dotted level on the MLM accuracy panel. --describe prints, as
JSON, the panels written: title, axis labels and the series on each (for checks and scripts).
Needs matplotlib (Debian's python3-matplotlib); run with a Python that lacks a package it needs,
it runs again with the project's .venv/bin/python (tools/common.py).

--tensorboard DIR writes TensorBoard event files instead of (or beside) the PNG: one folder
DIR/LABEL per run, every numeric field of a training line as the scalar "train/FIELD" and of an
eval line as "eval/FIELD", at the line's step (`.venv/bin/tensorboard --logdir DIR` shows them). Needs
the tensorboard package (tools/requirements.txt), written through PyTorch's SummaryWriter.
"""
import argparse
import json
import os
import signal
import sys

signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C (or tools/pretrain.sh passing it on) ends it without a traceback

import common

# (metrics field, panel title, y label, log scale)
PANELS = [
    ("mlm_loss", "MLM loss", "loss (nats)", False),
    ("nsp_loss", "NSP loss", "loss (nats)", False),
    ("mlm_accuracy", "MLM accuracy", "accuracy", False),
    ("nsp_accuracy", "NSP accuracy", "accuracy", False),
    ("lr", "learning rate", "lr", False),
    ("loss_scale", "loss scale", "scale", True),
    ("seq_per_s", "throughput", "sequences/s", False),
]
EVAL_FIELDS = {"mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy"}
fail = common.Messages("plot_metrics").fail


def read_run(path):
    """Returns (train lines, eval lines) of one metrics file, in file order."""
    train, evals = [], []
    try:
        f = open(path, "rb")
    except OSError as e:
        fail(f"{path}: cannot open: {e.strerror}")
    with f:
        for number, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                fail(f"{path}:{number}: not UTF-8 text (byte {e.start + 1} of the line is 0x{raw[e.start]:02x}): "
                     "not a metrics line of bertpre train")
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except json.JSONDecodeError as e:
                fail(f"{path}:{number}: not a JSON object: {e.msg}")
            if not isinstance(line, dict) or not isinstance(line.get("step"), int):
                fail(f"{path}:{number}: field 'step' missing or not an integer")
            (evals if line.get("eval") else train).append(line)
    if not train and not evals:
        fail(f"{path}: no metrics lines")
    return train, evals


def run_label(path):
    """A run's default name: the folder of a metrics*.jsonl file (a run's folder), else the file's name."""
    name = os.path.basename(path)
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return folder if name.startswith("metrics") and folder else name


def series(lines, field):
    xs = [line["step"] for line in lines if isinstance(line.get(field), (int, float))]
    ys = [float(line[field]) for line in lines if isinstance(line.get(field), (int, float))]
    return xs, ys


def build_figure(runs, labels):
    """runs: [(train lines, eval lines)]; returns (figure, description)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # MLM-only runs (train.objective mlm) have no NSP head and write no NSP numbers: where no run
    # has any, the NSP panels are left out rather than drawn empty.
    nsp = any(isinstance(line.get(f), (int, float)) for train, evals in runs for line in train + evals
              for f in ("nsp_loss", "nsp_accuracy"))
    panels = [p for p in PANELS if nsp or not p[0].startswith("nsp_")]
    rows = (len(panels) + 2) // 2  # the panels and the key, two per row
    fig, axes = plt.subplots(rows, 2, figsize=(12, 3.25 * rows), constrained_layout=True)
    axes = axes.ravel()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    described = []
    for ax, (field, title, ylabel, log) in zip(axes, panels):
        panel = {"title": title, "field": field, "xlabel": "step", "ylabel": ylabel, "series": []}
        for k, ((train, evals), label) in enumerate(zip(runs, labels)):
            colour = colours[k % len(colours)]
            xs, ys = series(train, field)
            if xs:
                ax.plot(xs, ys, color=colour, label=label, linewidth=1.4)
                panel["series"].append({"run": label, "kind": "train", "x": xs, "y": ys})
            if field in EVAL_FIELDS:
                ex, ey = series(evals, field)
                if ex:
                    ax.plot(ex, ey, linestyle="none", marker="*", markersize=13, color=colour,
                            markeredgecolor="black", label=f"{label} eval")
                    panel["series"].append({"run": label, "kind": "eval", "x": ex, "y": ey})
            if field == "mlm_accuracy":
                bx, by = series(evals, "mlm_baseline_accuracy")
                if bx:
                    ax.axhline(by[-1], color=colour, linestyle=":", linewidth=1.2,
                               label=f"{label} most frequent token")
                    panel["series"].append({"run": label, "kind": "baseline", "x": bx, "y": by})
        if field.startswith("nsp_") and not panel["series"]:  # beside runs with NSP numbers
            ax.text(0.5, 0.5, "no NSP numbers\n(MLM-only runs)", ha="center", va="center", transform=ax.transAxes,
                    color="grey")
            panel["note"] = "no NSP numbers (MLM-only runs)"
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log", base=2)
        if field == "nsp_accuracy":
            ax.axhline(0.5, color="grey", linestyle=":", linewidth=1.0, label="chance")
        ax.grid(True, alpha=0.3)
        if field in ("mlm_accuracy", "nsp_accuracy"):
            ax.legend(fontsize=8, loc="best")
        described.append(panel)
    # The last cell: which file is which run, and the final eval numbers.
    key = axes[len(panels)]
    key.axis("off")
    for spare in axes[len(panels) + 1:]:
        spare.axis("off")
    key.set_title("runs")
    text = []
    for (train, evals), label, colour in zip(runs, labels, colours * (len(runs) // len(colours) + 1)):
        last = evals[-1] if evals else None
        line = label
        if last:
            def number(field):  # null (no masked positions in the eval rows) and absent alike
                value = last.get(field)
                return value if isinstance(value, (int, float)) else float("nan")
            line += f"\n  eval at step {last['step']}: MLM acc {number('mlm_accuracy'):.3f}"
            if "nsp_accuracy" in last:  # an MLM-only run (train.objective mlm) has none
                line += f", NSP acc {number('nsp_accuracy'):.3f}"
            if isinstance(last.get("mlm_baseline_accuracy"), (int, float)):
                line += f"\n  (most frequent token alone: {last['mlm_baseline_accuracy']:.3f})"
        text.append((line, colour))
    y = 0.95
    for line, colour in text:
        key.text(0.0, y, line, color=colour, fontsize=10, va="top", transform=key.transAxes)
        y -= 0.08 + 0.06 * line.count("\n")
    return fig, described


def tensorboard_program():
    """The tensorboard command beside this Python (.venv/bin/tensorboard), else the bare name."""
    beside = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    return beside if os.access(beside, os.X_OK) else "tensorboard"


def write_tensorboard(runs, labels, logdir):
    """One SummaryWriter folder per run; returns the number of scalars written."""
    from torch.utils.tensorboard import SummaryWriter
    if len(set(labels)) != len(labels):
        fail(f"--tensorboard: two runs have the same label ({', '.join(labels)}); name them with --labels")
    count = 0
    for (train, evals), label in zip(runs, labels):
        run_dir = os.path.join(logdir, label)
        try:
            writer = SummaryWriter(log_dir=run_dir)
        except OSError as e:
            fail(f"{run_dir}: cannot write: {e.strerror}")
        for kind, lines in (("train", train), ("eval", evals)):
            for line in lines:
                for field, value in line.items():
                    if field != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                        writer.add_scalar(f"{kind}/{field}", value, line["step"])
                        count += 1
        writer.close()
    return count


def main(argv=None):
    p = argparse.ArgumentParser(description="Plots bertpre train metrics files (JSON lines) against the step.")
    p.add_argument("metrics", nargs="+", help="metrics files (train.metrics_file), one per run")
    p.add_argument("--out", help="the PNG to write")
    p.add_argument("--tensorboard", metavar="DIR", help="write TensorBoard event files, a folder DIR/LABEL per run")
    p.add_argument("--labels", help="comma-separated run names (default: each file's folder when it is named "
                                    "metrics*.jsonl, as train.metrics_file of tools/pretrain.sh is, else its name)")
    p.add_argument("--describe", action="store_true", help="print the panels written, as JSON")
    a = p.parse_args(argv)
    if not a.out and not a.tensorboard:
        fail("nothing to write: give --out PNG, --tensorboard DIR or both")
    common.need("plot_metrics", *(["matplotlib"] if a.out else []),
                        *(["torch", "tensorboard"] if a.tensorboard else []))
    labels = a.labels.split(",") if a.labels else [run_label(m) for m in a.metrics]
    if len(labels) != len(a.metrics):
        fail(f"--labels names {len(labels)} runs but {len(a.metrics)} metrics files are given")
    runs = [read_run(m) for m in a.metrics]
    if a.tensorboard:
        count = write_tensorboard(runs, labels, a.tensorboard)
        print(f"plot_metrics: wrote {count} scalars of {len(runs)} run{'s' if len(runs) != 1 else ''} "
              f"to {a.tensorboard} ({tensorboard_program()} --logdir {a.tensorboard})")
    if not a.out:
        return
    fig, described = build_figure(runs, labels)
    try:
        fig.savefig(a.out, dpi=80)
    except OSError as e:
        fail(f"{a.out}: cannot write: {e.strerror}")
    if a.describe:
        print(json.dumps({"out": a.out, "panels": described}))
    else:
        print(f"plot_metrics: wrote {a.out} ({len(runs)} run{'s' if len(runs) != 1 else ''})")


if __name__ == "__main__":
    main()
