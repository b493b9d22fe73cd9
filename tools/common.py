#!/usr/bin/env python3
"""What the tools in this folder share: the project's Python environment, their messages, the
bertpre binary, and paths as a user types them back.

need(): tools/setup.sh installs the Python packages the tools need (transformers,
tensorboard, ...) into the virtual environment .venv at the repository root. A tool run as
`tools/NAME.py` starts with the first python3 on the PATH (Debian's, say); need() checks that
the packages it names can be imported and, when they cannot, runs the tool again with
.venv/bin/python (once: the environment variable BERTPRE_TOOL_REEXEC marks the second start).
Without .venv, or when .venv lacks them too, the tool stops with an error naming the
packages, the Python tried and the environment that tools/setup.sh makes.

The demo's corpus, the English linux-doc sources (linux_doc, linux_doc_inputs; for the shell
scripts `tools/common.py linux-doc [SUBTREE ...]` prints the inputs, one a line), the corpus
a study reads (walk_inputs, corpus_fingerprint, prepare_corpus), a study run's paths and
checks (data_paths, check_at_least_one, check_config) and the model sizes of the
time-to-accuracy and large-batch studies (MODELS, model_config) live here too, so that no tool
imports another.

The standard library only: a tool imports this module before need() has found its packages.
"""
import hashlib
import importlib.util
import math
import os
import re
import shutil
import subprocess
import sys
from fnmatch import fnmatch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv")
VENV_PYTHON = os.path.join(VENV, "bin", "python")


def need(tool, *modules, hint=None):
    """Returns when every module imports here; else re-runs the tool with .venv's Python or exits 1
    (hint: how to install them, when tools/setup.sh does not)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    in_venv = os.path.realpath(sys.prefix) == os.path.realpath(VENV)
    if not in_venv and os.access(VENV_PYTHON, os.X_OK) and not os.environ.get("BERTPRE_TOOL_REEXEC"):
        os.environ["BERTPRE_TOOL_REEXEC"] = "1"
        sys.stdout.flush()
        os.execv(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(sys.argv[0]), *sys.argv[1:]])
    where = (f"{sys.executable} (the project's environment {VENV})" if in_venv or os.environ.get("BERTPRE_TOOL_REEXEC")
             else f"{sys.executable}, and there is no {VENV_PYTHON}")
    print(f"{tool}: error: needs the Python package(s) {', '.join(missing)}, missing from {where}: "
          + (hint or f"run tools/setup.sh, which installs them into {VENV}"), file=sys.stderr)
    sys.exit(1)


def alive(pid):
    """Whether process PID still runs (one that ended and that its parent has not waited for is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


class Messages:
    """A tool's lines: `NAME: text` on stdout, warnings and errors on stderr; fail() exits 1."""

    def __init__(self, name):
        self.name = name

    def say(self, text):
        print(f"{self.name}: {text}", flush=True)

    def warn(self, text):
        sys.stdout.flush()
        print(f"{self.name}: warning: {text}", file=sys.stderr, flush=True)

    def fail(self, text, status=1):
        sys.stdout.flush()
        print(f"{self.name}: error: {text}", file=sys.stderr, flush=True)
        sys.exit(status)


def bertpre_binary(messages):
    """The bertpre binary: $BERTPRE, else build/bertpre; exits naming how to build it."""
    path = os.environ.get("BERTPRE") or os.path.join(ROOT, "build", "bertpre")
    if not os.access(path, os.X_OK):
        messages.fail(f"{path} is not built (run tools/setup.sh, then tools/build.sh; or set BERTPRE)")
    return os.path.abspath(path)


def shown(path, base=None):
    """A path as a command takes it from where the user started the tool (base, else $PRETRAIN_FROM,
    else the current directory): relative below it, else absolute."""
    base = base or os.environ.get("PRETRAIN_FROM") or os.getcwd()
    rel = os.path.relpath(os.path.abspath(path), base)
    return rel if not rel.startswith("..") else os.path.abspath(path)


def program(path):
    """A program's path as a shell runs it: with a slash (a bare name would be looked up on the PATH)."""
    p = shown(path)
    return p if "/" in p else "./" + p


def write_json(path, value):
    """value as indented JSON at path, written beside it and renamed over it (never half a file)."""
    import json
    with open(path + ".tmp", "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


def model_section(path):
    """The model config at path: the file itself (a BertConfig or ModernBertConfig), or the
    "model" section of a training config (an object, or a path relative to the file)."""
    import json
    with open(path) as f:
        cfg = json.load(f)
    section = cfg.get("model") if isinstance(cfg, dict) else None
    if isinstance(section, str):
        with open(os.path.join(os.path.dirname(os.path.abspath(path)), section)) as f:
            return json.load(f)
    return section if isinstance(section, dict) else cfg


def newest_checkpoint(folder):
    """The newest complete checkpoint (step-N with its COMPLETE marker) under a checkpoint
    directory: (its path, N), or (None, None)."""
    steps = sorted((int(n[5:]), n) for n in (os.listdir(folder) if os.path.isdir(folder) else [])
                   if re.fullmatch(r"step-\d+", n) and os.path.exists(os.path.join(folder, n, "COMPLETE")))
    return (os.path.join(folder, steps[-1][1]), steps[-1][0]) if steps else (None, None)


def commit():
    """The commit of this checkout ($BERTPRE_COMMIT when set), for results to name the code."""
    if os.environ.get("BERTPRE_COMMIT"):
        return os.environ["BERTPRE_COMMIT"]
    p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return p.stdout.strip() if p.returncode == 0 else "unknown"


def run_logged(cmd, log, messages):
    """Runs cmd, its output appended to log; returns stdout. Exits naming the log on failure."""
    with open(log, "a") as f:
        f.write("$ " + " ".join(map(str, cmd)) + "\n")
        f.flush()
        p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        f.write(p.stdout)
    if p.returncode != 0:
        messages.fail(f"{os.path.basename(str(cmd[0]))} {cmd[1]} exited {p.returncode}; its output is in {log}:\n"
                      f"{p.stdout[-2000:]}")
    return p.stdout


# ---------------------------------------------------------------------------------------------
# The corpus of the demo, the benchmarks and the studies

def linux_doc(messages=None):
    """The reStructuredText sources of the newest Debian linux-doc-* installed (Documentation/);
    without one, None, or an exit naming the package when messages are given."""
    found = sorted(d for d in (os.path.join("/usr/share/doc", n, "Documentation") for n in
                               (os.listdir("/usr/share/doc") if os.path.isdir("/usr/share/doc") else [])
                               if n.startswith("linux-doc-")) if os.path.isdir(d))
    if not found and messages:
        messages.fail("the linux-doc corpus is not installed (tools/setup.sh installs linux-doc-6.1)")
    return found[-1] if found else None


def linux_doc_inputs(subtrees=(), messages=None):
    """The demo's inputs: the given subtrees of Documentation/, else the English documents, every
    subtree holding .rst.gz files and every top-level .rst.gz file but translations/."""
    root = linux_doc(messages)
    if root is None:
        return []
    if subtrees:
        return [os.path.join(root, s) for s in subtrees]
    inputs = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if name == "translations":
            continue
        if os.path.isdir(path) and any(f.endswith(".rst.gz") for _, _, files in os.walk(path) for f in files):
            inputs.append(path)
        elif name.endswith(".rst.gz"):
            inputs.append(path)
    return inputs


def walk_inputs(path, pattern=None, top=True):
    """Each file bertpre's text reader takes from an input (data/text.c): names starting with '.'
    left out, folders in sorted order, pattern on the names inside folders."""
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            if not name.startswith("."):
                yield from walk_inputs(os.path.join(path, name), pattern, False)
    elif os.path.isfile(path) and (top or not pattern or fnmatch(os.path.basename(path), pattern)):
        yield path


def corpus_fingerprint(inputs, pattern=None):
    """What identifies a corpus wherever it lies: its files' names (relative to their input) and
    sizes, counted and hashed."""
    h, files, size = hashlib.sha256(), 0, 0
    for i in inputs:
        base = i if os.path.isdir(i) else os.path.dirname(i)
        for path in walk_inputs(i, pattern):
            n = os.path.getsize(path)
            h.update(f"{os.path.relpath(path, base)}\0{n}\n".encode())
            files, size = files + 1, size + n
    return {"files": files, "bytes": size, "sha256": h.hexdigest()}


def check_eval_fraction(fraction, documents, messages, option="--eval-fraction"):
    """A share of whole documents held out: above 0, at most 0.5, and at least one document."""
    if not (isinstance(fraction, (int, float)) and 0 < fraction <= 0.5):
        messages.fail(f"{option} {fraction}: expected a share above 0 and at most 0.5 of the documents")
    if documents * fraction < 1:
        messages.fail(f"{option} {fraction} of the corpus's {documents} documents (a file each) holds out none: "
                      f"give at least {math.ceil(1e4 / documents) / 1e4:g}, or more documents")


def prepare_corpus(bertpre, corpus, work, log, messages, *, pattern, vocab, seq, predictions, eval_fraction,
                   dupe_factor, packing):
    """A SentencePiece tokenizer trained on the corpus (WORK/spm.model, replacing one an earlier
    attempt left) and shards written by bertpre prep (WORK/shards: --format text, a document per
    file, a share of whole documents held out in an eval shard); returns the tokenizer, the
    shards and prep's counts."""
    spm, shards = os.path.join(work, "spm"), os.path.join(work, "shards")
    for ext in (".model", ".vocab"):
        if os.path.exists(spm + ext):
            os.remove(spm + ext)
    shutil.rmtree(shards, ignore_errors=True)
    patterns = ["--pattern", pattern] if pattern else []
    run_logged([bertpre, "tokenizer", "train", "--format", "text", "--vocab-size", vocab, "--input-sentence-size",
                200000, *patterns, "--model-prefix", spm, *corpus], log, messages)
    out = run_logged([bertpre, "prep", "--tokenizer", spm + ".model", "--output", shards, "--format", "text",
                      "--seq-length", seq, "--max-predictions", predictions, "--shards", 4, "--eval-fraction",
                      eval_fraction, "--dupe-factor", dupe_factor, "--chunk-mb", 64, "--packing", packing,
                      "--no-progress", *patterns, *corpus], log, messages)
    m = re.search(r"(\d+) documents \((\d+) held out\), \d+ sentences, (\d+) tokens", out)
    if not m:
        messages.fail(f"prep's summary line (documents, held out, tokens) not found in its output; see {log}")
    docs, held, tokens = map(int, m.groups())
    return spm + ".model", shards, {"documents": docs, "held_out_documents": held, "tokens": tokens}


def data_paths(data, metrics):
    """A study run's train.data, eval_data, tokenizer and metrics_file: the shards and tokenizer of
    data, absolute paths (the config's own folder is not the current directory)."""
    return {"data": os.path.abspath(os.path.join(data["shards"], "train-*.hdf5")),
            "eval_data": os.path.abspath(os.path.join(data["shards"], "eval-*.hdf5")),
            "tokenizer": os.path.abspath(data["tokenizer"]), "metrics_file": os.path.abspath(metrics)}


def check_at_least_one(args, names, messages):
    """The options named (argparse dests) that were given: each at least 1."""
    for k in names:
        v = getattr(args, k)
        if v is not None and v < 1:
            messages.fail(f"--{k.replace('_', '-')} {v} must be at least 1")


def check_config(bertpre, config, path, messages, what):
    """bertpre train --dry-run of a config whose data and tokenizer do not exist yet (left out):
    the values only bertpre checks, refused before any work."""
    import json
    check = json.loads(json.dumps(config))
    check["train"].update(data="", eval_data="", tokenizer="", metrics_file="", eval_every=0, whole_word_mask=0)
    check["train"].pop("checkpoint_dir", None)
    with open(path, "w") as f:
        json.dump(check, f)
    p = subprocess.run([bertpre, "train", path, "--dry-run"], capture_output=True, text=True)
    os.remove(path)
    if p.returncode != 0:
        said = [line.replace(path, what) for line in (p.stdout + p.stderr).splitlines() if "error" in line]
        messages.fail(f"{what} is refused by bertpre train --dry-run: {' '.join(said)}; nothing was made")


# ---------------------------------------------------------------------------------------------
# The model sizes of the studies (tools/tta.py, tools/batch_study.py)

MODELS = {
    "base": dict(vocab_size=16000, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),
    "small": dict(vocab_size=16000, hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                  intermediate_size=2048),
    "toy": dict(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
}
DROPOUT, INIT_RANGE = 0.1, 0.02


def model_config(model, seq):
    """A study's BERT: the size's shape, positions for seq, dropout 0.1, BERT's initialisation."""
    return dict(model, max_position_embeddings=512 if seq > 64 else 64, type_vocab_size=2, hidden_act="gelu",
                hidden_dropout_prob=DROPOUT, attention_probs_dropout_prob=DROPOUT, initializer_range=INIT_RANGE,
                layer_norm_eps=1e-12, pad_token_id=0)


if __name__ == "__main__":
    if sys.argv[1:2] != ["linux-doc"]:
        sys.exit("usage: tools/common.py linux-doc [SUBTREE ...]   (the demo's linux-doc inputs, one a line)")
    print("\n".join(linux_doc_inputs(sys.argv[2:], Messages("linux-doc"))))
