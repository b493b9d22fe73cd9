"""The config reference and the path rule.

  docs/CONFIG.md is `bertpre config-doc`'s output, byte for byte (both come from the field
  tables of engine/config.c); `bertpre train --help` lists every field of it with the same
  type, range and default;
  what the reference says is what the reader does: each documented integer or number range
  is enforced (a value just outside either end stops with exit 1 and a message naming the
  field and the value), each choice field refuses another word and names the documented
  choices; the model defaults equal transformers' BertConfig() (an independent
  implementation; that part is skipped without transformers); the train defaults equal
  the values a one-step run stores in its checkpoint for the fields the test leaves out;
  paths: with the config in sub/ and the run started in cwd/, relative paths of the file
  (checkpoint_dir, metrics_file, a comma-separated data list, tokenizer) are taken relative
  to sub/ and those given with --set relative to cwd/; errors print the resolved path;
  numbers: every real in export's config.json, the checkpoint's state.json and the metrics
  lines is Python's repr of its value (the shortest text that reads back exactly: 0.05).

usage: test_config_doc.py BERTPRE CONFIG.md
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import checks
from checks import expect

bertpre, committed = os.path.abspath(sys.argv[1]), sys.argv[2]
MODEL = {"vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
         "intermediate_size": 16, "max_position_embeddings": 32}
# The modernbert section's fields are checked on a ModernBertConfig (model_type modernbert).
MODERN = {"model_type": "modernbert", "vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 32, "pad_token_id": 0,
          "cls_token_id": 1, "sep_token_id": 2, "bos_token_id": 1, "eos_token_id": 2}
TRAIN = {"micro_batch_size": 2, "seq_length": 16, "max_predictions_per_seq": 3, "steps": 1, "backend": "cpu"}


def run(*args, cwd=None):
    p = subprocess.run([bertpre, *args], capture_output=True, text=True, cwd=cwd)
    return p.returncode, p.stdout + p.stderr


rc, doc = run("config-doc")
with open(committed) as f:
    expect("docs/CONFIG.md is the output of `bertpre config-doc` (regenerate: build/bertpre config-doc > "
           "docs/CONFIG.md)", rc == 0 and f.read() == doc, doc if rc else "the texts differ")

# The tables: section -> [(field, type, range, default)]
rows, section = {}, None
for line in doc.splitlines():
    m = re.match(r"## (\w+)$", line)
    if m:
        section = m.group(1)
        rows[section] = []
    cells = [c.strip() for c in line.strip("|").split("|")] if line.startswith("| `") else None
    if section and cells:
        rows[section].append((cells[0].strip("`"), cells[1], cells[2].replace("`", "").replace(", ", "|"), cells[3]))
expect("the reference has model and train tables", len(rows.get("model", [])) >= 12 and len(rows.get("train", [])) >= 40,
       rows)

rc, helptext = run("train", "--help")
flat = re.sub(r"\s+", " ", helptext)
missing = [f"{s}.{n}" for s, table in rows.items() for n, t, r, d in table
           if f"{n} ({t}{' ' + r if r else ''}; default {d})" not in flat]
expect("train --help lists every field with its type, range or choices and default", rc == 0 and not missing,
       missing or helptext)

with tempfile.TemporaryDirectory() as tmp:
    def config(model=None, name="run.json", **train):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            json.dump({"model": {**MODEL, **(model or {})}, "train": {**TRAIN, **train}}, f)
        return path

    # Ranges and choices, each end of each documented range.
    wrong = []
    for s, table in rows.items():
        for name, kind, rng, _ in table:
            values = []
            if kind in ("integer", "number") and rng:
                lo, hi = (rng[3:], None) if rng.startswith(">= ") else rng.split("..")
                lo, hi = float(lo), (float(hi) if hi else None)
                if kind == "integer":
                    values = [int(lo) - 1] + ([int(hi) + 1] if hi is not None else [])
                else:
                    values = [lo - max(abs(lo) * 0.5, 1e-9)] + ([hi * 1.5 + 1] if hi is not None else [])
            elif kind == "choice":
                values = ["no-such-choice"]
            elif kind == "boolean" and rng:  # one value only ("true only"): the other is refused
                values = [rng != "true only"]
            for v in values:
                path = (config(**{name: v}) if s == "train" else config({name: v}) if s == "model"
                        else config({**MODERN, name: v}, name="modern.json"))
                if s == "modernbert":  # a ModernBERT config holds no BertConfig field
                    with open(path) as f:
                        whole = json.load(f)
                    whole["model"] = {**MODERN, name: v}
                    with open(path, "w") as f:
                        json.dump(whole, f)
                rc, out = run("train", path, "--dry-run")
                text = json.dumps(v)  # shortest round-trip form, as bertpre prints numbers
                ok = rc == 1 and f"'{name}' = {text}" in out
                if kind == "choice" and name == "model_type":  # the type chooses the table: both named
                    ok = ok and "allowed: bert|modernbert" in out
                elif kind == "choice":
                    ok = ok and f"allowed: {rng}" in out
                elif kind == "boolean":
                    ok = ok and "not supported" in out
                elif ok:
                    ok = "out of range" in out
                if not ok:
                    wrong.append(f"{s}.{name} = {text}: rc {rc}: {out.strip()[-300:]}")
    expect("every documented range and choice list is the one the reader enforces", not wrong, "\n".join(wrong))

    # Model defaults against transformers' BertConfig.
    try:
        import transformers
        reference = transformers.BertConfig()
        diff = [f"{n}: doc {d}, BertConfig {getattr(reference, n)}" for n, kind, _, d in rows["model"]
                if hasattr(reference, n) and kind != "noted" and (str(getattr(reference, n)) != d if kind == "choice"
                                              else str(getattr(reference, n)).lower() != d if kind == "boolean"
                                              else float(getattr(reference, n)) != float(d))]
        expect("model defaults are transformers' BertConfig() defaults", not diff, diff)
    except ImportError:
        print("note: transformers is not installed; the model defaults are not compared with BertConfig()")

    # Train defaults: the values a run stores in its checkpoint for fields the config leaves out.
    ckpt = os.path.join(tmp, "defaults-ckpt")
    metrics = os.path.join(tmp, "defaults.jsonl")
    rc, out = run("train", config({"initializer_range": 0.05}, checkpoint_dir=ckpt, metrics_file=metrics))
    stored = {}
    if rc == 0:
        step = sorted(d for d in os.listdir(ckpt) if d.startswith("step-"))[-1]
        with open(os.path.join(ckpt, step, "state.json")) as f:
            stored = json.load(f)["config"]["train"]
    diff = []
    for name, kind, _, d in rows["train"]:
        if name in TRAIN or name in ("checkpoint_dir", "metrics_file") or name not in stored or d == "auto":
            continue  # "auto" is resolved before the checkpoint stores it
        if kind in ("integer", "number") and re.fullmatch(r"[-+0-9.e]+", d):
            if float(stored[name]) != float(d):
                diff.append(f"{name}: doc {d}, run {stored[name]}")
        elif kind == "choice" and stored[name] != d:
            diff.append(f"{name}: doc {d}, run {stored[name]}")
        elif kind == "path" and stored[name] != "":
            diff.append(f"{name}: doc none, run {stored[name]!r}")
    expect("train defaults of the reference are those a run uses", rc == 0 and len(stored) > 30 and not diff,
           diff or out)

    # Numbers in written JSON: each real token is Python's repr of its value (the shortest text
    # that reads back exactly), e.g. 0.05 and not 0.050000000000000003.
    export = os.path.join(tmp, "export")
    rc, out = run("export", ckpt, "--out", export)
    long_reals = []
    written = [os.path.join(export, "config.json")] + [os.path.join(ckpt, d, "state.json")
                                                        for d in os.listdir(ckpt) if d.startswith("step-")]
    for path in written + [metrics]:
        with open(path) as f:
            for text in ([f.read()] if path != metrics else f.readlines()):  # metrics: one object a line
                json.loads(text, parse_float=lambda t: t == repr(float(t)) or long_reals.append(f"{path}: {t}"))
    with open(written[0]) as f:
        exported = json.load(f)
    expect("export's config.json, the checkpoint's state.json and the metrics write every real in its shortest "
           "exact form",
           rc == 0 and not long_reals and exported.get("initializer_range") == 0.05, long_reals or out)

    # Paths: the config in sub/, the run started in cwd/.
    sub, cwd = os.path.join(tmp, "sub"), os.path.join(tmp, "cwd")
    os.makedirs(sub)
    os.makedirs(cwd)
    cfg = os.path.join("..", "sub", "run.json")
    with open(os.path.join(sub, "run.json"), "w") as f:
        json.dump({"model": MODEL, "train": {**TRAIN, "steps": 2, "log_every": 1, "checkpoint_dir": "ckpt",
                                             "metrics_file": "logs/m.jsonl"}}, f)
    os.makedirs(os.path.join(sub, "logs"))
    rc, out = run("train", cfg, cwd=cwd)
    expect("checkpoint_dir and metrics_file of the file are relative to the config's directory",
           rc == 0 and os.path.isdir(os.path.join(sub, "ckpt")) and os.path.isfile(os.path.join(sub, "logs", "m.jsonl"))
           and not os.path.exists(os.path.join(cwd, "ckpt")) and "../sub/ckpt/step-" in out, out)
    rc, out = run("train", cfg, "--set", "train.checkpoint_dir=here", "--set", "train.metrics_file=m.jsonl", cwd=cwd)
    expect("checkpoint_dir and metrics_file given with --set are relative to the current directory",
           rc == 0 and os.path.isdir(os.path.join(cwd, "here")) and os.path.isfile(os.path.join(cwd, "m.jsonl")), out)
    with open(os.path.join(sub, "run.json"), "w") as f:
        json.dump({"model": MODEL, "train": {**TRAIN, "tokenizer": "tok/spm.model"}}, f)
    rc, out = run("train", cfg, "--dry-run", cwd=cwd)
    expect("a missing tokenizer of the file: the error names the resolved path and the rule",
           rc == 1 and "'../sub/tok/spm.model': no such file" in out and "relative to its directory" in out, out)
    rc, out = run("train", cfg, "--dry-run", "--set", "train.tokenizer=tok/x.model", cwd=cwd)
    expect("a missing tokenizer of --set: the error names it relative to the current directory",
           rc == 1 and "'tok/x.model': no such file" in out, out)
    absolute = os.path.join(tmp, "abs.hdf5")
    with open(os.path.join(sub, "run.json"), "w") as f:
        json.dump({"model": MODEL, "train": {**TRAIN, "data": f"shards/a.hdf5,{absolute}"}}, f)
    rc, out = run("train", cfg, "--dry-run", cwd=cwd)
    expect("a missing shard of the file's data list: the error names the resolved path",
           rc == 1 and "../sub/shards/a.hdf5" in out, out)
    with open(os.path.join(sub, "run.json"), "w") as f:
        json.dump({"model": MODEL, "train": {**TRAIN, "data": absolute}}, f)
    rc, out = run("train", cfg, "--dry-run", cwd=cwd)
    expect("an absolute path of the file is taken as it is", rc == 1 and f"error: {absolute}: no such" in out, out)

sys.exit(checks.exit_status())
