#!/usr/bin/env python3
"""The steps of tools/pretrain.sh that read or write JSON or look inside files (the standard
library only, so that any python3 runs it):

    pretrain_steps.py config PRESET_JSON OUT --vocab N --seq-length N --eval-batches N [--set F=V ...]
                      [--vocab-cap N] --write FILE [--check FILE]
        the run's config: the preset with --vocab, --seq-length, --eval-batches and every --set
        applied (values parsed as `bertpre train --set` parses them: JSON, a bare word a string)
        and absolute paths into OUT; prints the numbers the script needs as shell assignments.
        --check: the same without the data, tokenizer and metrics file, for `bertpre train --dry-run`.
    pretrain_steps.py fields CONFIG
        those numbers of a run's config.json.
    pretrain_steps.py scan OUT PATTERN STRICT LIST INPUT...
        the input files (as bertpre walks them), each read whole: binary data, text that is not
        UTF-8, damaged gzip and the run's own outputs (OUT inside an input folder) are reported
        by file with a count; binary, damaged and own files are left out. The files taken are
        written to LIST, one a line. STRICT=1 refuses any of them.
    pretrain_steps.py passes CONFIG SEQUENCES
        how many times the run reads each of its SEQUENCES training sequences (steps x global
        batch / sequences), its steps and batch, and the steps of 3 passes.
    pretrain_steps.py summary NAME CONFIG OUT CHECKPOINT TOOK BERTPRE
        the closing summary of a finished run and its one "next:" block.
"""
import codecs
import glob
import gzip
import json
import os
import re
import shlex
import sys
import zlib
from fnmatch import fnmatch

# --set fields that pretrain.sh makes itself (from its own steps), refused by name.
MADE_HERE = {"train.data": "the shards pretrain.sh writes", "train.eval_data": "the held-out shard pretrain.sh writes",
             "train.tokenizer": "the tokenizer pretrain.sh trains (OUT/spm.model)"}
# --set fields that are also options of pretrain.sh: the same setting, given either way.
SAME_AS = {"model.vocab_size": "vocab", "train.seq_length": "seq_length", "train.eval_batches": "eval_batches"}


NAME = os.environ.get("PRETRAIN_NAME", "pretrain")  # the prefix of the script's lines


def fail(message):
    print(f"{NAME}: error: {message}", file=sys.stderr)
    sys.exit(1)


def set_value(text):
    """A --set value as bertpre train reads it: JSON, or else the text as a string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def max_predictions(seq):
    """Masked positions per sequence: 15% of the tokens, rounded up as NVIDIA's recipes round
    (128: 20, 512: 80; 64: 10)."""
    return max(1, seq * 5 // 32)


def cmd_config(argv):
    preset_file, out = argv[0], argv[1]
    opts, sets, write = {"vocab": "", "seq_length": "", "eval_batches": "", "vocab_cap": "", "check": ""}, [], None
    i = 2
    while i < len(argv):
        key, value = argv[i], argv[i + 1]
        if key == "--set":
            sets.append(value)
        elif key == "--write":
            write = value
        else:
            opts[key[2:].replace("-", "_")] = value
        i += 2
    c = json.load(open(preset_file))
    given = {}  # option -> (value, how it was given)
    for name in ("vocab", "seq_length", "eval_batches"):
        if opts[name] != "":
            given[name] = (int(opts[name]), f"--{name.replace('_', '-')} {opts[name]}")
    overrides = []
    for s in sets:
        m = re.fullmatch(r"([A-Za-z_]\w*)\.([A-Za-z_]\w*)=(.*)", s, re.S)
        if not m:
            fail(f"--set '{s}': expected section.field=value (for example --set train.steps=300)")
        section, field, value = m.group(1), m.group(2), set_value(m.group(3))
        key = f"{section}.{field}"
        if key in MADE_HERE:
            fail(f"--set {key}: pretrain.sh sets {key} to {MADE_HERE[key]}; it cannot be given")
        if section not in ("model", "train"):
            fail(f"--set '{s}': no section '{section}' (the config has 'model' and 'train')")
        if key in SAME_AS:
            name = SAME_AS[key]
            if not isinstance(value, int) or isinstance(value, bool):
                fail(f"--set {key}={m.group(3)}: expected a whole number")
            if name in given and given[name][0] != value:
                fail(f"--set {key}={value} and {given[name][1]} disagree: give one of them")
            given[name] = (value, f"--set {key}={value}")
            continue
        if key in ("train.checkpoint_dir", "train.metrics_file") and isinstance(value, str) and value:
            value = os.path.abspath(value)  # as given from here: config.json runs from any directory
        overrides.append((section, field, value))
    t = c["train"]
    vocab = given.get("vocab", (c["model"]["vocab_size"],))[0]
    seq = given.get("seq_length", (t["seq_length"],))[0]
    eval_batches = given.get("eval_batches", (t.get("eval_batches", 0),))[0]
    if seq != t["seq_length"]:
        t["max_predictions_per_seq"] = max_predictions(seq)
    # Dynamic masking at another rate (--mask-prob): room for round(seq x rate) positions, as
    # bertpre train requires, unless --set gives max_predictions_per_seq itself.
    rate = next((v for s, f, v in overrides if (s, f) == ("train", "mask_prob")), None)
    if isinstance(rate, (int, float)) and not any((s, f) == ("train", "max_predictions_per_seq")
                                                  for s, f, _ in overrides):
        t["max_predictions_per_seq"] = max(t["max_predictions_per_seq"], int(round(seq * rate)))
    c["model"]["vocab_size"] = vocab
    t.update(seq_length=seq, eval_batches=eval_batches, data=f"{out}/shards/train-*.hdf5",
             eval_data=f"{out}/shards/eval-*.hdf5", tokenizer=f"{out}/spm.model",
             checkpoint_dir=f"{out}/checkpoints", metrics_file=f"{out}/metrics.jsonl")
    for section, field, value in overrides:
        c[section][field] = value
    if opts.get("vocab_cap"):
        c["model"]["vocab_size"] = int(opts["vocab_cap"])
    write_json(write, c)
    if opts["check"]:  # what `bertpre train --dry-run` can check before the data exists
        check = json.loads(json.dumps(c))
        # (whole-word masking reads the tokenizer's pieces: checked once the tokenizer exists)
        check["train"].update(data="", eval_data="", tokenizer="", whole_word_mask=0,
                              metrics_file=os.path.join(os.path.dirname(opts["check"]), "metrics.jsonl"))
        write_json(opts["check"], check)
    print_fields(c)


def write_json(path, c):
    with open(path, "w") as f:
        json.dump(c, f, indent=2)
        f.write("\n")


def print_fields(c):
    """The numbers and paths of a run's config that the script uses, as shell assignments."""
    t = c["train"]
    shell = {"vocab": c["model"]["vocab_size"], "seq": t["seq_length"], "maxpred": t["max_predictions_per_seq"],
             "eval_batches": t.get("eval_batches", 0), "steps": t["steps"], "checkpoint_dir": t["checkpoint_dir"],
             "metrics_file": t["metrics_file"], "eval_data": t["eval_data"]}
    for k, v in shell.items():
        print(f"{k}={shlex.quote(str(v))}")


def cmd_fields(argv):
    print_fields(json.load(open(argv[0])))


def walk(path, pattern, out, top=True):
    """(file, own) for each file bertpre's text reader takes (data/text.c): names starting with
    '.' left out, folders in sorted order, --pattern on the names inside folders; own: the file
    lies in OUT."""
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            if not name.startswith("."):
                yield from walk(os.path.join(path, name), pattern, out, False)
    elif os.path.isfile(path) and (top or not pattern or fnmatch(os.path.basename(path), pattern)):
        yield path, (os.path.realpath(path) + os.sep).startswith(out + os.sep)


def look(path):
    """(kind, detail) of one input file: None when it is UTF-8 text."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    bad, size, head = 0, 0, b""
    try:
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            while True:
                block = f.read(1 << 20)
                if not block:
                    break
                if len(head) < 65536:
                    head += block[:65536 - len(head)]
                    control = sum(1 for b in head if b < 32 and b not in b"\t\n\r\f\v")
                    if b"\x00" in head or control > len(head) // 10:
                        return "binary", "binary data, not text"
                size += len(block)
                bad += decoder.decode(block).count("\ufffd")
            bad += decoder.decode(b"", final=True).count("\ufffd")
    except (OSError, EOFError, zlib.error) as e:
        return "damaged", f"a damaged gzip file ({e})"
    if bad:
        return "utf8", f"not UTF-8: {bad} invalid byte sequence(s) become U+FFFD"
    return None


def cmd_scan(argv):
    out, pattern, strict, listing, inputs = os.path.realpath(argv[0]), argv[1], argv[2] == "1", argv[3], argv[4:]
    kinds = {"own": [], "binary": [], "damaged": [], "utf8": []}
    kept, total = [], 0
    for i in inputs:
        for path, own in walk(i, pattern, out):
            total += 1
            if own:
                kinds["own"].append((path, "the run's own output (--out lies inside this input)"))
                continue
            found = look(path)
            if found:
                kinds[found[0]].append((path, found[1]))
            if not found or found[0] == "utf8":
                kept.append(path)
    titles = {"own": "left out: the run's own outputs (--out lies inside an input folder)",
              "binary": "left out: binary data, not text",
              "damaged": "left out: damaged gzip files",
              "utf8": "taken, but not UTF-8 (invalid bytes become U+FFFD)"}
    flagged = sum(len(v) for v in kinds.values())
    if flagged:
        stream = sys.stderr  # stdout carries the counts for the script
        print(f"{NAME}: {'error' if strict else 'warning'}: {flagged} of the {total} input files are not plain "
              "UTF-8 text:", file=stream)
        for kind, files in kinds.items():
            if files:
                print(f"  {len(files)} {titles[kind]}:", file=stream)
                for path, detail in files[:20]:
                    print(f"    {path}: {detail}", file=stream)
                if len(files) > 20:
                    print(f"    ... and {len(files) - 20} more", file=stream)
        if strict:
            fail(f"--strict: {flagged} input file(s) are not plain UTF-8 text (listed above); nothing was changed")
    if not kept:
        fail(f"no text among the {total} input file(s) (listed above)")
    with open(listing, "w") as f:
        f.writelines(p + "\n" for p in kept)
    print(f"files={len(kept)} total={total} left_out={total - len(kept)}")


def cmd_passes(argv):
    c = json.load(open(argv[0]))
    t = c["train"]
    rows = int(argv[1])
    batch = t.get("global_batch_size") or t["micro_batch_size"]
    passes = t["steps"] * batch / rows if rows else float("inf")
    print(f"{passes:.1f} {t['steps']} {batch} {max(1, int(3 * rows / batch))}")


def shown(path):
    """A path as a command takes it from where the script was started (PRETRAIN_FROM, else the current
    directory): relative below it, else absolute."""
    rel = os.path.relpath(path, os.environ.get("PRETRAIN_FROM", os.getcwd()))
    return rel if not rel.startswith("..") else os.path.abspath(path)


def program(path):
    """A program's path as a shell runs it: with a slash (a bare name would be looked up on the PATH)."""
    p = shown(path)
    return p if "/" in p else "./" + p


def cmd_summary(argv):
    name, config, out, checkpoint, took, bertpre = argv
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    c = json.load(open(config))
    t = c["train"]
    metrics = t["metrics_file"]
    lines = [json.loads(line) for line in open(metrics, encoding="utf-8", errors="replace") if line.strip()]
    train = [line for line in lines if not line.get("eval")]
    e = json.load(open(f"{out}/eval.json"))
    print(f"\n{name}: done in {took}. Outputs:")
    print(f"  config      {config}")
    print(f"  checkpoint  {checkpoint}")
    mlm_only = t.get("objective") == "mlm"  # no NSP head: no NSP numbers
    auto = "AutoModelForMaskedLM" if mlm_only else "AutoModelForPreTraining"
    print(f"  export      {out}/export  (transformers: {auto}, AutoTokenizer)")
    print(f"  metrics     {metrics}")
    print(f"  plot        {out}/metrics.png")
    print(f"  evaluation  {out}/eval.json")
    if train:
        t = train[-1]
        last = train[-1]
        nsp = f", NSP accuracy {last['nsp_accuracy']:.3f}" if "nsp_accuracy" in last else ""
        print(f"  last steps  (step {last['step']}): MLM loss {last['mlm_loss']:.3f}, MLM accuracy "
              f"{last['mlm_accuracy']:.3f}{nsp}")
    nsp = f", NSP accuracy {e['nsp_accuracy']:.3f} (chance: 0.5)" if "nsp_accuracy" in e else ""
    print(f"  held out    ({e['sequences']} sequences): MLM accuracy {e['mlm_accuracy']:.3f} (most frequent token "
          f"alone: {e['mlm_baseline_accuracy']:.3f}){nsp}, MLM loss {e['mlm_loss']:.3f}")
    q = shlex.quote  # each path as the shell reads it back
    tools = shown(os.path.join(root, "tools"))  # holds a slash: tools/NAME
    tb = q(shown(os.path.join(out, "tensorboard")))
    print("next:")
    print(f"  {q(tools + '/finetune.py')} {q(shown(out + '/export'))} --data LABELLED   # fine-tune it: LABELLED is a "
          "folder per class or a file of LABEL<TAB>TEXT lines")
    print(f"  {q(tools + '/plot_metrics.py')} {q(shown(metrics))} --tensorboard {tb}   # for TensorBoard: "
          f"{q(program(os.path.join(root, '.venv/bin/tensorboard')))} --logdir {tb}")
    print(f"  {q(program(bertpre))} export {q(shown(checkpoint))} --out {q(shown(out + '/export-fp16'))} --dtype fp16   "
          "# a half-size export")


COMMANDS = {"config": cmd_config, "fields": cmd_fields, "scan": cmd_scan, "passes": cmd_passes, "summary": cmd_summary}
if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](sys.argv[2:])
