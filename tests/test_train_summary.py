"""How `bertpre train` ends and what it logs (tiny model, synthetic batches, CPU):

  summary: a run stopped by train.steps_this_run and its resume each end with a summary
  naming the steps done ("steps 1-3 of 6", then "steps 4-6 of 6"), the newest checkpoint on
  disk, the metrics file, and the next commands, each run here as printed from the directory
  bertpre ran in: --resume auto with the run's --set options while steps remain (it gives
  steps 4-6), then the export and plot commands (exit 0; the export's config.json, the PNG);
  --no-next leaves the commands out; with eval_data (shards from `bertpre prep`;
  skipped without HDF5, SentencePiece or the linux-doc corpus) the held-out line carries the
  numbers of the metrics file's eval line (3 decimals, as printed), and its next commands (eval
  of the checkpoint, export, plot) run as printed;
  --eval-json FILE writes the object `bertpre eval --json` writes for the same checkpoint and
  rows (every field equal), and is refused without train.eval_data;
  elapsed_s continues across the resume: the metrics' elapsed_s increases over both jobs
  and the resumed job's first value is above the elapsed_s stored in the checkpoint it
  resumed from;
  loss-scale columns: none on FP32 without a static scale; "scale 1024 | skipped 0" with
  train.loss_scale = 1024;
  --dry-run names the optimizer's state by its optimizer (LAMB moments, AdamW moments, LARS
  momentum buffer), LARS's one buffer half the bytes of the others' two.

usage: test_train_summary.py BERTPRE
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre = sys.argv[1]
have = checks.features(bertpre)
MODEL = {"vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
         "intermediate_size": 16, "max_position_embeddings": 32}
TRAIN = {"micro_batch_size": 4, "seq_length": 16, "max_predictions_per_seq": 3, "steps": 6, "log_every": 1,
         "backend": "cpu"}


with tempfile.TemporaryDirectory() as tmp:
    def run(*args):
        p = subprocess.run([os.path.abspath(bertpre), *args], capture_output=True, text=True, cwd=tmp)
        return p.returncode, p.stdout + p.stderr

    def shell(command):
        p = subprocess.run(command, shell=True, capture_output=True, text=True, cwd=tmp)
        return p.returncode, p.stdout + p.stderr

    def next_lines(out):
        """The commands of the summary's "next:" block, without their comments."""
        block = out[out.find("\nnext:\n") + 7:].splitlines() if "\nnext:\n" in out else []
        lines = []
        for line in block:
            if not line.startswith("  "):
                break
            lines.append(line.split("   #")[0].strip())
        return lines

    def config(model=None, **train):
        path = os.path.join(tmp, "run.json")
        with open(path, "w") as f:
            json.dump({"model": {**MODEL, **(model or {})}, "train": {**TRAIN, **train}}, f)
        return path

    ckpt, metrics = os.path.join(tmp, "ckpt"), os.path.join(tmp, "m.jsonl")
    cfg = config(checkpoint_dir=ckpt, metrics_file=metrics)
    rc1, first = run("train", cfg, "--set", "train.steps_this_run=3")
    with open(metrics) as f:
        first_lines = [json.loads(line) for line in f]
    newest = os.path.join(ckpt, sorted(os.listdir(ckpt))[-1])
    with open(os.path.join(newest, "state.json")) as f:
        stored_elapsed = json.load(f).get("elapsed_s")
    expect("a paused run ends with a summary: steps, checkpoint, metrics, --resume auto",
           rc1 == 0 and "summary: steps 1-3 of 6 in " in first and f"checkpoint  {newest}\n" in first
           and f"metrics     {metrics}\n" in first
           and f"{os.path.abspath(bertpre)} train {cfg} --set train.steps_this_run=3 --resume auto" in first, first)
    expect("the checkpoint stores elapsed_s, at least the last logged one",
           isinstance(stored_elapsed, float) and stored_elapsed >= first_lines[-1]["elapsed_s"],
           (stored_elapsed, first_lines[-1:]))

    resume = [line for line in next_lines(first) if "--resume auto" in line]
    rc2, second = shell(resume[0]) if resume else (1, first)
    with open(metrics) as f:
        lines = [json.loads(line) for line in f]
    newest = os.path.join(ckpt, sorted(os.listdir(ckpt))[-1])
    elapsed = [line["elapsed_s"] for line in lines]
    expect("the resume's summary: steps 4-6 of 6, its checkpoint, no --resume",
           rc2 == 0 and "summary: steps 4-6 of 6 in " in second and f"checkpoint  {newest}\n" in second
           and "--resume auto" not in second.split("summary:")[-1], second)
    expect("elapsed_s increases over both jobs and continues from the checkpoint's",
           len(lines) == 6 and all(a < b for a, b in zip(elapsed, elapsed[1:])) and elapsed[3] > stored_elapsed,
           elapsed)
    commands = next_lines(second)
    expect(f"after the last step: the export and plot commands ({len(commands)})",
           len(commands) == 2 and " export " in commands[0] and "plot_metrics.py" in commands[1], second)
    for command in commands:
        rc, out = shell(command)
        made = os.path.join(tmp, "export-step-6", "config.json") if " export " in command else metrics + ".png"
        expect(f"'{command}' runs as printed and writes {os.path.relpath(made, tmp)}",
               rc == 0 and os.path.isfile(made), out)
    rc, out = run("train", cfg, "--set", "train.checkpoint_dir=", "--no-next")
    expect("--no-next: a summary without the next commands", rc == 0 and "summary:" in out and "next:" not in out,
           out[-1500:])

    step_lines = [line for line in first.splitlines() + second.splitlines() if line.startswith("step ")]
    expect("FP32 without a static scale: no loss-scale columns in the log",
           len(step_lines) == 6 and not any("scale" in line or "skipped" in line for line in step_lines), step_lines)
    rc, out = run("train", config(loss_scale=1024, steps=2))
    step_lines = [line for line in out.splitlines() if line.startswith("step ")]
    expect("a static loss scale: the columns show it",
           rc == 0 and step_lines and all("| scale 1024 | skipped 0 |" in line for line in step_lines), out)

    sizes = {}
    for name, label in (("lamb", "LAMB moments"), ("adamw", "AdamW moments"), ("lars", "LARS momentum buffer")):
        rc, out = run("train", config({"hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4,
                                       "num_hidden_layers": 2}, optimizer=name), "--dry-run")
        m = re.search(r"optimizer state \((.*?)\)\s+([0-9.]+) MiB", out)
        sizes[name] = float(m.group(2)) if m else None
        expect(f"--dry-run with {name}: 'optimizer state ({label})'", rc == 0 and m and m.group(1) == label, out)
    expect("LARS's state is half of LAMB's and AdamW's (one buffer, not two; 0.1 MiB print rounding)",
           None not in sizes.values() and sizes["lamb"] == sizes["adamw"] and sizes["lamb"] > 1
           and abs(sizes["lars"] - sizes["lamb"] / 2) <= 0.1, sizes)

    # The held-out line: needs real shards.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import data_fixtures
    if not have["hdf5"] or not have["sentencepiece"] or not data_fixtures.glob.glob(
            "/usr/share/doc/linux-doc-*/Documentation"):
        print("note: no HDF5, SentencePiece or linux-doc corpus: the summary's held-out line is not checked")
    else:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w") as f:
            for i, line in enumerate(data_fixtures.real_lines(100_000)):
                f.write(line + ("\n\n" if i % 20 == 19 else "\n"))
        spm = data_fixtures.train_tokenizer(bertpre, os.path.join(tmp, "spm"), [corpus], 200, fmt="lines",
                                            pattern=None)
        shards = os.path.join(tmp, "shards")
        data_fixtures.run([bertpre, "prep", "--tokenizer", spm, "--output", shards, "--format", "lines",
                           "--seq-length", 16, "--max-predictions", 3, "--eval-fraction", 0.1, "--dupe-factor", 1,
                           "--shards", 1, "--no-progress", corpus])
        evals = os.path.join(tmp, "eval.jsonl")
        rc, out = run("train", config({"vocab_size": 200}, steps=2, data=os.path.join(shards, "train-*.hdf5"),
                                      eval_data=os.path.join(shards, "eval-*.hdf5"), eval_batches=2, tokenizer=spm,
                                      metrics_file=evals, checkpoint_dir=os.path.join(tmp, "ck-eval")),
                      "--eval-json", os.path.join(tmp, "train-eval.json"))
        commands = next_lines(out)
        expect(f"with eval_data: the eval, export and plot commands ({len(commands)})",
               len(commands) == 3 and " eval " in commands[0], out[-1500:])
        for command in commands:
            q, said = shell(command)
            expect(f"'{command}' runs as printed", q == 0, said[-1500:])
        with open(evals) as f:
            ev = next((json.loads(line) for line in f if '"eval"' in line), {})
        want = (f"  held out    {ev.get('sequences')} sequences of {shards}/eval-*.hdf5: MLM loss "
                f"{ev.get('mlm_loss', 0):.3f}, MLM accuracy {ev.get('mlm_accuracy', 0):.3f} (most frequent token "
                f"alone: {ev.get('mlm_baseline_accuracy', 0):.3f}), NSP accuracy {ev.get('nsp_accuracy', 0):.3f}")
        expect("the summary's held-out line has the metrics file's eval numbers", rc == 0 and ev and want in out,
               f"{want}\n{out}")
        # --eval-json: the object `bertpre eval --json` writes for the same checkpoint and rows.
        q, said = run("eval", os.path.join(tmp, "ck-eval"), "--data", os.path.join(shards, "eval-*.hdf5"), "--batches",
                      "2", "--micro-batch", "4", "--json", os.path.join(tmp, "eval.json"))
        mine = json.load(open(os.path.join(tmp, "train-eval.json"))) if os.path.exists(
            os.path.join(tmp, "train-eval.json")) else {}
        theirs = json.load(open(os.path.join(tmp, "eval.json"))) if q == 0 else {}
        expect("train --eval-json holds bertpre eval --json's object for the same checkpoint and rows (every field)",
               mine and mine == theirs, f"{mine}\n{theirs}\n{said[-800:]}")
        rc, out = run("train", config(steps=2), "--eval-json", os.path.join(tmp, "x.json"))
        expect("--eval-json on a config without train.eval_data: exit 1 naming it, before any step",
               rc == 1 and "eval_data" in out and "step 1/" not in out, out[-800:])

sys.exit(checks.exit_status())
