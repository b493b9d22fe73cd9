"""Shared by the data-pipeline tests: skipping with a reason, the linux-doc corpus that
tools/setup.sh installs, and a small tokenizer trained on it with bertpre."""
import glob
import gzip
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import common  # noqa: E402  the linux-doc corpus as the tools find it

from checks import skip  # noqa: E402,F401  (the data tests import skip from here)


def require(bertpre, *names):
    """Skip when this build of bertpre lacks a library the test needs (its --version says)."""
    import checks
    have = checks.features(bertpre)
    packages = {"hdf5": "libhdf5-dev", "sentencepiece": "libsentencepiece-dev", "mpi": "an MPI library"}
    for name in names:
        if not have[name]:
            skip(f"bertpre was built without {name} ({packages[name]} not found)")


def copy_tracked(source, dest):
    """The files git tracks in the repository `source`, as they are in its working tree, copied
    to dest (modes kept): a fresh clone with the uncommitted changes."""
    import shutil
    files = subprocess.run(["git", "-C", source, "ls-files", "-z"], capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = os.path.join(source, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))


def linux_doc():
    """The reStructuredText sources of the Debian package linux-doc-*, or skip."""
    root = common.linux_doc()
    if root is None:
        skip("the linux-doc corpus is not installed (tools/setup.sh installs linux-doc-6.1)")
    return root


def real_lines(min_bytes):
    """Non-empty lines of the linux-doc .rst sources, in sorted file order, at least min_bytes."""
    root = linux_doc()
    lines, size = [], 0
    for path in sorted(glob.glob(os.path.join(root, "**", "*.rst.gz"), recursive=True)):
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line:
                    lines.append(line)
                    size += len(line.encode()) + 1
        if size >= min_bytes:
            return lines
    skip(f"the linux-doc corpus has less than {min_bytes} bytes of text")


def run(cmd, check=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if check and p.returncode != 0:
        print(f"FAIL: {' '.join(map(str, cmd))} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        sys.exit(1)
    return p


def train_tokenizer(bertpre, prefix, inputs, vocab_size, fmt="text", pattern="*.rst.gz"):
    cmd = [bertpre, "tokenizer", "train", "--format", fmt, "--model-prefix", prefix, "--vocab-size", vocab_size,
           "--input-sentence-size", 100000]
    if pattern:
        cmd += ["--pattern", pattern]
    run(cmd + list(inputs))
    return prefix + ".model"


class Checks:
    def __init__(self):
        self.failures = 0

    def expect(self, what, ok, detail=""):
        self.failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f"  [{detail}]" if detail else ""))

    def finish(self):
        print("FAILED" if self.failures else "all passed")
        sys.exit(1 if self.failures else 0)


def python_docstrings(out_dir, packages=None, min_words=8):
    """A corpus other than linux-doc, built from what every Debian machine with Python has: the
    docstrings of the Python standard library's own sources (this interpreter's, read with
    `ast`), one text file per module, its docstrings separated by blank lines. `packages`:
    subpackage names (e.g. ['asyncio', 'email']) to take; None: the top-level modules.
    Docstrings of fewer than min_words words are left out. Returns the files written."""
    import ast
    import sysconfig
    stdlib = sysconfig.get_paths()["stdlib"]
    if packages is None:
        sources = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    else:
        sources = sorted(p for name in packages for p in glob.glob(os.path.join(stdlib, name, "**", "*.py"),
                                                                   recursive=True))
    if not sources:
        skip(f"no Python standard library sources under {stdlib}")
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for path in sources:
        try:
            tree = ast.parse(open(path, encoding="utf-8").read())
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        docs = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc.split()) >= min_words:
                    docs.append(doc.strip())
        if docs:
            name = os.path.relpath(path, stdlib).replace(os.sep, "_")[:-3] + ".txt"
            with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
                f.write("\n\n".join(docs) + "\n")
            written.append(os.path.join(out_dir, name))
    return written


def restored_rows(path):
    """The rows of a prep shard (read by h5py) up to their last real token, with the original
    token back at every masked position: [CLS] A [SEP] B [SEP] as the tokenizer gave them."""
    import h5py
    with h5py.File(path) as f:
        ids, mask, pos, mlm = (f[k][:] for k in ("input_ids", "input_mask", "masked_lm_positions", "masked_lm_ids"))
    rows = []
    for r in range(len(ids)):
        row = ids[r].copy()
        for p, t in zip(pos[r], mlm[r]):
            if p > 0:
                row[p] = t
        rows.append([int(t) for t in row[:int(mask[r].sum())]])
    return rows


def segments_missing(rows, sep, streams):
    """How many A and B segments of the rows ([CLS] A [SEP] B [SEP]) are not a run of
    consecutive ids of one of the token streams (a document's ids each)."""
    text = " X ".join(" ".join(map(str, s)) for s in streams)
    text = f" {text} "
    missing = 0
    for row in rows:
        s1 = row.index(sep)
        for seg in (row[1:s1], row[s1 + 1:-1]):
            missing += f" {' '.join(map(str, seg))} " not in text
    return missing


def byte_level_bpe(files, vocab_size, path):
    """A byte-level BPE tokenizer.json as ModernBERT's is made, trained by the tokenizers
    library on `files` to vocab_size pieces: NFC, the ByteLevel pre-tokenizer (no prefix space)
    and decoder, [UNK]/[CLS]/[SEP]/[PAD] and [MASK] (lstrip) added as specials, [CLS] A [SEP]
    post-processing. Saved at path; returns the library's Tokenizer."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(files, trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                         show_progress=False))
    tok.add_special_tokens(["[UNK]", "[CLS]", "[SEP]", "[PAD]", AddedToken("[MASK]", lstrip=True, normalized=False)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.save(path)
    return tok
