"""docs/GUIDE.md runs as written: its "Rehearse at toy size" block, taken from the file and run
with bash, unchanged, from a fresh directory holding corpus/ (the Python standard library's
docstrings, data_fixtures.python_docstrings), the repository's configs/ and tools/ (linked
there, as in the repository root) and bertpre on the PATH.

Checked: the block exits 0 (bash -e: every command); `tokenizer train --model-prefix tok/spm`
created tok/ itself; the 128- and 512-token shards with their eval shards; phase 1's
checkpoints every 2 steps; phase 2 started from phase 1's weights (--init-from) and wrote its
checkpoint; both metrics files, the plot, eval.json; an export that transformers loads with
the toy's shape (2 layers, hidden 64, the tokenizer's 2,000 pieces).

usage: test_guide.py GUIDE_MD BERTPRE
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import checks
from checks import expect
from data_fixtures import python_docstrings, require

guide, bertpre = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
require(bertpre, "hdf5", "sentencepiece")
root = os.path.dirname(os.path.dirname(guide))
with checks.needs("matplotlib and transformers"):
    import matplotlib  # noqa: F401
    import transformers  # noqa: F401

text = open(guide).read()
m = re.search(r"^## Rehearse at toy size\n.*?^```sh\n(.*?)^```", text, re.S | re.M)
expect("docs/GUIDE.md has a 'Rehearse at toy size' sh block", m is not None)
if m is None:
    sys.exit(checks.exit_status())
block = m.group(1)

with tempfile.TemporaryDirectory() as tmp:
    python_docstrings(os.path.join(tmp, "corpus"))
    for name in ("configs", "tools"):
        os.symlink(os.path.join(root, name), os.path.join(tmp, name))
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    os.symlink(bertpre, os.path.join(bindir, "bertpre"))
    env = dict(os.environ, PATH=f"{bindir}:{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
               OPENBLAS_NUM_THREADS="1")
    p = subprocess.run(["bash", "-e", "-c", block], cwd=tmp, env=env, capture_output=True, text=True)
    expect("the block runs as written: exit 0", p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:])

    def there(*path):
        return os.path.exists(os.path.join(tmp, *path))

    expect("tokenizer train created tok/ for --model-prefix tok/spm", there("tok", "spm.model"))
    for d in ("shards128", "shards512"):
        names = sorted(os.listdir(os.path.join(tmp, d))) if there(d) else []
        expect(f"{d}: {names}", names == ["eval-00000.hdf5", "train-00000.hdf5", "train-00001.hdf5"])
    # The run's lock file (.bertpre-lock, docs/CHECKPOINTS.md) stays beside the checkpoints.
    ck1 = sorted(n for n in os.listdir(os.path.join(tmp, "ckpt1")) if n != ".bertpre-lock") if there("ckpt1") else []
    expect(f"phase 1 checkpoints every 2 steps: {ck1}", ck1 == [f"step-{s:09d}" for s in (2, 4, 6)])
    expect("phase 2 checkpoint step 4", there("ckpt2", "step-000000004", "COMPLETE"))
    out = p.stdout
    expect("phase 2 started from phase 1's step 6", "step-000000006" in out, out[-2000:])
    for f in ("phase1.jsonl", "phase2.jsonl", "run.png", "eval.json"):
        expect(f"{f} written", there(f))
    if there("eval.json"):
        e = json.load(open(os.path.join(tmp, "eval.json")))
        expect(f"eval.json: {e.get('sequences')} sequences of 512 tokens", e.get("seq_length") == 512)
    try:
        from transformers import AutoModelForPreTraining, AutoTokenizer
        model = AutoModelForPreTraining.from_pretrained(os.path.join(tmp, "bert-toy-hf"))
        tok = AutoTokenizer.from_pretrained(os.path.join(tmp, "bert-toy-hf"))
        c = model.config
        expect(f"the export loads: {c.num_hidden_layers} layers, hidden {c.hidden_size}, vocab {c.vocab_size} = "
               f"the tokenizer's {len(tok)}", c.num_hidden_layers == 2 and c.hidden_size == 64
               and c.vocab_size == len(tok) == 2000)
    except Exception as ex:  # noqa: BLE001 - reported as a failed check
        expect("the export loads with AutoModelForPreTraining and AutoTokenizer", False, repr(ex))

sys.exit(checks.exit_status())
