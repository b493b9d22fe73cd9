"""`bertpre prep --format jsonl`: documents from JSON lines give the same shards, byte for
byte in every dataset (read by h5py), as the same documents written one per file and read
with `--format text`, for plain, gzip and zstd JSONL, for another --text-field, for lines with integers beyond 64
bits in other fields (valid JSON: Python's json reads them) and for a file opening with a
byte-order mark (dropped, as Python's utf-8-sig does); a line
that is not JSON, is not an object, lacks the field or holds a non-string there stops prep
with an error naming the file and the line (exit 1, no shard), or with --bad-lines skip is
named in a warning and left out (the shards then equal those of the file without it); a zstd
file cut short (`zstd -t` calls it truncated) stops prep (jsonl, with --bad-lines skip too, and
text) and tokenizer train naming the file, with no output; a binary file among text files is
left out with a warning naming it (shards equal those of the text files alone), a Latin-1 file
named in a warning with its first bad byte, an HTML page left out with a warning (--markup keep
reads it, and the cut-sentence warning then names the missing sentence breaks); --strict makes
each an error; HTML documents among JSONL lines and Parquet rows are left out one by one, named
by line (row), the rest read (the shards of the documents alone); a README opening with badge
links (closing </a> alone) is read as text; a single-document file
with --eval-fraction is refused naming --doc-per block, which then gives both shards.
usage: test_jsonl.py BERTPRE"""
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

import checks
from data_fixtures import Checks, real_lines, require, run

bertpre = sys.argv[1]
require(bertpre, "hdf5")
with checks.needs("h5py, numpy and tokenizers", hint=None):
    import h5py
    import numpy as np
    from tokenizers import BertWordPieceTokenizer

c = Checks()
lines = real_lines(200_000)
# Documents of running text: paragraphs of 4 lines, 3 paragraphs a document.
docs = []
for i in range(0, len(lines) - 12, 12):
    paras = [" ".join(lines[i + 4 * k:i + 4 * k + 4]) for k in range(3)]
    docs.append("\n\n".join(paras))


def shards(d):
    out = {}
    for path in sorted(glob.glob(os.path.join(d, "*.hdf5"))):
        with h5py.File(path) as f:
            out[os.path.basename(path)] = {k: f[k][:] for k in f}
    return out


def same(a, b):
    return a.keys() == b.keys() and all(a[f].keys() == b[f].keys() and all(np.array_equal(a[f][k], b[f][k])
                                                                           for k in a[f]) for f in a)


with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "train.txt")
    with open(corpus, "w") as f:
        f.write("\n".join(lines) + "\n")
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train([corpus], vocab_size=1500, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                  show_progress=False)
    trainer.save_model(tmp)
    vocab = os.path.join(tmp, "vocab.txt")

    def prep(name, fmt, *inputs, extra=(), check=True):
        out = os.path.join(tmp, name)
        p = run([bertpre, "prep", "--tokenizer", vocab, "--output", out, "--format", fmt, "--seq-length", 64,
                 "--max-predictions", 8, "--dupe-factor", 2, "--no-progress", *extra, *inputs], check=check)
        return out, p

    text_dir = os.path.join(tmp, "text")
    os.mkdir(text_dir)
    for i, d in enumerate(docs):
        with open(os.path.join(text_dir, f"doc-{i:05d}.txt"), "w") as f:
            f.write(d + "\n")
    ref_dir, _ = prep("ref", "text", text_dir)
    ref = shards(ref_dir)
    n_rows = sum(len(v["input_ids"]) for v in ref.values())

    plain = os.path.join(tmp, "docs.jsonl")
    with open(plain, "w") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"id": i, "text": d, "meta": {"n": [1, 2]}}) + "\n")
    with open(plain, "rb") as f, gzip.open(plain + ".gz", "wb") as g:
        g.write(f.read())
    variants = [("plain", plain, ()), ("gzip", plain + ".gz", ())]
    if shutil.which("zstd"):
        subprocess.run(["zstd", "-q", "-f", plain, "-o", plain + ".zst"], check=True)
        variants.append(("zstd", plain + ".zst", ()))
    else:
        print("SKIP (zstd part): no zstd command to write the file")
    body = os.path.join(tmp, "body.jsonl")
    with open(body, "w") as f:
        for d in docs:
            f.write(json.dumps({"text": 7, "body": d}) + "\n")
    variants.append(("--text-field body", body, ("--text-field", "body")))
    # Valid JSON that jansson alone refuses: integers beyond 64 bits in a field prep does not
    # read (dedup pipelines' uint64 hashes; Python's json reads them).
    hashed = os.path.join(tmp, "hashed.jsonl")
    with open(hashed, "w") as f:
        for i, d in enumerate(docs):
            f.write(json.dumps({"minhash": 18446744073709551615 - i, "big": 10 ** 30, "text": d}) + "\n")
    with open(hashed) as f:
        assert all(json.loads(l)["minhash"] > 2 ** 63 for l in f)
    variants.append(("uint64 and 10^30 integers beside the text", hashed, ()))
    bom = os.path.join(tmp, "bom.jsonl")
    with open(plain, "rb") as f, open(bom, "wb") as g:
        g.write(b"\xef\xbb\xbf" + f.read())
    variants.append(("a byte-order mark opening the file", bom, ()))
    for what, path, extra in variants:
        out, _ = prep(f"j-{what.replace(' ', '')}", "jsonl", path, extra=extra)
        c.expect(f"jsonl ({what}, {len(docs)} documents): shards equal --format text's of the same documents "
                 f"({n_rows} rows, every dataset)", same(shards(out), ref))

    # Bad lines: not JSON (line 3), not an object (5), no field (8), a non-string field (11).
    bad = os.path.join(tmp, "bad.jsonl")
    good_only = os.path.join(tmp, "good.jsonl")
    bad_lines = {3: "{\"text\": \"unterminated", 5: "[1, 2, 3]", 8: "{\"title\": \"no text here\"}",
                 11: "{\"text\": [\"a list\"]}"}
    with open(bad, "w") as f, open(good_only, "w") as g:
        k = 0
        for line_no in range(1, len(docs) + len(bad_lines) + 1):
            if line_no in bad_lines:
                f.write(bad_lines[line_no] + "\n")
            else:
                f.write(json.dumps({"text": docs[k]}) + "\n")
                g.write(json.dumps({"text": docs[k]}) + "\n")
                k += 1
    out, p = prep("bad-stop", "jsonl", bad, check=False)
    c.expect("a line that is not JSON: exit 1 naming the file and line 3, no shard", p.returncode == 1 and
             f"{bad}:3: not JSON" in p.stderr and not glob.glob(os.path.join(out, "*.hdf5")), p.stderr.strip())
    out, p = prep("bad-skip", "jsonl", bad, extra=("--bad-lines", "skip"))
    warned = all(f"{bad}:{n}:" in p.stderr for n in bad_lines)
    c.expect("--bad-lines skip: a warning naming each bad line (3 not JSON, 5 not an object, 8 no field, 11 not a "
             "string), the count in the summary", warned and "not JSON" in p.stderr and "not an object" in p.stderr
             and 'no field "text"' in p.stderr and "is not a string" in p.stderr and
             "4 bad JSONL lines skipped" in p.stdout, p.stderr.strip() + p.stdout.strip())
    good_out, _ = prep("good", "jsonl", good_only)
    c.expect("--bad-lines skip: the shards equal those of the file without the bad lines",
             same(shards(out), shards(good_out)))
    # A cut zstd file (half its bytes, as an interrupted copy leaves it): zstd -t calls it
    # truncated; prep stops naming the file, with --bad-lines skip too (the cut line is no bad
    # JSON line to leave out: the rest of the file is missing), and with --format text.
    if shutil.which("zstd"):
        cut = os.path.join(tmp, "cut.jsonl.zst")
        with open(plain + ".zst", "rb") as f:
            data = f.read()
        with open(cut, "wb") as f:
            f.write(data[:len(data) // 2])
        ztest = subprocess.run(["zstd", "-t", cut], capture_output=True, text=True)
        for what, fmt, extra in (("jsonl", "jsonl", ()), ("jsonl --bad-lines skip", "jsonl", ("--bad-lines", "skip")),
                                 ("text", "text", ())):
            out, p = prep(f"cut-{fmt}-{len(extra)}", fmt, cut, extra=extra, check=False)
            c.expect(f"a cut zstd file ({what}; zstd -t: exit {ztest.returncode}): exit 1 naming the file as cut "
                     "short, no shard", ztest.returncode != 0 and p.returncode == 1 and
                     f"{cut}: the zstd data ends inside a frame" in p.stderr and
                     not glob.glob(os.path.join(out, "*.hdf5")), p.stderr.strip() + ztest.stderr)
        p = run([bertpre, "tokenizer", "train", "--format", "text", "--vocab-size", 300, "--model-prefix",
                 os.path.join(tmp, "cut-spm"), cut], check=False)
        c.expect("a cut zstd file: tokenizer train stops the same way, no model written",
                 p.returncode == 1 and "ends inside a frame" in p.stderr and
                 not os.path.exists(os.path.join(tmp, "cut-spm.model")), p.stderr.strip())
    # Files that are not UTF-8 text among the inputs: a binary file (NUL bytes) is left out with
    # a warning naming it, so the shards equal those of the text files alone; a Latin-1 file is
    # named in a warning with its first bad byte; --strict makes each an error naming the file.
    mixed = os.path.join(tmp, "mixed")
    shutil.copytree(text_dir, mixed)
    binary = os.path.join(mixed, "doc-00001.5.bin")
    with open(binary, "wb") as f:
        f.write(bytes(range(256)) * 40)
    out, p = prep("mixed-out", "text", mixed, check=False)
    c.expect("a binary file among the text files: a warning naming it, left out (shards equal those of the text "
             "files alone)", p.returncode == 0 and f"{binary}: a binary file" in p.stderr and "left out" in p.stderr
             and same(shards(out), ref), p.stderr.strip())
    out, p = prep("mixed-strict", "text", mixed, extra=("--strict",), check=False)
    c.expect("--strict: the binary file is an error naming it, no shard", p.returncode == 1 and
             f"{binary}: a binary file" in p.stderr and not glob.glob(os.path.join(out, "*.hdf5")), p.stderr.strip())
    os.remove(binary)
    latin = os.path.join(mixed, "doc-99999.txt")
    with open(latin, "wb") as f:
        f.write("Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e is a dessert. It is served cold.\n".encode("latin-1"))
    out, p = prep("latin", "text", mixed, check=False)
    c.expect("a Latin-1 file: a warning naming it and its first byte that is not UTF-8 (0xe9 at offset 3)",
             p.returncode == 0 and f"{latin}: not UTF-8 (byte 0xe9 at offset 3" in p.stderr, p.stderr.strip())
    out, p = prep("latin-strict", "text", mixed, extra=("--strict",), check=False)
    c.expect("--strict: the Latin-1 file is an error naming it", p.returncode == 1 and
             f"{latin}: not UTF-8" in p.stderr, p.stderr.strip())
    # Markup among the text files: an HTML page (as a documentation folder holds them) is left
    # out with a warning naming it (the shards equal those of the text files alone); --markup
    # keep reads it, tags and all, and then the cut-sentence warning names the missing sentence
    # breaks instead of advising a longer --seq-length; --strict makes it an error.
    marked = os.path.join(tmp, "marked")
    shutil.copytree(text_dir, marked)
    page = os.path.join(marked, "doc-00002.5.html")
    cells = "".join(f"<td class=\"c\">{w}</td>" for w in " ".join(docs[:40]).split()[:3000])
    with open(page, "w") as f:
        f.write("<!DOCTYPE html>\n<html><head><title>Table</title></head><body>\n<table><tr>" + cells +
                "</tr></table>\n</body></html>\n")
    out, p = prep("marked-out", "text", marked, check=False)
    c.expect("an HTML file among the text files: a warning naming it, left out (shards equal those of the text "
             "files alone)", p.returncode == 0 and f"{page}: an HTML document" in p.stderr and "left out" in p.stderr
             and same(shards(out), ref), p.stderr.strip())
    out, p = prep("marked-keep", "text", marked, extra=("--markup", "keep"), check=False)
    c.expect("--markup keep: read, and the cut-off warning names the missing sentence breaks, not --seq-length",
             p.returncode == 0 and "an HTML document" not in p.stderr and "no sentence breaks" in p.stderr and
             "raise --seq-length" not in p.stderr, p.stderr.strip())
    out, p = prep("marked-strict", "text", marked, extra=("--strict",), check=False)
    c.expect("--strict: the HTML file is an error naming it", p.returncode == 1 and f"{page}: an HTML document" in
             p.stderr, p.stderr.strip())
    # Markup is judged per document with one rule for every format: HTML pages among JSONL lines
    # and Parquet rows leave those documents out (named), the rest of the file is read; a README
    # whose badge links close a single tag name is prose, read.
    table = "".join(f"<tr><td class=\"c\">{w}</td><td>{w}</td></tr>" for w in docs[0].split()[:60])
    pages = {4: "<!DOCTYPE html>\n<html><body><p>A page.</p></body></html>",
             10: f"<div><table>{table}</table></div>", 21: f"<ul>{table}</ul><p>{docs[1]}</p>"}
    rows, k = [], 0
    for line_no in range(1, len(docs) + len(pages) + 1):
        if line_no in pages:
            rows.append(pages[line_no])
        else:
            rows.append(docs[k])
            k += 1
    paged = os.path.join(tmp, "paged.jsonl")
    with open(paged, "w") as f:
        f.write("".join(json.dumps({"text": r}) + "\n" for r in rows))
    out, p = prep("paged", "jsonl", paged, check=False)
    c.expect(f"jsonl with {len(pages)} HTML documents among {len(docs)}: exit 0, each named by line and left out, "
             "the shards those of the documents alone", p.returncode == 0
             and all(f"{paged}:{n}: " in p.stderr for n in pages) and same(shards(out), ref), p.stderr.strip())
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        print(f"SKIP (markup in Parquet rows): no pyarrow ({e})")
        pa = None
    if pa is not None:
        paged_pq = os.path.join(tmp, "paged.parquet")
        pq.write_table(pa.table({"text": rows}), paged_pq)
        out, p = prep("paged-pq", "parquet", paged_pq, check=False)
        c.expect(f"parquet rows with the same {len(pages)} HTML documents: exit 0, each named and left out, the "
                 "shards those of the documents alone", p.returncode == 0 and p.stderr.count(f"{paged_pq}: document")
                 == len(pages) and same(shards(out), ref), p.stderr.strip())
    readme_dir = os.path.join(tmp, "readme")
    shutil.copytree(text_dir, readme_dir)
    badges = "".join(f'<a href="https://example.org/project/{n}"><img src="https://img.shields.io/badge/build-{n}-green'
                     f'.svg" alt="badge {n}"></a>\n' for n in range(25))
    readme = os.path.join(readme_dir, "doc-00003.5.md")
    with open(readme, "w") as f:
        f.write(badges + "\n" + docs[2] + "\n")
    kept_out, _ = prep("readme-keep", "text", readme_dir, extra=("--markup", "keep"))
    out, p = prep("readme", "text", readme_dir, check=False)
    c.expect("a prose README opening with 25 badge links (closing </a> alone): read as text, not named in a warning "
             "(the shards equal those of --markup keep)", p.returncode == 0 and readme not in p.stderr
             and same(shards(out), shards(kept_out)), p.stderr.strip())
    # One long file (every document in it, a blank line between them) read as one document
    # (--doc-per file) cannot be split into training and held-out documents: the error says
    # so and names --doc-per block, with which the same file gives both shards.
    one = os.path.join(tmp, "one-file", "all.txt")
    os.makedirs(os.path.dirname(one))
    with open(one, "w") as f:
        f.write("\n\n".join(docs) + "\n")
    out, p = prep("one-doc", "text", one, extra=("--eval-fraction", "0.1"), check=False)
    c.expect("a single-document file with --eval-fraction 0.1: exit 1 naming --doc-per block", p.returncode == 1 and
             "no usable text" in p.stderr and "--doc-per block" in p.stderr, p.stderr.strip())
    out, p = prep("one-doc-blocks", "text", one, extra=("--eval-fraction", "0.1", "--doc-per", "block"), check=False)
    c.expect("the same file with --doc-per block: exit 0, train and eval shards", p.returncode == 0 and
             glob.glob(os.path.join(out, "eval-*.hdf5")) and glob.glob(os.path.join(out, "train-*.hdf5")),
             p.stderr.strip())
    no_field = os.path.join(tmp, "nofield.jsonl.gz")
    with gzip.open(no_field, "wt") as f:
        f.write(json.dumps({"text": docs[0]}) + "\n" + json.dumps({"content": docs[1]}) + "\n")
    out, p = prep("nofield", "jsonl", no_field, check=False)
    c.expect("a gzip JSONL line without the field: exit 1 naming the file and line 2 and the option",
             p.returncode == 1 and f"{no_field}:2: no field \"text\"" in p.stderr and "--text-field" in p.stderr,
             p.stderr.strip())
c.finish()
