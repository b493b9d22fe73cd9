"""Parquet corpora (FineWeb, Dolma and most hub datasets ship so): `bertpre prep --format parquet`
and `bertpre tokenizer train --format parquet`, read through pyarrow (tools/parquet_text.py).

Documents of linux-doc text (20 lines of running text each) are written by pyarrow as two
Parquet files with FineWeb's columns (text, id, url, token_count), in row groups of 16 rows,
into a folder that also holds a file of another kind; the same documents as JSON lines are the
reference (the JSONL reader is another code path, and pyarrow wrote the Parquet):
  - tokenizer train on the folder (--text-field text, files *.parquet by default) writes the
    same model, byte for byte, as on the JSON lines;
  - prep on the folder writes the same shards as on the JSON lines: every dataset equal (h5py);
  - a folder that the datasets library's save_to_disk writes (two .arrow files in the IPC stream
    form), made by datasets in .venv-hf5: prep --format arrow writes the JSON lines' shards;
    --format parquet on it says --format arrow (or to_parquet) reads it; a DatasetDict's
    folder is refused naming its splits, and its train split's folder gives the shards of
    that split's JSON lines; the IPC file form reads through the helper, every row in order;
  - a row whose text is null: exit 1 naming the file, the row and the column, no shard left
    (--bad-lines stop); with --bad-lines skip a warning naming the row, and the shards of the
    JSON lines without that document;
  - a column that is not there (the error lists the file's columns), a column of integers, a
    file that is not Parquet, two columns both named text: exit 1 naming the file and the
    cause, nothing written;
  - the documents as a dictionary (a pandas Categorical's form), a string_view and a
    large_string column, a file each: prep writes the shards of the JSON lines, as for string
    columns;
  - under PYTHONIOENCODING=ascii and LC_ALL=C, CJK, Hangul, Greek, Cyrillic and accented text
    comes out of tools/parquet_text.py as UTF-8, every row equal to the written one, and prep
    (--bad-lines skip) writes the shards it writes without those variables;
  - page checksums: a file written with them reads as the one without; one byte flipped inside
    a data page of it stops prep with exit 1 and a line `bertpre: error: FILE: ... damaged`,
    no traceback, no shard;
  - 40 damaged copies of a small Parquet file (cut at 10 offsets, a bit flipped at 30
    seeded-random offsets, 10 of those in the footer) through tools/parquet_text.py: each
    exits 0 having written every row, or 1 with one line `bertpre: error: FILE: ...`; never a
    traceback.

usage: test_parquet.py BERTPRE
"""
import json
import os
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

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


HELPER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "parquet_text.py")


def run(*args, env=None):
    return subprocess.run([bertpre, *map(str, args)], capture_output=True, text=True, env=env)


def helper(path, env=None):
    """tools/parquet_text.py on the file's text column; stdout as bytes (its encoding is checked)."""
    p = subprocess.run([sys.executable, HELPER, path, "--column", "text"], capture_output=True, env=env)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


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


def prep(tok, out, fmt, *inputs, extra=(), env=None):
    return run("prep", "--tokenizer", tok, "--output", out, *[a if a != "{fmt}" else fmt for a in PREP], *extra,
               *inputs, env=env)


def one_file(tmp, name, table, **options):
    """A folder of its own holding the table as part-0.parquet: (folder, file)."""
    folder = os.path.join(tmp, name)
    os.makedirs(folder)
    path = os.path.join(folder, "part-0.parquet")
    pq.write_table(table, path, **options)
    return folder, path


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

    # Folders that `datasets` writes (save_to_disk: Arrow IPC stream files beside dataset_info.json
    # and state.json), made by the datasets library itself in .venv-hf5.
    hf5 = os.path.join(os.path.dirname(os.path.dirname(HELPER)), ".venv-hf5", "bin", "python")
    if not os.access(hf5, os.X_OK):
        print(f"SKIP (this part): {hf5} is missing; tools/setup.sh makes it (with the datasets library)")
    else:
        saved, splits = os.path.join(tmp, "saved"), os.path.join(tmp, "saved-dict")
        make = ("import json, sys, datasets\n"
                "docs = json.load(open(sys.argv[1]))\n"
                "d = datasets.Dataset.from_dict({'text': docs, 'id': list(range(len(docs)))})\n"
                "d.save_to_disk(sys.argv[2], num_shards=2)\n"
                "half = len(docs) // 2\n"
                "datasets.DatasetDict(train=d.select(range(half)), test=d.select(range(half, len(docs))))"
                ".save_to_disk(sys.argv[3])\n"
                "print(datasets.__version__)\n")
        with open(os.path.join(tmp, "docs.json"), "w") as f:
            json.dump(docs, f)
        made = subprocess.run([hf5, "-c", make, os.path.join(tmp, "docs.json"), saved, splits], capture_output=True,
                              text=True)
        arrows = sorted(n for n in os.listdir(saved) if n.endswith(".arrow")) if made.returncode == 0 else []
        expect(f"datasets {made.stdout.strip()} save_to_disk: {arrows} beside dataset_info.json and state.json",
               made.returncode == 0 and len(arrows) == 2 and os.path.exists(os.path.join(saved, "state.json")),
               made.stderr[-1500:])
        p = prep(spm, os.path.join(tmp, "from-arrow"), "arrow", saved)
        a = shards_of(os.path.join(tmp, "from-arrow"))
        expect("prep --format arrow on the save_to_disk folder writes the JSON lines' shards, every dataset equal",
               p.returncode == 0 and same_shards(a, b), p.stderr[-1500:])
        p = prep(spm, os.path.join(tmp, "arrow-as-parquet"), "parquet", saved)
        expect("prep --format parquet on that folder: exit 1 naming --format arrow (and to_parquet), no shard",
               p.returncode == 1 and "datasets' save_to_disk" in p.stderr and "--format arrow" in p.stderr
               and "to_parquet" in p.stderr and not shards_of(os.path.join(tmp, "arrow-as-parquet")), p.stderr)
        p = prep(spm, os.path.join(tmp, "arrow-dict"), "arrow", splits)
        expect("prep --format arrow on a DatasetDict's folder: exit 1 naming its splits (test, train) and the split "
               "folder to give, no shard", p.returncode == 1 and "DatasetDict" in p.stderr and "train" in p.stderr
               and "test" in p.stderr and f"{splits}/train" in p.stderr and not shards_of(
                   os.path.join(tmp, "arrow-dict")), p.stderr)
        train_jsonl = os.path.join(tmp, "train.jsonl")
        with open(train_jsonl, "w") as f:
            for d in docs[:half]:
                f.write(json.dumps({"text": d}) + "\n")
        p = prep(spm, os.path.join(tmp, "arrow-train"), "arrow", os.path.join(splits, "train"))
        q = prep(spm, os.path.join(tmp, "jsonl-train"), "jsonl", train_jsonl)
        expect("prep --format arrow on its train split's folder writes the shards of that split's JSON lines",
               p.returncode == 0 and q.returncode == 0 and same_shards(shards_of(os.path.join(tmp, "arrow-train")),
                                                                       shards_of(os.path.join(tmp, "jsonl-train"))),
               p.stderr[-1500:] + q.stderr[-1500:])
        # The file form of Arrow IPC (pyarrow's new_file), through the reader alone.
        file_form = os.path.join(tmp, "file-form.arrow")
        table = pa.table({"text": docs[:40]})
        with pa.OSFile(file_form, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=16)
        r = subprocess.run([sys.executable, HELPER, file_form, "--column", "text", "--arrow"], capture_output=True)
        rows = [json.loads(line)["text"] for line in r.stdout.decode("utf-8").splitlines()]
        expect("tools/parquet_text.py --arrow on the IPC file form (3 record batches): every row, in order",
               r.returncode == 0 and rows == docs[:40], r.stderr.decode()[-800:])

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
    expect("a null text with --bad-lines stop: exit 1 naming the file, the row and the column, no shard left (nor "
           "the --output folder it made)",
           p.returncode == 1 and f"{bad_file}: row {bad_row}: column 'text' is null" in p.stderr and
           not shards_of(out) and not os.path.exists(out), p.stderr[-1500:])  # the folder it made removed too
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
    _, twice = one_file(tmp, "twice", pa.Table.from_arrays([pa.array(docs[:8]), pa.array(docs[8:16])],
                                                           names=["text", "text"]))
    for what, inputs, field, words in (
            ("a column that is not there", [part0], "content", ["no column 'content'", "text, id, url, token_count"]),
            ("a column of integers", [part0], "token_count", ["column 'token_count' holds int64, not strings"]),
            ("a file that is not Parquet", [not_parquet], "text", [not_parquet, "not a readable Parquet file"]),
            ("two columns named text", [twice], "text", [f"{twice}: 2 columns are named 'text'"])):
        out = os.path.join(tmp, "bad-" + field)
        p = run("prep", "--tokenizer", spm, "--output", out, "--format", "parquet", "--text-field", field,
                "--no-progress", *inputs)
        expect(f"{what}: exit 1 naming the file and the cause, no shard written, no traceback",
               p.returncode == 1 and all(w in p.stderr for w in words) and not shards_of(out) and
               "Traceback" not in p.stderr, p.stderr[-1500:])

    # The other string columns pyarrow writes: each row reads as from a string column.
    kinds = os.path.join(tmp, "kinds")
    os.makedirs(kinds)
    third = len(docs) // 3
    for k, (name, column) in enumerate((("dictionary", pa.array(docs[:third]).dictionary_encode()),
                                        ("string_view", pa.array(docs[third:2 * third], pa.string_view())),
                                        ("large_string", pa.array(docs[2 * third:], pa.large_string())))):
        pq.write_table(pa.table({"text": column}), os.path.join(kinds, f"part-{k}-{name}.parquet"), row_group_size=16)
    out = os.path.join(tmp, "from-kinds")
    p = prep(spm, out, "parquet", kinds)
    expect(f"the {len(docs)} documents as a dictionary, a string_view and a large_string column (a file each): prep "
           "writes the JSON lines' shards, as for string columns", p.returncode == 0 and same_shards(shards_of(out), b),
           p.stderr[-1500:])

    # The text goes out as UTF-8 whatever the locale's encoding.
    scripts = ["naïve café, Ünïcödé", "漢字かな交じり文", "한국어 텍스트", "Ελληνικά και русский"]
    intl = [d + " " + scripts[i % len(scripts)] for i, d in enumerate(docs[:40])]
    folder_i, intl_file = one_file(tmp, "intl", pa.table({"text": intl}), row_group_size=16)
    ascii_env = dict(os.environ, PYTHONIOENCODING="ascii", LC_ALL="C")
    rc, stdout, stderr = helper(intl_file, env=ascii_env)
    try:
        got = [json.loads(line)["text"] for line in stdout.decode("utf-8").splitlines()]
    except ValueError as e:  # UnicodeDecodeError too: not UTF-8
        got = [f"({e})"]
    expect(f"PYTHONIOENCODING=ascii LC_ALL=C: parquet_text.py writes the {len(intl)} rows of CJK, Hangul, Greek, "
           "Cyrillic and accents as UTF-8, each equal to the written one", rc == 0 and got == intl, stderr[-1500:])
    p = prep(spm, os.path.join(tmp, "intl-ascii"), "parquet", folder_i, extra=["--bad-lines", "skip"], env=ascii_env)
    q = prep(spm, os.path.join(tmp, "intl-ref"), "parquet", folder_i)
    expect("PYTHONIOENCODING=ascii LC_ALL=C: prep --bad-lines skip writes the shards it writes without them",
           p.returncode == 0 and q.returncode == 0 and
           same_shards(shards_of(os.path.join(tmp, "intl-ascii")), shards_of(os.path.join(tmp, "intl-ref"))),
           p.stderr[-1500:] + q.stderr[-1500:])

    # Page checksums: verified, so a damaged page is an error, not text to train on.
    summed = os.path.join(tmp, "summed.parquet")
    pq.write_table(pa.table({"text": docs[:half]}), summed, row_group_size=16, write_page_checksum=True,
                   compression="none", use_dictionary=False)  # the page holds the text as it is
    rc, stdout, stderr = helper(summed)
    expect("a file with page checksums: parquet_text.py writes what it writes for the file without them",
           rc == 0 and stdout == helper(part0)[1], stderr[-1500:])
    chunk = pq.ParquetFile(summed).metadata.row_group(1).column(0)
    at = chunk.data_page_offset + chunk.total_compressed_size // 2  # among the texts of rows 16-31
    data = bytearray(open(summed, "rb").read())
    data[at] ^= 0x01
    folder_d = os.path.join(tmp, "damaged")
    os.makedirs(folder_d)
    damaged = os.path.join(folder_d, "part-0.parquet")
    with open(damaged, "wb") as f:
        f.write(data)
    out = os.path.join(tmp, "from-damaged")
    p = prep(spm, out, "parquet", folder_d)
    expect(f"a byte flipped at {at} inside a checksummed data page: prep exits 1 with 'bertpre: error: FILE: "
           "... damaged', no traceback, no shard",
           p.returncode == 1 and "Traceback" not in p.stderr and not shards_of(out) and
           any(l.startswith(f"bertpre: error: {damaged}: ") and "damaged" in l for l in p.stderr.splitlines()),
           p.stderr[-1500:])

    # Damaged files: whatever pyarrow raises, one error line naming the file.
    small = os.path.join(tmp, "small.parquet")
    rows = [f"row {i}: {lines[i]}" for i in range(48)]
    pq.write_table(pa.table({"text": rows, "n": list(range(48))}), small, row_group_size=16)
    good = open(small, "rb").read()
    footer = int.from_bytes(good[-8:-4], "little") + 8  # the footer's metadata, its length and PAR1
    rng = random.Random(43)
    variants = [(f"cut at {n}", good[:n]) for n in
                (0, 1, 4, 8, len(good) // 4, len(good) // 2, len(good) - footer, len(good) - 8, len(good) - 5,
                 len(good) - 1)]
    for k in range(30):
        at = rng.randrange(len(good)) if k < 20 else len(good) - 1 - rng.randrange(footer)
        flipped = bytearray(good)
        flipped[at] ^= 1 << rng.randrange(8)
        variants.append((f"bit flipped at {at}{' (footer)' if k >= 20 else ''}", bytes(flipped)))
    fuzz = os.path.join(tmp, "fuzz")
    os.makedirs(fuzz)
    paths = []
    for k, (_, data) in enumerate(variants):
        paths.append(os.path.join(fuzz, f"v{k}.parquet"))
        with open(paths[-1], "wb") as f:
            f.write(data)
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        results = list(pool.map(helper, paths))
    wrong = []
    for (how, _), path, (rc, stdout, stderr) in zip(variants, paths, results):
        written = stdout.count(b"\n")
        ended_well = rc == 0 and written == len(rows)
        stopped_well = rc == 1 and stderr.startswith(f"bertpre: error: {path}: ") and stderr.count("\n") == 1
        if not (ended_well or stopped_well) or "Traceback" in stderr:
            wrong.append(f"{how}: exit {rc}, {written} rows: {stderr[-600:]}")
    expect(f"{len(variants)} damaged copies of a {len(good)}-byte Parquet file (cut at 10 offsets, a bit flipped at 30,"
           f" 10 of them in the {footer}-byte footer): each exits 0 with all {len(rows)} rows or 1 with one "
           f"'bertpre: error: FILE: ...' line, never a traceback ({sum(r[0] == 1 for r in results)} exit 1)",
           not wrong, "\n".join(wrong))

sys.exit(checks.exit_status())
