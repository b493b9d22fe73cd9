#!/usr/bin/env python3
"""Pretrains a BERT on your own text, or continues pretraining a transformers BERT on it, in one
command (tools/pretrain.sh runs this program):

  tools/pretrain.sh TEXT [TEXT ...] [--out DIR] [--preset tiny|small|base] [--arch bert|modernbert] [options]
  tools/pretrain.sh TEXT [TEXT ...] --from HF_DIR [--out DIR] [options]
  tools/pretrain.sh --resume DIR      continues a stopped run of DIR to its end

From scratch: a SentencePiece tokenizer trained on the text (DIR/spm.model) and the preset's
model (configs/pretrain-PRESET.json). With --arch modernbert, a ModernBERT of the preset's
widths and depth instead (GeGLU of 2/3 the preset's intermediate size, so the FFN holds as many
weights; local attention of 128 tokens with every third layer global; no position table or
biases) trained ModernBERT's way: MLM only on packed rows, 30% masked afresh each epoch,
StableAdamW (betas 0.9 / 0.98, eps 1e-6, decoupled weight decay 1e-5) on the warmup-stable-
decay schedule (the preset's warmup and peak rate, 1-sqrt decay over the last 10%). With --from HF_DIR (a transformers BERT directory:
config.json, model.safetensors, and its WordPiece tokenizer as vocab.txt, with
tokenizer_config.json for the casing, or as tokenizer.json alone; or a ModernBERT directory
with its byte-level BPE tokenizer.json, continued MLM-only at 30% masking): its weights (bertpre import ->
DIR/start), its tokenizer (DIR/tokenizer/ when taken out of tokenizer.json) and
configs/continue-base.json's recipe (AdamW, 256 sequences of 128 tokens, peak learning rate
5e-5 with 6% warmup and linear decay over 12,500 steps: half of BERT-base's pretraining rate,
the schedule of Gururangan et al. 2020's domain-adaptive pretraining); DIR/eval-start.json
holds the starting model's numbers on the held-out rows.
Then, on both paths: train shards and a held-out eval shard (bertpre prep -> DIR/shards),
DIR/config.json (the preset with every option and --set, absolute paths), training
(bertpre train, which evaluates the checkpoint on the held-out shard -> DIR/eval.json), the
export for transformers (DIR/export), the metrics plot (DIR/metrics.png) and a summary.

Nothing is lost: every option is checked (the config by `bertpre train --dry-run`, an --from
model by importing it aside) before anything in DIR changes. DIR must be new, empty or a run of
this program: a folder holding other files, an input or HF_DIR is refused, naming them. A
finished run's outputs in DIR then move to DIR/previous, are put back when the new run fails or
is stopped before training, and are removed once it has finished. One run at a time uses DIR (a
lock; a second run is refused, naming the process that holds it). Ctrl-C, SIGTERM or SIGHUP
stops training with a checkpoint (forwarded to bertpre train, waited for), and the script ends
naming the command that continues it; before training it stops the stage at once and names the
command that starts it again. Ctrl-\ (SIGQUIT) is passed on too, and when this program is
killed (SIGKILL) its bertpre gets SIGTERM. Overlapping inputs (a folder and a file in it) are
read once. --resume of a run made elsewhere (a copied or moved DIR) is refused, naming where.
Environment: BERTPRE (the bertpre binary, default build/bertpre), PRETRAIN_NAME (the prefix of
the progress lines, default pretrain), PRETRAIN_FROM (the directory the printed commands are
relative to).
"""
import argparse
import codecs
import ctypes
import fcntl
import glob
import gzip
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib

from common import ROOT, Messages, alive, bertpre_binary, newest_checkpoint, program, shown, walk_inputs, write_json

M = Messages(os.environ.get("PRETRAIN_NAME", "pretrain"))
ME = os.path.join(ROOT, "tools", "pretrain.sh")
# A run's outputs in DIR (checkpoints and metrics put elsewhere by --set stay where they are).
OUTPUTS = ("shards", "checkpoints", "export", "metrics.png", "eval.json", "eval-start.json", "config.json",
           "spm.model", "spm.vocab", "metrics.jsonl", "tensorboard", "wandb", "wandb.json", "eval-shards", "start",
           "tokenizer",
           ".pretrain-command")
# --set fields that the pipeline makes itself, refused by name.
MADE_HERE = {"train.data": "the shards it writes", "train.eval_data": "the held-out shard it writes",
             "train.tokenizer": "the run's tokenizer (DIR/spm.model, or HF_DIR's)"}
# --set fields that are also options: the same setting, given either way.
SAME_AS = {"model.vocab_size": "vocab", "train.seq_length": "seq_length", "train.eval_batches": "eval_batches",
           "train.objective": "objective", "train.mask_prob": "mask_prob"}
PACKINGS = ("pairs", "full-sentences", "doc-sentences", "contiguous")
WANDB_TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wandb_log.py")
SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP", signal.SIGQUIT: "Ctrl-\\"}
LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


class Stopped(Exception):
    """A signal ended a stage before training."""


class State:
    child = None         # the bertpre process running now
    signal = None        # the first stop signal received
    training = False     # bertpre train has started: the run before stays set aside
    lock_fd = None       # held by this program and every process it starts
    out = None
    created = False      # DIR was made by this run (removed again if it fails before any work)
    resumed = False      # a --resume run
    set_aside = None     # "moved" (the run before is in previous/), "dropped" (an unfinished one) or None
    wandb = None         # --wandb: {"project", "offline", "id"} (DIR/wandb.json), or None
    started = time.time()


S = State()


def elapsed():
    return f"{time.time() - S.started:.0f} s"


def on_signal(signum, frame):
    """Forwarded to the running bertpre (bertpre train checkpoints and stops; the other commands
    end); with none running, the stage in this program ends at once."""
    first = S.signal is None
    S.signal = S.signal or signum
    if S.child is not None and S.child.poll() is None:
        try:
            S.child.send_signal(signum)
        except ProcessLookupError:
            pass
    elif first:
        raise Stopped()


class signals_held:
    """Stop signals wait (and then take effect) until the block has ended."""

    def __enter__(self):
        signal.pthread_sigmask(signal.SIG_BLOCK, set(SIGNALS))

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(SIGNALS))


def child_setup(parent):
    """In the child before exec: the stop signals unblocked, and SIGTERM when this program dies (a
    SIGKILL to it leaves no bertpre running on, holding the lock: bertpre train checkpoints and
    ends), also when it died before this line."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(SIGNALS))
    prctl = getattr(LIBC, "prctl", None)  # Linux's; elsewhere the child outlives a killed script
    if prctl:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def run(cmd, *, training=False, capture=None):
    """Runs cmd in its own session (a terminal's Ctrl-C reaches it once, through on_signal) with the
    lock's descriptor; returns (status, stdout, stderr). capture: "out", "err" or "both" are kept;
    "progress": stderr kept but its progress lines (bertpre's "tokenizer: ...") shown as they come.
    A signal ends a stage other than training with Stopped."""
    sys.stdout.flush()
    with signals_held():  # no signal between the start and S.child; the child unblocks them
        S.child = subprocess.Popen(
            [str(c) for c in cmd], start_new_session=True, pass_fds=(S.lock_fd,) if S.lock_fd else (), text=True,
            errors="replace", stdout=subprocess.PIPE if capture in ("out", "both") else None,
            stderr=subprocess.PIPE if capture in ("err", "both", "progress") else None,
            preexec_fn=lambda parent=os.getpid(): child_setup(parent))
    try:
        if capture == "progress":
            kept = []
            for line in S.child.stderr:
                if line.startswith("tokenizer: "):
                    print(line, end="", file=sys.stderr, flush=True)
                else:
                    kept.append(line)
            out, err = None, "".join(kept)
        else:
            out, err = S.child.communicate()
    finally:
        status, S.child = S.child.wait(), None
    if S.signal and not training:
        raise Stopped()
    return status, out or "", err or ""


def must(cmd, what, **kw):
    """run(cmd), exiting when it fails; what: the stage, for the message."""
    status, out, err = run(cmd, **kw)
    if status != 0:
        sys.stderr.write(err)
        M.fail(f"{what} failed (above: {os.path.basename(str(cmd[0]))} {cmd[1]} exited {status})")
    return out, err


# ----------------------------------------------------------------------------------------------
# Options: one table for both paths.

def whole(least):
    def parse(text):
        if not re.fullmatch(r"\d+", text) or int(text) < least:
            raise argparse.ArgumentTypeError(f"'{text}': expected a whole number" + (f" >= {least}" if least else ""))
        return int(text)
    return parse


def share(top, inclusive, what):
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            v = float("nan")
        if not (0 < v < top or (inclusive and v == top)):
            raise argparse.ArgumentTypeError(f"'{text}': expected {what}")
        return v
    return parse


class Parser(argparse.ArgumentParser):
    def error(self, message):
        M.fail(f"{message} (tools/pretrain.sh --help lists the options); nothing was changed")


def parser():
    p = Parser(prog="tools/pretrain.sh", usage=argparse.SUPPRESS, description=__doc__, allow_abbrev=False,
               formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, max_help_position=28, width=100))
    p.add_argument("inputs", nargs="*", metavar="TEXT", help="files or folders of text (plain, gzip or zstd)")
    o = p
    o.add_argument("--out", metavar="DIR", default="pretrain-out", help="the run's folder: new, empty or an "
                   "earlier run's (default pretrain-out)")
    o.add_argument("--from", dest="source", metavar="HF_DIR", help="continue pretraining this transformers BERT")
    o.add_argument("--resume", metavar="DIR", help="continue the stopped run in DIR (no other option)")
    o.add_argument("--preset", choices=("tiny", "small", "base"),
                   help="from scratch: tiny (2 layers, hidden 64, seq 64, 1,200 steps of 32: minutes on a CPU; "
                   "the demo's), small (4 layers, hidden 256, seq 128, 10,000 steps of 128: one GPU) or base "
                   "(BERT-base, seq 128, 100,000 steps of 256: GPUs); default tiny")
    o.add_argument("--arch", choices=("bert", "modernbert"), default="bert",
                   help="from scratch: the preset's BERT (default), or a ModernBERT of its size trained ModernBERT's "
                   "way (model_type modernbert: MLM only, 30%% masked, StableAdamW, WSD)")
    o.add_argument("--vocab", type=whole(5), metavar="N", help="from scratch: tokenizer pieces = the model's "
                   "vocab_size (default the preset's; lowered, said, to the most the text gives)")
    o.add_argument("--seq-length", type=whole(8), metavar="N", help="tokens per row, for the shards and the "
                   "model (default the preset's; a new model gets at least N positions); 15%% of them masked")
    o.add_argument("--format", choices=("text", "lines", "jsonl", "parquet", "arrow"), default="text",
                   help="text: running text split into sentences (default); lines: a sentence per line, blank "
                   "lines between documents; jsonl, parquet: a document per row (--text-field); arrow: the same of "
                   "a datasets save_to_disk folder (one split's)")
    o.add_argument("--doc-per", choices=("file", "block"), help="text: a document per file or per blank-line "
                   "block (default file, or block when the files are too few to hold out two)")
    o.add_argument("--pattern", metavar="GLOB", help="files to take inside folders (default all)")
    o.add_argument("--text-field", metavar="NAME", help="jsonl, parquet, arrow: the text's field (prep's default)")
    o.add_argument("--bad-lines", choices=("stop", "skip"), help="jsonl: a line that is not JSON or lacks the field "
                   "(parquet, arrow: a row whose text is null) stops the run naming file and line (default), or is skipped "
                   "with a warning (prep --bad-lines)")
    o.add_argument("--eval-fraction", type=share(0.5, True, "a share above 0 and at most 0.5 of the documents"),
                   default=0.05, metavar="F", help="documents held out for evaluation (default 0.05)")
    o.add_argument("--eval-text", action="append", metavar="PATH", help="held-out text of your own (files or "
                   "folders, read as the inputs are; repeatable): evaluated instead of a share of the inputs")
    o.add_argument("--eval-batches", type=whole(0), metavar="N",
                   help="micro-batches each evaluation reads (default the preset's; 0 = all)")
    o.add_argument("--shards", type=whole(1), default=4, metavar="N", help="train shards (default 4)")
    o.add_argument("--objective", choices=("mlm+nsp", "mlm"), help="masked LM and next-sentence prediction, or "
                   "the masked LM alone (train.objective; default mlm for a packing other than pairs or an HF_DIR "
                   "that is a BertForMaskedLM, else mlm+nsp)")
    o.add_argument("--packing", choices=PACKINGS, help="the rows (prep --packing): NSP pairs (default with "
                   "mlm+nsp) or MLM-only running text (full-sentences, RoBERTa's, the default with mlm)")
    o.add_argument("--separate-documents", action=argparse.BooleanOptionalAction, default=None,
                   help="full-sentences, contiguous: each document of a row its own [CLS] ... [SEP], attention "
                   "kept inside it and positions restarted (prep --separate-documents, ModernBERT's packing; "
                   "default on with a ModernBERT, off with a BERT)")
    o.add_argument("--mask-prob", type=share(1, False, "a share above 0 and below 1"), metavar="F",
                   help="mask a share F of each row afresh every epoch (train.dynamic_masking; 0.3 as MosaicBERT); "
                   "default prep's 15%%, stored; the held-out rows keep 15%% either way")
    o.add_argument("--whole-word-mask", action="store_true", help="mask whole words (prep and train)")
    o.add_argument("--wandb", metavar="PROJECT", help="also log the metrics to this Weights & Biases project as "
                   "training goes (tools/wandb_log.py; needs the wandb package: .venv/bin/pip install wandb)")
    o.add_argument("--wandb-offline", action="store_true", help="with --wandb: write the W&B run under DIR/wandb "
                   "for `wandb sync` later, with no network (also WANDB_MODE=offline)")
    o.add_argument("--strict", action="store_true", help="binary or non-UTF-8 input files, and text that gives "
                   "poor instances, are errors (else reported, binary files left out)")
    o.add_argument("--set", action="append", default=[], metavar="section.field=value",
                   help="any config field (repeatable), written into DIR/config.json; train.checkpoint_dir and "
                   "train.metrics_file may point elsewhere")
    return p


def parse_sets(a):
    """--set: (section, field, value) overrides, with the options they repeat merged or refused."""
    overrides = []
    for s in a.set:
        m = re.fullmatch(r"([A-Za-z_]\w*)\.([A-Za-z_]\w*)=(.*)", s, re.S)
        if not m:
            M.fail(f"--set '{s}': expected section.field=value (for example --set train.steps=300)")
        section, field, text = m.groups()
        key = f"{section}.{field}"
        try:
            value = json.loads(text)  # as bertpre train --set reads it: JSON, or else a string
        except ValueError:
            value = text
        if section not in ("model", "train"):
            M.fail(f"--set '{s}': no section '{section}' (the config has 'model' and 'train')")
        if key in MADE_HERE:
            M.fail(f"--set {key}: the pipeline sets {key} to {MADE_HERE[key]}; it cannot be given")
        if key == "train.tensorboard_dir" and value != "":  # "" turns the live events off
            if not isinstance(value, str):
                M.fail(f"--set {key}={text}: give a folder for the TensorBoard events, or \"\" for none")
            value = os.path.abspath(value)
        if key in ("train.checkpoint_dir", "train.metrics_file"):
            if not isinstance(value, str) or not value:
                M.fail(f"--set {key}={text}: the pipeline evaluates, exports and plots from it: give a path, or "
                       "leave it out (DIR/checkpoints, DIR/metrics.jsonl)")
            value = os.path.abspath(value)  # as given from here: config.json is read from anywhere
        if key in SAME_AS:
            name = SAME_AS[key]
            mine = getattr(a, name)
            if mine is not None and mine != value:
                M.fail(f"--set {key}={text} and --{name.replace('_', '-')} {mine} disagree: give one of them")
            setattr(a, name, value)
            if name != "objective" and name != "mask_prob":
                continue
        overrides.append((section, field, value))
    return overrides


# ----------------------------------------------------------------------------------------------
# The inputs: what is not text is reported (and binary files left out) before the tokenizer reads them.

def look(path):
    """(kind, detail) of one input file: None when it is UTF-8 text."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    bad, head = 0, b""
    try:
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            while block := f.read(1 << 20):
                if len(head) < 65536:
                    head += block[:65536 - len(head)]
                    control = sum(1 for b in head if b < 32 and b not in b"\t\n\r\f\v")
                    if b"\x00" in head or control > len(head) // 10:
                        if head.startswith(b"PAR1"):  # a Parquet file given without --format parquet
                            return "binary", "a Parquet file, not text: --format parquet reads its text column"
                        if head.startswith((b"ARROW1", b"\xff\xff\xff\xff")):  # Arrow IPC (datasets' .arrow)
                            return "binary", "an Arrow IPC file, not text: --format arrow reads its text column"
                        return "binary", "binary data, not text"
                bad += decoder.decode(block).count("\ufffd")
            bad += decoder.decode(b"", final=True).count("\ufffd")
    except (OSError, EOFError, zlib.error) as e:
        return "damaged", f"a damaged gzip file ({e})"
    return ("utf8", f"not UTF-8: {bad} invalid byte sequence(s) become U+FFFD") if bad else None


def progress_every():
    """BERTPRE_PROGRESS_EVERY, whole seconds between progress lines, as bertpre reads it (default 10)."""
    text = os.environ.get("BERTPRE_PROGRESS_EVERY") or "10"
    if not re.fullmatch(r"\d{1,7}", text) or int(text) > 1000000:
        M.fail(f"environment variable BERTPRE_PROGRESS_EVERY = '{text}': expected whole seconds between progress "
               "lines (0 to 1000000; 0 prints every line); nothing was changed")
    return int(text)


def scan(inputs, pattern, out, strict):
    """The text files taken, each read whole; the others reported by file with a count."""
    kinds = {"own": [], "binary": [], "damaged": [], "utf8": []}
    files, seen, repeats = [], {}, []
    for path in (path for i in inputs for path in walk_inputs(i, pattern)):
        st = os.stat(path)
        first = seen.setdefault((st.st_dev, st.st_ino), path)
        if first is path:
            files.append((path, st.st_size))
        else:
            repeats.append((path, first))
    if repeats:  # overlapping inputs (a folder twice, a folder and a file in it, a link): read once
        lines = [f"{M.name}: warning: {len(repeats)} input file(s) are named more than once by the inputs given "
                 "(they overlap); each is read once:"]
        lines += [f"    {path}: " + (f"the file {first} again" if path != first else "named twice")
                  for path, first in repeats[:20]]
        if len(repeats) > 20:
            lines.append(f"    ... and {len(repeats) - 20} more")
        sys.stdout.flush()
        print("\n".join(lines), file=sys.stderr, flush=True)
    total, size, done, kept = len(files), sum(n for _, n in files), 0, []
    started = said = time.time()
    every = progress_every()
    for k, (path, n) in enumerate(files):
        own = (os.path.realpath(path) + os.sep).startswith(out + os.sep)
        now = time.time()
        if now - said >= every and done:  # a long look says how far it is
            left = (now - started) * (size - done) / done
            M.say(f"checking the inputs: {k} of {total} files, {done / 1e6:.1f} of {size / 1e6:.1f} MB, about "
                  f"{int(left) // 60}:{int(left) % 60:02d} left")
            said = now
        done += n
        found = ("own", "the run's own output (--out lies inside this input)") if own else look(path)
        if found:
            kinds[found[0]].append((path, found[1]))
        if not found or found[0] == "utf8":
            kept.append(path)
    titles = {"own": "left out: the run's own outputs (--out lies inside an input folder)",
              "binary": "left out: binary data, not text", "damaged": "left out: damaged gzip files",
              "utf8": "taken, but not UTF-8 (invalid bytes become U+FFFD)"}
    flagged = sum(len(v) for v in kinds.values())
    if flagged:
        lines = [f"{M.name}: {'error' if strict else 'warning'}: {flagged} of the {total} input files are not plain "
                 "UTF-8 text:"]
        for kind, files in kinds.items():
            if files:
                lines.append(f"  {len(files)} {titles[kind]}:")
                lines += [f"    {path}: {detail}" for path, detail in files[:20]]
                if len(files) > 20:
                    lines.append(f"    ... and {len(files) - 20} more")
        sys.stdout.flush()
        print("\n".join(lines), file=sys.stderr, flush=True)
        if strict:
            M.fail(f"--strict: {flagged} input file(s) are not plain UTF-8 text (listed above); nothing was changed")
    if not kept:
        M.fail(f"no text among the {total} input file(s) (listed above); nothing was changed")
    return kept, total


# ----------------------------------------------------------------------------------------------
# The model to continue (--from): checked and its tokenizer taken before anything in DIR changes.

def read_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        M.fail(f"{path}: cannot be read as JSON ({e}): {what}; nothing was changed")
    if not isinstance(value, dict):
        M.fail(f"{path}: a JSON {type(value).__name__}, not an object: {what}; nothing was changed")
    return value


def check_source(src):
    """HF_DIR's files and its config (an object), before the lock: a BERT, or a ModernBERT with
    its byte-level BPE tokenizer.json."""
    if not os.path.isdir(src):
        M.fail(f"--from '{src}': not a directory")
    if not os.path.isfile(os.path.join(src, "config.json")):
        M.fail(f"--from '{src}': no config.json (a transformers BERT directory has one); nothing was changed")
    if not any(os.path.isfile(os.path.join(src, f)) for f in ("model.safetensors", "model.safetensors.index.json")):
        M.fail(f"--from '{src}': no model.safetensors (nor the model.safetensors.index.json of a sharded one): "
               "convert a pytorch_model.bin with transformers' save_pretrained; nothing was changed")
    if not any(os.path.isfile(os.path.join(src, f)) for f in ("vocab.txt", "tokenizer.json")):
        M.fail(f"--from '{src}': no vocab.txt and no tokenizer.json: the model's tokenizer is needed")
    # A model that is not a BERT (model_type, architectures) is refused by the import made aside.
    return read_json(os.path.join(src, "config.json"), "the model's configuration")


def take_tokenizer(src, dest):
    """HF_DIR's vocab.txt, or the WordPiece vocabulary of its tokenizer.json written to dest as
    vocab.txt and tokenizer_config.json with the casing transformers' AutoTokenizer gives the
    directory (tokenizer_config.json's do_lower_case, true when absent, and strip_accents over
    tokenizer.json's normalizer, unless it names PreTrainedTokenizerFast). Returns the vocab.txt."""
    if os.path.isfile(os.path.join(src, "vocab.txt")):
        return os.path.join(src, "vocab.txt")
    path, config_path = os.path.join(src, "tokenizer.json"), os.path.join(src, "tokenizer_config.json")
    t = read_json(path, "the model's tokenizer")
    model = t.get("model") or {}
    if model.get("type") == "BPE":  # a byte-level BPE (ModernBERT's): bertpre reads the file itself
        return path
    if model.get("type") != "WordPiece":
        M.fail(f"{path}: model type {model.get('type')!r}, not WordPiece or BPE: not a BERT or ModernBERT tokenizer")
    vocab = model.get("vocab") or {}
    ids = sorted(vocab.values())
    if ids != list(range(len(ids))) or not ids:
        M.fail(f"{path}: the WordPiece ids are not 0..{len(ids) - 1} without gaps")
    norm = t.get("normalizer") or {}
    if norm.get("type") != "BertNormalizer":
        M.fail(f"{path}: normalizer {norm.get('type')!r}, not BertNormalizer: not BERT's text rules")
    lower, strip = bool(norm.get("lowercase", True)), norm.get("strip_accents")
    config = read_json(config_path, "the tokenizer's settings") if os.path.exists(config_path) else {}
    if config.get("tokenizer_class") != "PreTrainedTokenizerFast":
        if bool(config.get("do_lower_case", True)) != lower:
            said = (f"do_lower_case {str(config['do_lower_case']).lower()}" if "do_lower_case" in config
                    else "no do_lower_case" if config else "nothing (it is absent)")
            M.warn(f"{path} says lowercase {str(lower).lower()} but {config_path} says {said}: the text is "
                   f"{'lower-cased' if not lower else 'kept cased'}, as transformers' AutoTokenizer reads the "
                   "directory (tokenizer_config.json's do_lower_case wins, true when absent); set do_lower_case there "
                   "if the model was trained otherwise")
        lower, strip = bool(config.get("do_lower_case", True)), config.get("strip_accents")
    os.makedirs(dest)
    with open(os.path.join(dest, "vocab.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(tok + "\n" for tok, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    write_json(os.path.join(dest, "tokenizer_config.json"),
               {"do_lower_case": lower, "strip_accents": strip, "tokenizer_class": "BertTokenizer"})
    M.say(f"took the WordPiece vocabulary of {path} ({len(ids)} tokens, do_lower_case {str(lower).lower()})")
    return os.path.join(dest, "vocab.txt")


# ----------------------------------------------------------------------------------------------
# DIR: its lock, the run before it, the config.

def holders(path):
    """(pid, command line) of the processes of this host that have the file open (from /proc)."""
    found, st = [], os.stat(path)
    for pid in sorted((int(p) for p in os.listdir("/proc") if p.isdigit()), key=int):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                f = os.stat(f"/proc/{pid}/fd/{fd}")
                if (f.st_dev, f.st_ino) == (st.st_dev, st.st_ino):
                    with open(f"/proc/{pid}/cmdline", "rb") as c:
                        found.append((pid, " ".join(a.decode(errors="replace") for a in c.read().split(b"\0") if a)))
                    break
        except OSError:
            continue
    return found


def own_run(out):
    """Whether DIR holds a run of this program: the lock file every run leaves there, or a config
    whose train.checkpoint_dir is DIR/checkpoints."""
    if os.path.isfile(os.path.join(out, ".pretrain-lock")):
        return True
    try:
        with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
            t = json.load(f).get("train")
        return isinstance(t, dict) and t.get("checkpoint_dir") == os.path.join(out, "checkpoints")
    except (OSError, ValueError, AttributeError):
        return False


def check_out(out, given, inputs, src):
    """DIR: never an input, HF_DIR or a folder holding them among the names the run writes; an
    existing folder only when it is empty or a run of this program (its outputs are set aside)."""
    taken = {os.path.join(out, name) for name in OUTPUTS + ("previous",)}
    for option, path in [("input", i) for i in inputs] + ([("--from", src)] if src else []):
        real = os.path.realpath(path)
        under = next((t for t in taken if (real + os.sep).startswith(t + os.sep)), None)
        if real == out:
            what = (f"the --from directory {path}, the model to continue: the run would write its own config.json "
                    "and tokenizer over the model's" if option == "--from" else
                    f"the input {path}: the run would write its outputs among the text it reads")
            M.fail(f"--out {given} is {what}; choose another --out; nothing was changed")
        if under:
            M.fail(f"{option} {path} lies inside {shown(under)}, which a run in --out {given} sets aside and removes; "
                   "copy it elsewhere or choose another --out; nothing was changed")
    if os.path.isdir(out) and not own_run(out):
        names = sorted(os.listdir(out))
        if names:
            listed = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
            M.fail(f"--out {given} is a folder that holds files and is not a run of tools/pretrain.sh ({listed}): "
                   "a run writes config.json, export/, tokenizer/ and more there and removes what it replaces; give "
                   "a new or empty folder; nothing was changed")


def lock(out):
    """One run per DIR: a lock held by this program and every process it starts until they end."""
    S.created = not os.path.exists(out)
    path = os.path.join(out, ".pretrain-lock")
    try:
        os.makedirs(out, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        M.fail(f"--out {shown(out)}: cannot be written ({e.strerror}); nothing was changed")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 200).decode(errors="replace").split("\n")[0]
        pid = re.search(r"host (.*), pid (\d+),", holder)
        if pid and pid.group(1) == socket.gethostname() and not alive(int(pid.group(2))):
            held = [f"pid {p}: {cmd}" for p, cmd in holders(path)]
            holder += (f"; that process has ended, and the lock is held by {'; '.join(held)}" if held
                       else "; that process has ended, and a process it started holds the lock")
        M.fail(f"{shown(out)} is in use by another run of tools/pretrain.sh ({holder}): a second run there would "
               "remove its checkpoints and shards. Wait for it to end, stop it, or choose another --out; nothing was "
               "changed")
    os.ftruncate(fd, 0)
    os.write(fd, f"host {socket.gethostname()}, pid {os.getpid()}, started "
                 f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}\n".encode())
    S.lock_fd, S.out = fd, out


def present(out):
    names = [o for o in OUTPUTS if os.path.lexists(os.path.join(out, o))]
    return names + sorted(n for n in os.listdir(out) if n.startswith("metrics.jsonl."))


def remove_outputs(out):
    for name in present(out):
        path = os.path.join(out, name)
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)


def set_aside(out):
    """A finished run in DIR moves to DIR/previous until this one has finished; an unfinished one
    (a finished one already in previous/) is replaced."""
    names = present(out)
    if not names:
        return
    previous = os.path.join(out, "previous")
    if os.path.isdir(previous) and not os.path.exists(os.path.join(out, "eval.json")):
        M.say(f"replacing the unfinished run in {shown(out)} (the finished one before it stays in {shown(previous)} "
              "until this run has finished)")
        remove_outputs(out)
        S.set_aside = "dropped"
        return
    shutil.rmtree(previous, ignore_errors=True)
    os.mkdir(previous)
    for name in names:
        os.rename(os.path.join(out, name), os.path.join(previous, name))
    S.set_aside = "moved"
    M.say(f"the run before in {shown(out)} is kept in {shown(previous)} until this run has finished")


def put_back(out):
    """A run that failed or stopped before training: the run before it as it was."""
    remove_outputs(out)
    previous = os.path.join(out, "previous")
    for name in os.listdir(previous):
        os.rename(os.path.join(previous, name), os.path.join(out, name))
    os.rmdir(previous)
    print(f"{M.name}: the previous run's outputs are back in {shown(out)}", file=sys.stderr)


def modernbert_of(bert):
    """A ModernBertConfig of the BERT preset's widths and depth: GeGLU's Wi (C x 2I') and Wo
    (I' x C) hold the 2 C I weights of BERT's FFN at I' = 2I / 3 (a multiple of 8); the
    SentencePiece tokenizer's specials (pad 0, [CLS] 2, [SEP] 3)."""
    inter = max(8, round(bert["intermediate_size"] * 2 / 3 / 8) * 8)
    return {"architectures": ["ModernBertForMaskedLM"], "model_type": "modernbert", "vocab_size": bert["vocab_size"],
            "hidden_size": bert["hidden_size"], "num_hidden_layers": bert["num_hidden_layers"],
            "num_attention_heads": bert["num_attention_heads"], "intermediate_size": inter,
            "hidden_activation": "gelu", "max_position_embeddings": bert["max_position_embeddings"],
            "local_attention": 128, "global_attn_every_n_layers": 3, "norm_eps": 1e-5,
            "initializer_range": bert["initializer_range"], "pad_token_id": 0, "cls_token_id": 2,
            "sep_token_id": 3, "bos_token_id": 2, "eos_token_id": 3}


# ModernBERT's optimizer and schedule (configs/modernbert-base.json's), at the preset's rate; the
# presets' global gradient clipping at norm 1 stays (the recipe has none: max_grad_norm 0), as in
# the comparison docs/TRAINING.md reports.
MODERNBERT_TRAIN = {"optimizer": "stableadamw", "beta1": 0.9, "beta2": 0.98, "eps": 1e-6, "weight_decay": 1e-5,
                    "decoupled_weight_decay": 1, "lr_schedule": "wsd", "decay_proportion": 0.1}


def build_config(a, preset, model, overrides, out, tokenizer):
    """The run's config: the preset, the model, every option and --set, absolute paths into DIR."""
    c = read_json(preset, "the preset")
    t = c["train"]
    c["model"] = model
    if a.arch == "modernbert":
        t.update(MODERNBERT_TRAIN)
    if a.vocab is not None:
        model["vocab_size"] = a.vocab
    if a.seq_length is not None and a.seq_length != t["seq_length"]:
        t["seq_length"] = a.seq_length
        t["max_predictions_per_seq"] = max(1, a.seq_length * 5 // 32)  # 15%, as NVIDIA's recipes round (128: 20)
        if not a.source and a.seq_length > model["max_position_embeddings"]:  # a new model holds its rows
            model["max_position_embeddings"] = a.seq_length
    if a.eval_batches is not None:
        t["eval_batches"] = a.eval_batches
    t["objective"] = a.objective
    if a.mask_prob is not None:  # room for round(seq x rate) positions, as bertpre train requires
        t.update(dynamic_masking=1, mask_prob=a.mask_prob,
                 max_predictions_per_seq=max(t["max_predictions_per_seq"], round(t["seq_length"] * a.mask_prob)))
        if a.whole_word_mask:
            t["whole_word_mask"] = 1
    held = f"{out}/eval-shards/eval-*.hdf5" if a.eval_text else f"{out}/shards/eval-*.hdf5"
    t.update(data=f"{out}/shards/train-*.hdf5", eval_data=held, tokenizer=tokenizer,
             checkpoint_dir=f"{out}/checkpoints", metrics_file=f"{out}/metrics.jsonl",
             tensorboard_dir=f"{out}/tensorboard")
    for section, field, value in overrides:
        c[section][field] = value
    return c


# ----------------------------------------------------------------------------------------------
# The run.

def wandb_ready(what):
    """--wandb: the wandb package imports (tools/wandb_log.py --check), or exit 1 saying so."""
    p = subprocess.run([sys.executable, WANDB_TOOL, "--check"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        M.fail(f"{what}: the wandb package is needed (above); nothing was changed")


def new_run(a, argv, bertpre):
    # Every option and input, before anything is written.
    if not a.inputs:
        print(parser().format_help(), file=sys.stderr)
        sys.exit(2)
    if a.wandb_offline and not a.wandb:
        M.fail("--wandb-offline goes with --wandb PROJECT; nothing was changed")
    if a.wandb:
        wandb_ready(f"--wandb {a.wandb}")
        S.wandb = {"project": a.wandb, "offline": a.wandb_offline, "id": secrets.token_hex(4)}
    for i in a.inputs + (a.eval_text or []):
        if not os.path.exists(i):
            M.fail(f"{'--eval-text' if i not in a.inputs else 'input'} '{i}' does not exist; nothing was changed")
    if a.eval_text and "--eval-fraction" in " ".join(argv):
        M.fail("--eval-text and --eval-fraction: held-out text is either your own or a share of the inputs; "
               "nothing was changed")
    overrides = parse_sets(a)
    src = os.path.abspath(a.source) if a.source else None
    if src:
        for option, value in (("--preset", a.preset), ("--vocab", a.vocab)):
            if value is not None:
                M.fail(f"{option} with --from: the model and its vocabulary are HF_DIR's; nothing was changed")
        # The dtype the weights were saved in is the import's to read (and note); the run keeps FP32 masters.
        model = {k: v for k, v in check_source(src).items() if k not in ("dtype", "torch_dtype")}
        preset = os.path.join(ROOT, "configs", "continue-base.json")
        arch = "BertForMaskedLM" if "BertForMaskedLM" in (model.get("architectures") or []) else "BertForPreTraining"
        if model.get("model_type") == "modernbert":  # MLM only, masked at ModernBERT's 30% unless said
            arch = "ModernBertForMaskedLM"
            if a.objective == "mlm+nsp":
                M.fail(f"--objective mlm+nsp: {src} is a ModernBERT, which has no next-sentence head; nothing was "
                       "changed")
            a.objective = "mlm"
            a.mask_prob = 0.3 if a.mask_prob is None else a.mask_prob
    else:
        preset = os.path.join(ROOT, "configs", f"pretrain-{a.preset or 'tiny'}.json")
        model = read_json(preset, "the preset")["model"]
        arch = None
    if a.arch == "modernbert":
        if src:
            M.fail("--arch modernbert with --from: the model is HF_DIR's; nothing was changed")
        if a.objective == "mlm+nsp":
            M.fail("--arch modernbert trains the masked LM alone (ModernBertForMaskedLM has no next-sentence head): "
                   "give --objective mlm or leave it out; nothing was changed")
        model, a.objective = modernbert_of(model), "mlm"
        a.mask_prob = 0.3 if a.mask_prob is None else a.mask_prob
    if a.objective is None:
        a.objective = "mlm" if (a.packing or "pairs") != "pairs" or arch == "BertForMaskedLM" else "mlm+nsp"
        if src:
            M.say(f"objective {a.objective} ({src} is a {arch}; --objective chooses)")
    a.packing = a.packing or ("full-sentences" if a.objective == "mlm" else "pairs")
    if a.objective == "mlm+nsp" and a.packing != "pairs":
        M.fail(f"--packing {a.packing} makes MLM-only rows (no next-sentence pairs) and --objective mlm+nsp trains "
               "next-sentence prediction: give --objective mlm, or --packing pairs")
    mixable = a.packing in ("full-sentences", "contiguous")  # the packings whose rows hold several documents
    if a.separate_documents and not mixable:
        M.fail(f"--separate-documents: the rows of --packing {a.packing} never hold two documents; it is for "
               "full-sentences or contiguous; nothing was changed")
    if a.separate_documents is None:  # ModernBERT's packing for a ModernBERT
        a.separate_documents = mixable and (a.arch == "modernbert" or arch == "ModernBertForMaskedLM")
    out = os.path.realpath(a.out)
    if os.path.exists(out) and not os.path.isdir(out):
        M.fail(f"--out {a.out} is a file, not a folder; nothing was changed")
    check_out(out, a.out, a.inputs, src)
    for option, value in (("--text-field", a.text_field), ("--bad-lines", a.bad_lines)):
        if value and a.format not in ("jsonl", "parquet", "arrow"):
            M.fail(f"{option} {value}: for --format jsonl, parquet or arrow, not {a.format}")

    lock(out)  # a run there is named before anything else is said
    staging = os.path.join(out, ".staging")  # hidden: no reader takes it as text
    shutil.rmtree(staging, ignore_errors=True)
    os.mkdir(staging)
    tokenizer = checked = f"{out}/spm.model"  # the run's, and the one checked before it is in place
    if src:
        checked = take_tokenizer(src, os.path.join(staging, "tokenizer"))
        status, _, err = run([bertpre, "tokenizer", "info", "--model", checked], capture="both")
        if status != 0:
            sys.stderr.write(err)
            M.fail(f"the tokenizer of {src} does not load (above); nothing was changed")
        staged = checked.startswith(staging + os.sep)
        tokenizer = os.path.join(out, os.path.relpath(checked, staging)) if staged else checked
    config = build_config(a, preset, model, overrides, out, tokenizer)

    # The config as bertpre train checks it (fields, values, the memory plan, the model against
    # its positions and the import, a checkpoint directory held by another run), with the data
    # it does not have yet left out.
    check = json.loads(json.dumps(config))
    check["train"].update(data="", eval_data="", metrics_file=f"{staging}/metrics.jsonl", tensorboard_dir="")
    if src:
        check["train"]["tokenizer"] = checked
    else:  # whole-word masking reads the tokenizer's pieces: checked once it exists
        check["train"].update(tokenizer="", whole_word_mask=0)
    write_json(f"{staging}/check.json", check)
    dry = [bertpre, "train", f"{staging}/check.json", "--dry-run"]
    if config["train"]["checkpoint_dir"] == f"{out}/checkpoints":
        dry.append("--overwrite-checkpoints")  # DIR's own: set aside before training
    if src:
        M.say(f"importing the weights of {src} [{elapsed()}]")
        _, said = must([bertpre, "import", src, "--out", f"{staging}/start"], "importing the model", capture="err")
        sys.stderr.write("".join(line + "\n" for line in said.splitlines() if line.startswith("bertpre: note:")))
        dry += ["--init-from", f"{staging}/start"]
    status, log, err = run(dry, capture="both")
    if status != 0:
        said = [line.replace(f"{staging}/check.json", "the run's config") for line in (log + err).splitlines()
                if "error" in line or "warning" in line]
        sys.stderr.write("".join(line + "\n" for line in said))
        M.fail(f"the run's config ({shown(preset)} with the options and every --set) is refused by bertpre train "
               "--dry-run (above); nothing was changed")
    if re.search(r"^no GPU visible", log, re.M):  # a dry run plans cuda without one; the run needs one
        M.fail("train.backend=cuda: no CUDA GPU is visible here (bertpre --version); nothing was changed")

    texts, files = a.inputs, None
    pattern = ["--pattern", a.pattern] if a.pattern else []
    if a.format in ("text", "lines"):
        kept, total = scan(a.inputs, a.pattern, out, a.strict)
        files = len(kept)
        inside = any((out + os.sep).startswith(os.path.realpath(i) + os.sep) for i in a.inputs if os.path.isdir(i))
        if len(kept) < total or inside:  # the files taken, by name: the run's own never read (prep reads a repeat once)
            texts, pattern = kept, []
    if a.doc_per is None:
        a.doc_per = "file"
        if a.format == "text" and files is not None and files * a.eval_fraction < 2 and not a.eval_text:
            a.doc_per = "block"
            M.say(f"{files} input file(s): too few documents to hold out a share of {a.eval_fraction}, so a document "
                  "per blank-line block (--doc-per block; --doc-per file keeps a document per file)")

    # Checked: the run before moves aside (no signal stops it halfway), this one starts.
    path = f"{out}/config.json"
    with signals_held():
        set_aside(out)
        for name in ("start", "tokenizer"):
            if os.path.exists(os.path.join(staging, name)):
                os.rename(os.path.join(staging, name), os.path.join(out, name))
        write_json(path, config)
        write_json(os.path.join(out, ".pretrain-command"), {"argv": argv, "cwd": os.getcwd()})
        if S.wandb:
            write_json(os.path.join(out, "wandb.json"), S.wandb)
    t = config["train"]
    reading = ["--format", a.format, *pattern] + (["--text-field", a.text_field] if a.text_field else []) \
        + (["--bad-lines", a.bad_lines] if a.bad_lines else [])
    if not src:
        vocab = config["model"]["vocab_size"]
        what = f"{files} file(s)" if files is not None else f"{len(a.inputs)} input(s)"
        M.say(f"training a SentencePiece tokenizer ({vocab} pieces) on {what} [{elapsed()}]")
        spm = [bertpre, "tokenizer", "train", *reading, "--input-sentence-size", 100000, "--model-prefix", f"{out}/spm"]
        status, _, err = run([*spm, "--vocab-size", vocab, *texts], capture="progress")
        if status != 0:
            most = re.search(r"Please set it to a value <= (\d+)", err)
            if not most:
                sys.stderr.write(err)
                M.fail("training the tokenizer failed (above)")
            vocab = int(most.group(1))
            M.say(f"notice: this text gives at most {vocab} tokenizer pieces, fewer than the "
                  f"{config['model']['vocab_size']} asked for: the tokenizer and the model's vocab_size use {vocab} "
                  "(--vocab sets it)")
            config["model"]["vocab_size"] = vocab
            write_json(path, config)
            must([*spm, "--vocab-size", vocab, *texts], "training the tokenizer", capture="progress")
        else:
            sys.stderr.write(err)  # its warnings, if any

    whose = " with the model's tokenizer" if src else ""
    apart = ", each document apart" if a.separate_documents else ""
    held = (f"the held-out rows from {', '.join(shown(x) for x in a.eval_text)}" if a.eval_text else
            f"a share of {a.eval_fraction} of the documents held out")
    M.say(f"writing shards{whose}: rows of {t['seq_length']} tokens ({a.packing}{apart}), {held}; held-out rows "
          f"masked as BERT's (15% of tokens, token by token) in every run [{elapsed()}]")
    # --chunk-mb 64: up to 64 MB of text is one chunk, so that a random next segment comes from any
    # document of it and every shard block mixes the inputs (prep's pool is the chunk).
    base = [bertpre, "prep", "--tokenizer", t["tokenizer"], *reading, "--seq-length", t["seq_length"],
            "--max-predictions", t["max_predictions_per_seq"], "--dupe-factor", 1, "--chunk-mb", 64, "--packing",
            a.packing]
    base += (["--doc-per", a.doc_per] if a.format == "text" else []) + (["--strict"] if a.strict else []) \
        + (["--separate-documents"] if a.separate_documents else [])
    prep = [*base, "--output", f"{out}/shards", "--shards", a.shards, "--eval-fraction",
            0 if a.eval_text else a.eval_fraction, "--eval-masking", "bert"] \
        + (["--whole-word-mask"] if a.whole_word_mask else [])
    status, log, _ = run([*prep, *texts], capture="out")  # its progress bar and errors on stderr as they come
    print(log, end="")
    if status != 0:
        M.fail("bertpre prep failed (its message is above)")
    if a.eval_text:  # the user's held-out text, every row of it held out, masked as BERT's (prep's default)
        status, held_log, _ = run([*base, "--output", f"{out}/eval-shards", "--shards", 1, "--prefix", "eval",
                                   *a.eval_text], capture="out")
        print(held_log, end="")
        if status != 0:
            M.fail("bertpre prep of --eval-text failed (its message is above)")
    elif not any(n.startswith("eval-") for n in os.listdir(f"{out}/shards")):
        M.fail("prep held out no document for evaluation: raise --eval-fraction or give more documents")
    sequences = re.search(r" -> (\d+) train instances", log)
    passes_warning(t, int(sequences.group(1)) if sequences else 0)

    start = evaluate_start(bertpre, out, t) if src else None
    M.say(f"{'continuing ' if src else ''}pretraining (bertpre train {shown(path)}; it then evaluates the checkpoint "
          f"on the held-out shard) [{elapsed()}]")
    if t.get("tensorboard_dir"):
        M.say(f"watch it live: {program(os.path.join(ROOT, '.venv/bin/tensorboard'))} --logdir "
              f"{shlex.quote(shown(t['tensorboard_dir']))}")
    train_and_finish(bertpre, out, config, ["--init-from", f"{out}/start"] if src else [], src, start)


def passes_warning(t, rows):
    """Many passes over a small text memorise it: said before training, with the steps of 3 passes."""
    batch = t.get("global_batch_size") or t["micro_batch_size"]
    passes = t["steps"] * batch / rows if rows else float("inf")
    if passes > 4:
        M.warn(f"the run reads each of its {rows} training sequences {passes:.1f} times ({t['steps']} steps of "
               f"{batch}): a model trained this often on the same text memorises it (training accuracy far above "
               f"held-out). More text, or --set train.steps={max(1, int(3 * rows / batch))} (3 passes), avoids it.")


def train_and_finish(bertpre, out, config, args, src, start):
    """Trains (signals forwarded: bertpre checkpoints and stops), then, training finished, exports,
    plots and sums up; a run that stopped early or failed ends here with what to do next."""
    t = config["train"]
    S.training = True
    follower = wandb_follow(out, t) if S.wandb else None
    try:
        status, _, _ = run([bertpre, "train", f"{out}/config.json", "--no-next", "--eval-json", f"{out}/eval.json",
                            *args], training=True)
    finally:
        if follower:  # it reads what is left, finishes the W&B run and exits
            follower.send_signal(signal.SIGTERM)
            try:
                follower.wait(timeout=120)
            except subprocess.TimeoutExpired:
                follower.kill()
    checkpoint, step = newest_checkpoint(t["checkpoint_dir"])
    step = step or 0
    again = f"{shlex.quote(program(ME))} --resume {shlex.quote(shown(out))}"
    kept = ""
    if os.path.isdir(os.path.join(out, "previous")):
        kept = f" The run before stays in {shown(os.path.join(out, 'previous'))} until this one has finished."
    finished = status == 0 and step >= t["steps"] and not S.signal and os.path.exists(f"{out}/eval.json")
    if not finished:
        how = f" ({SIGNALS[S.signal]})" if S.signal else ""
        cause = "" if S.signal or status == 0 else f" (bertpre train exited {status}; its messages are above)"
        print(f"{M.name}: {'error: training failed' if cause else 'training stopped'}{cause} at step {step} of "
              f"{t['steps']}{how}: a partial model is not exported or plotted.{kept} Continue it with: {again}",
              file=sys.stderr, flush=True)
        sys.exit(128 + S.signal if S.signal else 1)
    M.say(f"exporting the newest checkpoint with its tokenizer for transformers [{elapsed()}]")
    shutil.rmtree(f"{out}/export", ignore_errors=True)
    must([bertpre, "export", t["checkpoint_dir"], "--out", f"{out}/export"], "exporting")
    M.say(f"plotting the metrics [{elapsed()}]")
    must([os.path.join(ROOT, "tools", "plot_metrics.py"), t["metrics_file"], "--labels", os.path.basename(out),
          "--out", f"{out}/metrics.png"], "plotting the metrics")
    shutil.rmtree(os.path.join(out, "previous"), ignore_errors=True)
    summary(bertpre, out, config, checkpoint, src, start)


def wandb_follow(out, t):
    """tools/wandb_log.py following the metrics file beside training (its own session: a Ctrl-C
    reaches training, and the log is finished after it), from the step the file holds now."""
    metrics, last = t["metrics_file"], -1
    if os.path.exists(metrics):
        for text in open(metrics, encoding="utf-8", errors="replace"):
            try:
                last = max(last, json.loads(text).get("step", -1))
            except (ValueError, AttributeError):
                pass
    w = S.wandb
    mode = f"offline, under {shown(out + '/wandb')}" if w.get("offline") else "online"
    M.say(f"logging the metrics to W&B project {w['project']} ({mode}, run {w['id']})")
    cmd = [sys.executable, WANDB_TOOL, metrics, "--project", w["project"], "--name", os.path.basename(out), "--id",
           w["id"], "--dir", out, "--after-step", str(last), "--follow-pid", str(os.getpid())]
    return subprocess.Popen(cmd + (["--offline"] if w.get("offline") else []), start_new_session=True,
                            pass_fds=(S.lock_fd,) if S.lock_fd else ())


def numbers(e, baseline=False):
    text = f"MLM accuracy {e['mlm_accuracy']:.3f}"
    if baseline:
        text += f" (most frequent token alone: {e['mlm_baseline_accuracy']:.3f})"
    if "nsp_accuracy" in e:  # none without the head
        text += f", NSP accuracy {e['nsp_accuracy']:.3f}" + (" (chance: 0.5)" if baseline else "")
    return text + f", MLM loss {e['mlm_loss']:.3f}"


def summary(bertpre, out, config, checkpoint, src, start):
    """The closing summary of a finished run and its one "next:" block, each path runnable as printed."""
    t = config["train"]
    metrics = t["metrics_file"]
    lines = [json.loads(line) for line in open(metrics, encoding="utf-8", errors="replace") if line.strip()]
    train = [line for line in lines if not line.get("eval")]
    e = json.load(open(f"{out}/eval.json"))
    auto = "AutoModelForMaskedLM" if t.get("objective") == "mlm" else "AutoModelForPreTraining"
    tensorboard = program(os.path.join(ROOT, ".venv/bin/tensorboard"))
    board = ((("tensorboard", f"{t['tensorboard_dir']}  ({tensorboard} --logdir "
                              f"{shlex.quote(shown(t['tensorboard_dir']))})"),) if t.get("tensorboard_dir") else ())
    print(f"\n{M.name}: done in {elapsed()}{f' (continued {src})' if src else ''}. Outputs:")
    for label, value in (("config", f"{out}/config.json"), ("checkpoint", checkpoint),
                         ("export", f"{out}/export  (transformers: {auto}, AutoTokenizer)"), ("metrics", metrics),
                         ("plot", f"{out}/metrics.png"), ("evaluation", f"{out}/eval.json")) + board:
        print(f"  {label:<11} {value}")
    if train:
        last = train[-1]
        nsp = f", NSP accuracy {last['nsp_accuracy']:.3f}" if "nsp_accuracy" in last else ""
        print(f"  last steps  (step {last['step']}): MLM loss {last['mlm_loss']:.3f}, MLM accuracy "
              f"{last['mlm_accuracy']:.3f}{nsp}")
    if start and os.path.exists(start):
        s = json.load(open(start))
        print(f"  held out    ({e['sequences']} sequences, the same rows for both):")
        print(f"    starting model   {numbers(s)}   ({start})")
        print(f"    continued model  {numbers(e, True)}   ({out}/eval.json)")
    else:
        print(f"  held out    ({e['sequences']} sequences): {numbers(e, True)}")
    if not S.resumed:  # this run wrote the shards: its held-out rows masked as every run's (prep --eval-masking bert)
        print("              (held-out rows masked as BERT's, 15% of tokens token by token, in every run: comparable)")
    q = shlex.quote  # each path as the shell reads it back
    tools = program(os.path.join(ROOT, "tools"))
    print("next:")
    print(f"  {q(tools + '/finetune.py')} {q(shown(out + '/export'))} --data LABELLED   # fine-tune it: LABELLED is a "
          "folder per class or a file of LABEL<TAB>TEXT lines")
    print(f"  {q(program(bertpre))} export {q(shown(checkpoint))} --out {q(shown(out + '/export-fp16'))} --dtype fp16"
          "   # a half-size export")


def recorded_command(out):
    """(argv, cwd) of the command that made the run in DIR (DIR/.pretrain-command, written when
    its outputs were placed), or None."""
    try:
        with open(os.path.join(out, ".pretrain-command"), encoding="utf-8") as f:
            record = json.load(f)
        return [str(x) for x in record["argv"]], str(record["cwd"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def command_again(out):
    """The command that made the run in DIR, as the shell takes it from here, or None."""
    record = recorded_command(out)
    if not record:
        return None
    argv, cwd = record
    here = os.path.realpath(os.environ.get("PRETRAIN_FROM") or os.getcwd())
    if os.path.realpath(cwd) == here:
        return shlex.join([program(ME), *argv])
    return f"cd {shlex.quote(cwd)} && {shlex.join([ME, *argv])}"


def from_run(out):
    """Whether the run in DIR continues a transformers model (--from): its import, or its command."""
    if os.path.isdir(os.path.join(out, "start")):
        return True
    argv = (recorded_command(out) or ([], ""))[0]
    return any(x == "--from" or x.startswith("--from=") for x in argv)


def missing_stage(out, t):
    """What a run in DIR lacks of the stages before training (None when it can train)."""
    if from_run(out) and not os.path.isfile(os.path.join(out, "start", "COMPLETE")):
        return f"no imported model in {shown(os.path.join(out, 'start'))}"
    if not os.path.isfile(t.get("tokenizer") or ""):
        return f"no tokenizer {shown(t.get('tokenizer') or '(none)')}"
    for field in ("data", "eval_data"):
        if not glob.glob(t.get(field) or ""):
            return f"no {'held-out' if field == 'eval_data' else 'train'} shards ({shown(t.get(field) or '(none)')})"
    return None


def start_again(out):
    """How to run the stages before training of DIR again: the command that made it."""
    again = command_again(out)
    return f"start it again with the command that made it: {again}" if again else \
        "start it again with the command that made it"


def stopped_early(argv):
    """What to do after a stop before training: --resume where the stages before it are done and
    stay (stopped during the starting evaluation), else the same command again."""
    t = {}
    if S.out and S.set_aside != "moved" and os.path.isfile(os.path.join(S.out, "config.json")):
        t = read_json(os.path.join(S.out, "config.json"), "the run's config").get("train") or {}
    if t and not missing_stage(S.out, t):
        return f"continue it with: {shlex.quote(program(ME))} --resume {shlex.quote(shown(S.out))}"
    if S.resumed:
        return start_again(S.out)
    return f"start it again with the same command: {shlex.join([program(ME), *argv])}"


def evaluate_start(bertpre, out, t):
    """The starting model's numbers on the held-out shard (DIR/eval-start.json)."""
    M.say(f"evaluating the starting model on the held-out shard [{elapsed()}]")
    start = f"{out}/eval-start.json"
    must([bertpre, "eval", f"{out}/start", "--data", t["eval_data"], "--batches", t.get("eval_batches", 0),
          "--micro-batch", t["micro_batch_size"], "--backend", t.get("backend", "auto"), "--json", start],
         "evaluating the starting model")
    return start


def resume_run(a, argv, bertpre):
    given = [x for x in argv if x.startswith("--") and x.split("=")[0] != "--resume"]
    if given or a.inputs:
        M.fail(f"--resume {a.resume} continues a run as its config.json says: it takes no inputs or other options "
               f"({' '.join(given + a.inputs)})")
    out = os.path.realpath(a.resume)
    path = f"{out}/config.json"
    if not os.path.isfile(path) or not own_run(out):
        M.fail(f"--resume {a.resume}: no {shown(path)} of a run of tools/pretrain.sh there: not a run to continue")
    config = read_json(path, "the run's config")
    t = config.get("train")
    if not isinstance(t, dict) or not t.get("checkpoint_dir") or not isinstance(t.get("data"), str):
        M.fail(f"{path}: no train.checkpoint_dir or train.data: not a run of tools/pretrain.sh")
    # The shards are always written in DIR: a config naming another folder's came with a copy or a move.
    made_in = os.path.dirname(os.path.dirname(t["data"]))
    if made_in != out:
        M.fail(f"--resume {a.resume}: its config.json names the files of the run in {made_in} (train.data "
               f"{t['data']}, train.checkpoint_dir {t['checkpoint_dir']}): the run was copied or moved from there, "
               "and resuming it here would train into the original's checkpoints and metrics or fail on them. Resume "
               f"it where it was made ({program(ME)} --resume {shlex.quote(made_in)}), or start a new run; nothing "
               "was changed")
    if os.path.isfile(os.path.join(out, "wandb.json")):  # the run logs to W&B: the same W&B run goes on
        S.wandb = read_json(os.path.join(out, "wandb.json"), "the run's W&B settings")
        wandb_ready(f"--resume {a.resume} (its run logs to W&B project {S.wandb.get('project')})")
    lock(out)
    S.resumed = True
    missing = missing_stage(out, t)
    if missing:
        M.fail(f"--resume {a.resume}: the run stopped before training ({missing}), so there is nothing to continue; "
               f"{start_again(out)}")
    src = start = None
    args = ["--resume", "auto"]
    if from_run(out):
        src, start = f"{out}/start", f"{out}/eval-start.json"
        if newest_checkpoint(t["checkpoint_dir"])[0] is None:  # stopped before its first checkpoint
            M.say(f"no checkpoint yet: training starts from the imported model ({shown(src)}), as the run began")
            args = ["--init-from", src]
        if not os.path.exists(start):  # stopped before or during the starting evaluation
            evaluate_start(bertpre, out, t)
    M.say(f"continuing the run in {shown(out)} (bertpre train {shown(path)} {' '.join(args[:1])}) [{elapsed()}]")
    train_and_finish(bertpre, out, config, args, src, start)


def main():
    argv = sys.argv[1:]
    if any(x in ("-h", "--help") for x in argv):
        print(parser().format_help())
        return 0
    a = parser().parse_intermixed_args(argv)
    progress_every()  # before any work
    bertpre = bertpre_binary(M)
    for signum in SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            signal.signal(signum, on_signal)
    status = 1
    try:
        resume_run(a, argv, bertpre) if a.resume else new_run(a, argv, bertpre)
        status = 0
    except Stopped:
        how = SIGNALS.get(S.signal, "a signal")
        if S.training:  # trained and evaluated; the export or the plot was cut
            print(f"{M.name}: stopped ({how}) after training, before the export and plot were done; "
                  f"{shlex.quote(program(ME))} --resume {shlex.quote(shown(S.out))} does them", file=sys.stderr)
        else:
            print(f"{M.name}: stopped ({how}) before training; nothing was trained; {stopped_early(argv)}",
                  file=sys.stderr)
        status = 128 + S.signal
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, set(SIGNALS))  # the clean-up runs to its end
        if S.out:
            shutil.rmtree(os.path.join(S.out, ".staging"), ignore_errors=True)
            if status != 0 and not S.training:
                if S.set_aside == "moved":
                    put_back(S.out)
                elif S.created and not present(S.out):
                    shutil.rmtree(S.out, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
