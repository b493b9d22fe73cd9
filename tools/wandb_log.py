#!/usr/bin/env python3
"""Logs a `bertpre train` metrics file to Weights & Biases as the run writes it.

    tools/wandb_log.py METRICS.jsonl --project NAME [--name RUN] [--id ID] [--dir DIR]
                       [--offline] [--after-step N] [--follow-pid PID]
    tools/wandb_log.py --check

Each line of the metrics file becomes one `wandb.log` at the line's step: every numeric field
as `train/FIELD` (`eval/FIELD` for an evaluation's line), as TensorBoard gets them. It reads
the lines already there, then follows the file (once a second) until it is told to stop
(SIGTERM or SIGINT: it reads what is left, finishes the W&B run and exits 0) or process PID
(--follow-pid) has ended. --offline (or WANDB_MODE=offline) writes the run under DIR/wandb for
`wandb sync` later, with no network; --id resumes that W&B run (a resumed training run) and
--after-step N skips the lines up to step N it already holds. tools/pretrain.sh --wandb
PROJECT starts it beside training. --check exits 0 when the wandb package imports, else 1
saying how to install it. Needs the wandb package (not installed by tools/setup.sh:
`.venv/bin/pip install wandb`); run with a Python that lacks it, it runs again with .venv's.
"""
import argparse
import json
import os
import signal
import sys
import time

import common

M = common.Messages("wandb_log")
HINT = "install it with .venv/bin/pip install wandb (tools/setup.sh does not)"
stop = False


def on_stop(signum, frame):
    global stop
    stop = True


def values(line):
    prefix = "eval/" if line.get("eval") else "train/"
    return {prefix + k: v for k, v in line.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("metrics", nargs="?")
    ap.add_argument("--project")
    ap.add_argument("--name")
    ap.add_argument("--id")
    ap.add_argument("--dir", default=".")
    ap.add_argument("--offline", action="store_true")
    ap.add_argument("--after-step", type=int, default=-1)
    ap.add_argument("--follow-pid", type=int)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    common.need("wandb_log", "wandb", hint=HINT)
    if a.check:
        return
    if not a.metrics or not a.project:
        M.fail("give METRICS.jsonl and --project NAME")
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    import wandb
    os.makedirs(a.dir, exist_ok=True)
    mode = "offline" if a.offline else os.environ.get("WANDB_MODE") or "online"
    try:
        run = wandb.init(project=a.project, name=a.name, id=a.id, resume="allow" if a.id else None, dir=a.dir,
                         mode=mode)
    except Exception as e:  # no login, no network: said in one line, training goes on without it
        M.fail(f"wandb.init (project {a.project}, mode {mode}) failed: {' '.join(str(e).split())}")
    M.say(f"logging {a.metrics} to W&B project {a.project} ({mode}{', run ' + run.id if run else ''})")
    logged, held = 0, b""
    f = None
    while True:
        finishing = stop or (a.follow_pid is not None and not common.alive(a.follow_pid))
        if f is None and os.path.exists(a.metrics):
            f = open(a.metrics, "rb")
        if f is not None:
            held += f.read()
            *complete, held = held.split(b"\n")
            for text in complete:
                if not text.strip():
                    continue
                try:
                    line = json.loads(text)
                except ValueError:
                    continue
                if not isinstance(line, dict) or not isinstance(line.get("step"), int) or line["step"] <= a.after_step:
                    continue
                run.log(values(line), step=line["step"])
                logged += 1
        if finishing:
            break
        time.sleep(1)
    run.finish()
    M.say(f"{logged} lines logged to W&B ({mode})")


if __name__ == "__main__":
    main()
