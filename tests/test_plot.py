"""tools/plot_metrics.py: a PNG with one panel per quantity, several runs overlaid, eval points.

Two metrics files written here with known values (two runs, an eval line each, with the
most-frequent-token baseline) and one written by `bertpre train` itself (so that the field
names the script reads are the ones bertpre writes): the PNG is a PNG of the figure's size,
the panels are the seven expected ones (titles and axes), each panel holds every run's
training series with exactly the values of the files, the loss and accuracy panels the eval
points, the MLM accuracy panel the baseline; a missing file and a line without "step" are
errors naming the file (and line); SIGINT (Ctrl-C) ends it without a traceback. Values are
compared exactly: the script only copies them.
An MLM-only run's file (no NSP fields) plots without NSP panels (five panels); beside a run with
NSP numbers the NSP panels are drawn.

usage: test_plot.py BERTPRE PLOT_SCRIPT
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre, script = sys.argv[1], sys.argv[2]
with checks.needs("matplotlib", hint="Debian package python3-matplotlib"):
    import matplotlib  # noqa: F401

PANELS = {"MLM loss": "mlm_loss", "NSP loss": "nsp_loss", "MLM accuracy": "mlm_accuracy",
          "NSP accuracy": "nsp_accuracy", "learning rate": "lr", "loss scale": "loss_scale",
          "throughput": "seq_per_s"}


def fake_run(path, steps, offset):
    lines = []
    for s in steps:
        lines.append({"step": s, "steps": steps[-1], "mlm_loss": 8.0 - s / 100 + offset, "nsp_loss": 0.69 - s / 1e4,
                      "mlm_accuracy": s / 1e3 + offset, "nsp_accuracy": 0.5 + s / 1e4, "lr": 1e-3 * s,
                      "loss_scale": 2.0 ** (10 + s // 50), "skipped_steps": 0, "seq_per_s": 100.0 + s + offset,
                      "tokens_per_s": 6400.0, "model_tflops": 0.01, "eta_s": 1.0, "elapsed_s": s / 10,
                      "peak_percent": None})
    evals = [{"eval": True, "step": steps[-1], "sequences": 320, "mlm_loss": 6.5 + offset, "nsp_loss": 0.6,
              "mlm_accuracy": 0.12 + offset, "nsp_accuracy": 0.7, "mlm_baseline_accuracy": 0.05}]
    with open(path, "w") as f:
        for line in lines + evals:
            f.write(json.dumps(line) + "\n")
    return lines, evals


def run(*args):
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


with tempfile.TemporaryDirectory() as tmp:
    a, b = os.path.join(tmp, "a.jsonl"), os.path.join(tmp, "b.jsonl")
    runs = {"run-a": fake_run(a, [25, 50, 75, 100], 0.0), "run-b": fake_run(b, [50, 100, 150], 0.25)}

    # A real metrics file: 6 steps of the tiny model on synthetic batches.
    real = os.path.join(tmp, "real.jsonl")
    cfg = os.path.join(tmp, "run.json")
    json.dump({"model": {"vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                         "intermediate_size": 32, "max_position_embeddings": 32},
               "train": {"micro_batch_size": 4, "seq_length": 16, "max_predictions_per_seq": 3, "steps": 6,
                         "log_every": 2, "learning_rate": 0.01, "metrics_file": real}}, open(cfg, "w"))
    p = subprocess.run([bertpre, "train", cfg], capture_output=True, text=True)
    expect("bertpre train writes a metrics file", p.returncode == 0 and os.path.exists(real), p.stdout + p.stderr)
    real_lines = [json.loads(line) for line in open(real)] if os.path.exists(real) else []

    png = os.path.join(tmp, "run.png")
    rc, out = run(a, b, real, "--labels", "run-a,run-b,real", "--out", png, "--describe")
    expect("plot_metrics exits 0", rc == 0, out)
    desc = json.loads(out.strip().splitlines()[-1]) if rc == 0 else {"panels": []}
    data = open(png, "rb").read() if os.path.exists(png) else b""
    expect("a PNG is written", data[:8] == b"\x89PNG\r\n\x1a\n", data[:16])
    if len(data) > 24:
        width, height = struct.unpack(">II", data[16:24])
        expect(f"PNG of the figure's size (12 x 13 in at 80 dpi): {width} x {height}",
               (width, height) == (960, 1040))
    titles = [panel["title"] for panel in desc["panels"]]
    expect(f"the seven panels: {titles}", titles == list(PANELS))
    for panel in desc["panels"]:
        field = PANELS.get(panel["title"])
        expect(f"{panel['title']}: x axis 'step', y axis '{panel['ylabel']}'",
               panel["xlabel"] == "step" and panel["ylabel"] != "" and panel["field"] == field)
        got = {(s["run"], s["kind"]): (s["x"], s["y"]) for s in panel["series"]}
        for label, (lines, evals) in runs.items():
            want = ([line["step"] for line in lines], [float(line[field]) for line in lines])
            expect(f"{panel['title']}: run {label} drawn with the file's values", got.get((label, "train")) == want,
                   got.get((label, "train")))
            has_eval = field in ("mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy")
            want_eval = ([evals[0]["step"]], [float(evals[0][field])]) if has_eval else None
            expect(f"{panel['title']}: run {label} eval point {'marked' if has_eval else 'absent'}",
                   got.get((label, "eval")) == want_eval, got.get((label, "eval")))
        want_real = ([line["step"] for line in real_lines], [float(line[field]) for line in real_lines])
        expect(f"{panel['title']}: bertpre's own metrics file drawn ({len(real_lines)} points)",
               got.get(("real", "train")) == want_real and len(real_lines) == 3, got.get(("real", "train")))
    mlm_acc = next((p for p in desc["panels"] if p["title"] == "MLM accuracy"), {"series": []})
    expect("MLM accuracy: the most-frequent-token baseline drawn for each run with an eval",
           sum(s["kind"] == "baseline" for s in mlm_acc["series"]) == 2)

    # An MLM-only run (train.objective mlm) writes no NSP numbers: no NSP panel is drawn for it.
    mlm_metrics = os.path.join(tmp, "mlm.jsonl")
    p = subprocess.run([bertpre, "train", cfg, "--set", "train.objective=mlm", "--set",
                        f"train.metrics_file={mlm_metrics}"], capture_output=True, text=True)
    rc, out = run(mlm_metrics, "--out", os.path.join(tmp, "mlm.png"), "--describe")
    mlm_desc = json.loads(out.strip().splitlines()[-1]) if rc == 0 else {"panels": []}
    notes = {panel["title"]: (len(panel["series"]), panel.get("note")) for panel in mlm_desc["panels"]}
    expect("an MLM-only run's metrics: plotted with five panels, no NSP panel, its MLM loss drawn",
           p.returncode == 0 and rc == 0 and "NSP loss" not in notes and "NSP accuracy" not in notes and
           len(notes) == 5 and notes.get("MLM loss", (0,))[0] == 1, (notes, out))
    rc, out = run(mlm_metrics, a, "--labels", "mlm,run-a", "--out", os.path.join(tmp, "both.png"), "--describe")
    both = json.loads(out.strip().splitlines()[-1]) if rc == 0 else {"panels": []}
    nsp = [panel for panel in both["panels"] if panel["title"] == "NSP loss"]
    expect("beside a run with NSP numbers, the seven panels, the NSP ones with that run's series alone",
           rc == 0 and len(both["panels"]) == 7 and nsp and {s["run"] for s in nsp[0]["series"]} == {"run-a"},
           out[-800:])

    rc, out = run(os.path.join(tmp, "missing.jsonl"), "--out", png)
    expect("a missing metrics file: exit 1 naming it", rc == 1 and "missing.jsonl" in out, out)
    bad = os.path.join(tmp, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"step": 1, "mlm_loss": 1.0}\n{"mlm_loss": 2.0}\n')
    rc, out = run(bad, "--out", png)
    expect("a line without 'step': exit 1 naming the file, line and field",
           rc == 1 and "bad.jsonl:2" in out and "'step'" in out, out)
    rc, out = run(a, b, "--labels", "only-one", "--out", png)
    expect("--labels with the wrong count: exit 1", rc == 1 and "--labels" in out, out)
    import signal
    import time
    for delay in (0.05, 0.5):  # Ctrl-C while matplotlib loads, and later (tools/pretrain.sh passes it on)
        job = subprocess.Popen([sys.executable, script, a, "--out", png], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        job.send_signal(signal.SIGINT)
        _, err = job.communicate(timeout=60)
        expect(f"SIGINT after {delay} s: the plot ends (by the signal, or done), no traceback",
               job.returncode in (0, -signal.SIGINT) and "Traceback" not in err, err[-800:])

sys.exit(checks.exit_status())
