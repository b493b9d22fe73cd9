"""Parquet corpora (FineWeb, Dolma and most hub datasets ship so): `bertpre prep --format parquet`
and `bertpre tokenizer train --format parquet`, read through pyarrow (tools/parquet_text.py).

Documents of linux-doc text (20 lines of running text each) are written by pyarrow as two
Parquet files with FineWeb's columns (text, id, url, token_count), in row groups of 16 rows,
into a folder that also holds a file of another kind; the same documents as JSON lines are the
reference (the JSONL reader is another code path, and pyarrow wrote the Parquet):
  - tokenizer train on the folder (--text-field text, files *.parquet by default) writes the
    same model, byte for byte, as on the JSON lines;
  - prep on the folder writes the same shards as on the JSON lines: every dataset equal (h5py);
  - a row whose text is null: exit 1 naming the file, the row and the column, no shard left
    (--bad-lines stop); with --bad-lines skip a warning naming the row, and the shards of the
    JSON lines without that document;
  - a column that is not there (the error lists the file's columns), a column of integers, a
    file that is not Parquet: exit 1 naming the file and the cause, nothing written.

usage: test_parquet.py BERTPRE
"""
import json
import os
import subprocess
import sys
import tempfile

from data_fixtures import real_lines, require
import checks
from checks import expect

bertpre = os.path.abspath(sys.argv[1])
require(bertpre, "hdf5", "sentencepiece")
with checks.needs("h5py, numpy and pyarrow"):
    import h5py
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq


def run(*args):
    return subprocess.run([bertpre, *map(str, args)], capture_output=True, text=True)


def shards_of(directory):
    out = {}
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if name.endswith(".hdf5"):
            with h5py.File(os.path.join(directory, name), "r") as f:
                out[name] = {k: np.asarray(f[k][:]) for k in f.keys()}
    return out


def same_shards(a, b):
    return bool(a) and a.keys() == b.keys() and all(
        a[n].keys() == b[n].keys() and all(np.array_equal(a[n][k], b[n][k]) for k in a[n]) for n in a)


PREP = ["--format", "{fmt}", "--text-field", "text", "--seq-length", 64, "--max-predictions", 10, "--dupe-factor", 2,
        "--eval-fraction", 0.1, "--no-progress"]


def prep(tok, out, fmt, *inputs, extra=()):
    return run("prep", "--tokenizer", tok, "--output", out, *[a if a != "{fmt}" else fmt for a in PREP], *extra,
               *inputs)


with tempfile.TemporaryDirectory() as tmp:
    lines = real_lines(250_000)
    docs = [" ".join(lines[i:i + 20]) for i in range(0, len(lines), 20)]
    half = len(docs) // 2
    folder = os.path.join(tmp, "parquet")
    os.makedirs(folder)
    for k, part in enumerate((docs[:half], docs[half:])):
        table = pa.table({"text": part, "id": [f"doc-{k}-{i}" for i in range(len(part))],
                          "url": [f"https://example.org/{k}/{i}" for i in range(len(part))],
                          "token_count": [len(d.split()) for d in part]})
        pq.write_table(table, os.path.join(folder, f"part-{k}.parquet"), row_group_size=16)
    with open(os.path.join(folder, "README.txt"), "w") as f:
        f.write("not a Parquet file: left out by the default pattern\n")
    jsonl = os.path.join(tmp, "docs.jsonl")
    with open(jsonl, "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")

    models = {}
    for fmt, inputs in (("parquet", [folder]), ("jsonl", [jsonl])):
        prefix = os.path.join(tmp, f"spm-{fmt}")
        p = run("tokenizer", "train", "--format", fmt, "--text-field", "text", "--model-prefix", prefix,
                "--vocab-size", 600, "--input-sentence-size", 100000, *inputs)
        expect(f"tokenizer train --format {fmt}: exit 0", p.returncode == 0, p.stderr[-1500:])
        models[fmt] = open(prefix + ".model", "rb").read() if p.returncode == 0 else b""
    expect("tokenizer train on the Parquet folder writes the JSON lines' model byte for byte",
           models["parquet"] and models["parquet"] == models["jsonl"])
    spm = os.path.join(tmp, "spm-jsonl.model")

    p = prep(spm, os.path.join(tmp, "from-parquet"), "parquet", folder)
    q = prep(spm, os.path.join(tmp, "from-jsonl"), "jsonl", jsonl)
    a, b = shards_of(os.path.join(tmp, "from-parquet")), shards_of(os.path.join(tmp, "from-jsonl"))
    expect(f"prep --format parquet on the folder ({len(docs)} documents in 2 files of 16-row groups, README.txt left "
           f"out) writes the JSON lines' shards, every dataset equal ({sorted(a)})",
           p.returncode == 0 and q.returncode == 0 and same_shards(a, b), p.stderr[-1500:] + q.stderr[-1500:])

    # A null text.
    nulls = os.path.join(tmp, "nulls")
    os.makedirs(nulls)
    with_null = docs[:half]
    bad_row = 21
    with_null = with_null[:bad_row] + [None] + with_null[bad_row:]
    bad_file = os.path.join(nulls, "part-0.parquet")
    pq.write_table(pa.table({"text": pa.array(with_null, pa.string())}), bad_file, row_group_size=16)
    out = os.path.join(tmp, "stop")
    p = prep(spm, out, "parquet", nulls)
    expect("a null text with --bad-lines stop: exit 1 naming the file, the row and the column, no shard left",
           p.returncode == 1 and f"{bad_file}: row {bad_row}: column 'text' is null" in p.stderr and
           not shards_of(out) and not [n for n in os.listdir(out) if n.endswith(".partial")], p.stderr[-1500:])
    jsonl_half = os.path.join(tmp, "half.jsonl")
    with open(jsonl_half, "w") as f:
        for d in docs[:half]:
            f.write(json.dumps({"text": d}) + "\n")
    p = prep(spm, os.path.join(tmp, "skip"), "parquet", nulls, extra=["--bad-lines", "skip"])
    q = prep(spm, os.path.join(tmp, "skip-ref"), "jsonl", jsonl_half)
    expect("--bad-lines skip: a warning naming the row, and the shards of the documents without it",
           p.returncode == 0 and f"row {bad_row}: column 'text' is null: row skipped" in p.stderr and
           same_shards(shards_of(os.path.join(tmp, "skip")), shards_of(os.path.join(tmp, "skip-ref"))),
           p.stderr[-1500:])

    part0 = os.path.join(folder, "part-0.parquet")
    not_parquet = os.path.join(tmp, "fake.parquet")
    with open(not_parquet, "w") as f:
        f.write("text\nhello\n")
    for what, inputs, field, words in (
            ("a column that is not there", [part0], "content", ["no column 'content'", "text, id, url, token_count"]),
            ("a column of integers", [part0], "token_count", ["column 'token_count' holds int64, not strings"]),
            ("a file that is not Parquet", [not_parquet], "text", [not_parquet, "not a readable Parquet file"])):
        out = os.path.join(tmp, "bad-" + field)
        p = run("prep", "--tokenizer", spm, "--output", out, "--format", "parquet", "--text-field", field,
                "--no-progress", *inputs)
        expect(f"{what}: exit 1 naming the file and the cause, no shard written",
               p.returncode == 1 and all(w in p.stderr for w in words) and not shards_of(out), p.stderr[-1500:])

sys.exit(checks.exit_status())
