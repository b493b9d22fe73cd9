"""Packed MLM-only rows from `bertpre prep --packing full-sentences|doc-sentences|contiguous` (RoBERTa's
FULL-SENTENCES and DOC-SENTENCES, and run_mlm.py's contiguous blocks), read back with h5py.

linux-doc lines (a sentence per line, a blank line every 20 lines between documents) go through
prep at seq 64 with 2 passes and no held-out share; the reference is the sentencepiece
package's tokenization of each line with the same model, documents as the blank lines cut them:
  - the shards say "packing" = the option (a file attribute NVIDIA's loader ignores); every row
    is [CLS] ... [SEP] with a prefix input_mask, segment ids and NSP labels 0;
  - every token of the input appears in the train rows exactly twice (2 passes), no other token
    but the separators (their masks undone first);
  - each [SEP]-delimited part of a row is a run of one document's tokens; FULL-SENTENCES: a part
    followed by another ends its document and the next begins one (a document boundary inside a
    row has a [SEP]), and some rows cross documents; DOC-SENTENCES: one part per row;
  - rows start at a sentence start except where a sentence longer than a row goes on (at most
    that many rows);
  - the real-token share prep prints equals the rows' (input_mask ones over rows x 64), FULL's
    above DOC's;
  - contiguous (run_mlm.py's group_texts): every row full but the last of a pass, rows crossing
    documents with a [SEP] and starting inside sentences; its share above FULL's above DOC's;
With --separate-documents (ModernBERT's packing: full-sentences and contiguous), the same text:
  - the shards hold document_starts [N, 64 / 3] (integers); every row is a sequence of pieces
    [CLS] ... [SEP] whose [CLS] positions are the row's document_starts (0 first, then zeros);
  - each piece a non-empty run of one document's tokens; in a row of several pieces, each but the
    last ends its document and the next piece begins the following document (the pieces in
    between whole documents); full-sentences rows start at a sentence start but where a long
    sentence goes on; contiguous rows full but up to two short where a document ends there (a
    [SEP] [CLS] is put only with room for a token after it) but the last of a pass;
  - every input token appears exactly twice, no other token but the separators; no masked
    position on a [CLS] or [SEP] (inner ones included); the printed real-token share equals the
    rows';
  - --separate-documents with doc-sentences or pairs is refused in one line before any work
    (nothing written); train.objective mlm trains and evaluates such shards.
And on the demo's corpus (linux-doc's .rst.gz, --format text, seq 64, as tools/demo.sh prepares
it, here its admin-guide subtree) contiguous fills more than 95% of the positions; FULL-SENTENCES
fills what it prints (about 80% at seq 64 with whole sentences).
Training: train.objective mlm+nsp on packed shards (train or eval, the attribute also as h5py
writes a str) is refused naming the shard and the packing, a 'packing' that names none is an error; mlm trains and evaluates them; `bertpre eval` of an mlm+nsp checkpoint on them
prints no NSP number.

usage: test_packing.py BERTPRE
"""
import collections
import json
import os
import re
import sys
import tempfile

from data_fixtures import linux_doc, real_lines, require, run, train_tokenizer
import checks
from checks import expect

bertpre = os.path.abspath(sys.argv[1])
require(bertpre, "hdf5", "sentencepiece")
with checks.needs("h5py, numpy and sentencepiece"):
    import h5py
    import numpy as np
    import sentencepiece

S, P, PASSES = 64, 10, 2
CLS, SEP = 2, 3


def every_token_twice(what, tokens, reference):
    """The rows' text tokens are the input's, each PASSES times (one per pass), and no other."""
    got = collections.Counter(tokens)
    want = collections.Counter({t: PASSES * n for t, n in reference.items()})
    diff = (got - want) + (want - got)
    expect(f"{what}: every input token in the rows exactly {PASSES} times, no other ({sum(want.values())} tokens; "
           f"{sum(diff.values())} differ)", not diff, list(diff.items())[:5])


def read_rows(shard):
    """(packing attribute, rows as original token lists, input_mask, segment_ids, labels)."""
    with h5py.File(shard, "r") as h:
        packing = h.attrs.get("packing")
        packing = packing.decode() if isinstance(packing, bytes) else packing
        ids, mask = h["input_ids"][:], h["input_mask"][:]
        pos, labels = h["masked_lm_positions"][:], h["masked_lm_ids"][:]
        seg, nsp = h["segment_ids"][:], h["next_sentence_labels"][:]
    for r in range(len(ids)):
        for k in range(pos.shape[1]):
            if pos[r, k] == 0:
                break
            ids[r, pos[r, k]] = labels[r, k]
    rows = [ids[r, :int(mask[r].sum())].tolist() for r in range(len(ids))]
    return packing, rows, mask, seg, nsp


def printed_share(out):
    m = re.search(r"real tokens fill ([0-9.]+)% of their", out)
    return float(m.group(1)) / 100 if m else -1.0


with tempfile.TemporaryDirectory() as tmp:
    lines = real_lines(200_000)
    corpus = os.path.join(tmp, "corpus.txt")
    docs_lines = [lines[i:i + 20] for i in range(0, len(lines), 20)]
    with open(corpus, "w") as f:
        f.write("\n\n".join("\n".join(d) for d in docs_lines) + "\n")
    spm = train_tokenizer(bertpre, os.path.join(tmp, "spm"), [corpus], 500, fmt="lines", pattern=None)
    sp = sentencepiece.SentencePieceProcessor(model_file=spm)
    docs = [[sp.encode(line) for line in d] for d in docs_lines]
    docs = [[s for s in d if s] for d in docs]
    docs = [d for d in docs if d]
    reference = collections.Counter(t for d in docs for s in d for t in s)
    # Every document's tokens as "a,b,c,", documents between '|'; the offsets where sentences start.
    plain, starts = "|", set()
    for d in docs:
        for sentence in d:
            starts.add(len(plain))
            plain += "".join(f"{t}," for t in sentence)
        plain += "|"
    long_pieces = sum(-(-len(s) // (S - 2)) - 1 for d in docs for s in d)

    shares = {}
    for packing in ("full-sentences", "doc-sentences", "contiguous"):
        out_dir = os.path.join(tmp, packing)
        p = run([bertpre, "prep", "--tokenizer", spm, "--output", out_dir, "--format", "lines", "--seq-length", S,
                 "--max-predictions", P, "--packing", packing, "--dupe-factor", PASSES, "--shards", 2,
                 "--no-progress", corpus])
        rows, attrs, layout_ok = [], set(), True
        for name in sorted(os.listdir(out_dir)):
            if not name.endswith(".hdf5"):
                continue
            attr, part, mask, seg, nsp = read_rows(os.path.join(out_dir, name))
            attrs.add(attr)
            lengths = mask.sum(1)
            layout_ok &= bool((mask == (np.arange(S)[None, :] < lengths[:, None])).all() and (seg == 0).all()
                              and (nsp == 0).all())
            layout_ok &= all(r[0] == CLS and r[-1] == SEP and len(r) >= 3 for r in part)
            rows += part
        expect(f"{packing}: shards say packing '{packing}'; rows [CLS] ... [SEP], prefix input_mask, segment ids and "
               f"NSP labels 0", attrs == {packing} and layout_ok, attrs)
        every_token_twice(packing, (t for r in rows for t in r[1:-1] if t != SEP), reference)
        not_run, bad_boundary, crossing, mid_sentence = 0, 0, 0, 0
        for r in rows:
            parts = []
            for t in r[1:-1]:
                if t == SEP or not parts:
                    parts.append([])
                if t != SEP:
                    parts[-1].append(t)
            keys = ["".join(f"{t}," for t in q) for q in parts]
            not_run += sum(k not in plain or not k for k in keys)
            crossing += len(keys) > 1
            for i in range(len(keys) - 1):
                bad_boundary += (keys[i] + "|") not in plain or ("|" + keys[i + 1]) not in plain
            at = [m.start() for m in re.finditer(re.escape(keys[0]), plain)]
            mid_sentence += not any(a in starts for a in at)
        expect(f"{packing}: {len(rows)} rows, each [SEP]-delimited part a run of one document ({not_run} not)",
               rows and not not_run)
        if packing != "doc-sentences":
            expect(f"{packing}: {crossing} rows cross documents, every boundary inside a row a document's end, a "
                   f"[SEP], the next document's start ({bad_boundary} not)", crossing > 10 and not bad_boundary)
        else:
            expect(f"doc-sentences: one part per row ({crossing} rows with more)", not crossing)
        if packing != "contiguous":
            expect(f"{packing}: rows start at a sentence start but {mid_sentence}, at most the {PASSES} x "
                   f"{long_pieces} rows that go on with a sentence longer than a row",
                   mid_sentence <= PASSES * long_pieces)
        else:
            # A row whose room ends one token after a document's end is left one short: a [SEP]
            # there would separate nothing.
            short = sum(len(r) < S - 1 for r in rows)
            expect(f"contiguous: every row full (or one short, where a document ends there) but the last of each "
                   f"pass over the text ({short} of {len(rows)} shorter), {mid_sentence} rows starting inside a "
                   f"sentence", short <= PASSES and mid_sentence > 100)
        share = sum(len(r) for r in rows) / (len(rows) * S)
        shares[packing] = share
        expect(f"{packing}: prep prints the real-token share of its rows ({printed_share(p.stdout):.3f} vs "
               f"{share:.3f} counted here)", abs(printed_share(p.stdout) - share) <= 0.0005, p.stdout[-600:])
    expect(f"contiguous fills more of the rows than full-sentences, full-sentences more than doc-sentences "
           f"({shares['contiguous']:.3f} > {shares['full-sentences']:.3f} > {shares['doc-sentences']:.3f})",
           shares["contiguous"] > shares["full-sentences"] > shares["doc-sentences"])

    # Separate documents: [CLS] d1 [SEP] [CLS] d2 [SEP] ..., the [CLS] positions recorded.
    doc_keys = ["".join(f"{t}," for s in d for t in s) for d in docs]
    ends_doc = {}  # a piece's key -> the documents it is a suffix of, as met
    for packing in ("full-sentences", "contiguous"):
        out_dir = os.path.join(tmp, f"{packing}-separate")
        p = run([bertpre, "prep", "--tokenizer", spm, "--output", out_dir, "--format", "lines", "--seq-length", S,
                 "--max-predictions", P, "--packing", packing, "--separate-documents", "--dupe-factor", PASSES,
                 "--shards", 2, "--no-progress", corpus])
        rows, attrs, layout, starts_ok, widths, on_special = [], set(), True, 0, set(), 0
        for name in sorted(os.listdir(out_dir)):
            if not name.endswith(".hdf5"):
                continue
            path = os.path.join(out_dir, name)
            attr, part, mask, seg, nsp = read_rows(path)
            with h5py.File(path, "r") as h:
                ds = h.get("document_starts")
                recorded_starts = ds[:] if ds is not None else np.zeros((len(part), 1), int)
                widths.add((ds.shape[1], ds.dtype.kind) if ds is not None else None)
                pos, labels = h["masked_lm_positions"][:], h["masked_lm_ids"][:]
            attrs.add(attr)
            layout &= bool((seg == 0).all() and (nsp == 0).all())
            for r, row in enumerate(part):
                # The pieces: [CLS] content [SEP], one after the other, filling the row.
                cls_at, pieces, i, ok = [], [], 0, True
                while ok and i < len(row):
                    ok = row[i] == CLS and SEP in row[i + 1:]
                    if ok:
                        j = row.index(SEP, i + 1)
                        ok = j > i + 1 and CLS not in row[i + 1:j]
                        cls_at.append(i)
                        pieces.append(row[i + 1:j])
                        i = j + 1
                row_starts, n = [int(v) for v in recorded_starts[r]], 1
                while n < len(row_starts) and row_starts[n]:
                    n += 1
                recorded, zeros_after = row_starts[:n], not any(row_starts[n:])
                ok &= recorded == cls_at and zeros_after
                starts_ok += ok
                rows.append(pieces if ok else None)
                for k in range(pos.shape[1]):
                    if pos[r, k] == 0:
                        break
                    on_special += labels[r, k] in (CLS, SEP) or pos[r, k] in cls_at
        total = len(rows)
        rows = [q for q in rows if q is not None]
        expect(f"{packing} --separate-documents: packing '{packing}'; document_starts [N, {S // 3}] of integers; "
               f"segment ids and NSP labels 0", attrs == {packing} and widths == {(S // 3, "i")} and layout,
               (attrs, widths))
        expect(f"{packing} --separate-documents: every row ([CLS] piece [SEP])+, pieces non-empty, their [CLS] "
               f"positions the row's document_starts ({total - starts_ok} of {total} rows not)",
               total and starts_ok == total)
        every_token_twice(f"{packing} --separate-documents", (t for r in rows for q in r for t in q), reference)
        not_run, bad_follow, several, mid_sentence = 0, 0, 0, 0
        for r in rows:
            keys = ["".join(f"{t}," for t in q) for q in r]
            not_run += sum(k not in plain for k in keys)
            several += len(keys) > 1
            for i in range(len(keys) - 1):
                # Piece i ends document k, piece i + 1 begins document k + 1 (whole when inside).
                if keys[i] not in ends_doc:
                    ends_doc[keys[i]] = [k for k, d in enumerate(doc_keys) if d.endswith(keys[i])]
                follow = [k for k in ends_doc[keys[i]] if k + 1 < len(doc_keys) and
                          doc_keys[k + 1].startswith(keys[i + 1])]
                inner = i + 1 < len(keys) - 1
                bad_follow += not follow or (inner and not any(doc_keys[k + 1] == keys[i + 1] for k in follow))
            at = [m.start() for m in re.finditer(re.escape(keys[0]), plain)]
            mid_sentence += not any(a in starts for a in at)
        expect(f"{packing} --separate-documents: {len(rows)} rows, each piece a run of one document ({not_run} "
               f"not); {several} rows of several pieces, each piece but the last its document's end and the next "
               f"the following document's start ({bad_follow} not)", not not_run and several > 10 and not bad_follow)
        lengths = [sum(len(q) + 2 for q in r) for r in rows]
        if packing == "full-sentences":
            expect(f"{packing} --separate-documents: rows start at a sentence start but {mid_sentence}, at most the "
                   f"{PASSES} x {long_pieces} rows that go on with a sentence longer than a row",
                   mid_sentence <= PASSES * long_pieces)
        else:
            short = sum(n < S - 2 for n in lengths)
            expect(f"contiguous --separate-documents: every row full or up to two short but the last of each pass "
                   f"({short} of {len(rows)} shorter), {mid_sentence} rows starting inside a sentence",
                   short <= PASSES and mid_sentence > 100)
        expect(f"{packing} --separate-documents: no masked position on a [CLS] or [SEP] ({on_special})",
               not on_special)
        share = sum(lengths) / (len(rows) * S)
        expect(f"{packing} --separate-documents: prep prints the real-token share of its rows "
               f"({printed_share(p.stdout):.3f} vs {share:.3f} counted here)",
               abs(printed_share(p.stdout) - share) <= 0.0005, p.stdout[-600:])
    for packing in ("doc-sentences", "pairs"):
        out_dir = os.path.join(tmp, f"refused-{packing}")
        p = run([bertpre, "prep", "--tokenizer", spm, "--output", out_dir, "--format", "lines", "--packing", packing,
                 "--separate-documents", "--no-progress", corpus], check=False)
        err = p.stderr.strip()
        expect(f"--separate-documents with --packing {packing}: exit 1, one line naming the option and the packings "
               f"it takes, nothing written",
               p.returncode == 1 and len(err.splitlines()) == 1 and "--separate-documents" in err and
               "full-sentences or contiguous" in err and packing in err and not os.path.exists(out_dir), err)

    # The demo's corpus as tools/demo.sh prepares it: running text of .rst.gz files, seq 64.
    for packing, floor in (("full-sentences", 0.0), ("contiguous", 0.95)):
        demo = os.path.join(tmp, f"demo-{packing}")
        p = run([bertpre, "prep", "--tokenizer", spm, "--output", demo, "--format", "text", "--pattern", "*.rst.gz",
                 "--seq-length", S, "--max-predictions", P, "--packing", packing, "--dupe-factor", 1,
                 "--no-progress", os.path.join(linux_doc(), "admin-guide")])
        demo_rows = read_rows(os.path.join(demo, "train-00000.hdf5"))[1]
        share = sum(len(r) for r in demo_rows) / (len(demo_rows) * S)
        expect(f"the demo's corpus (admin-guide, --format text, seq {S}), {packing}: {share:.4f} of the positions "
               f"real{f' (> {floor})' if floor else ''}, as prep says ({printed_share(p.stdout):.4f})",
               share > floor and abs(printed_share(p.stdout) - share) <= 0.0005, p.stdout[-600:])

    # Training on packed shards: mlm only.
    packed = os.path.join(tmp, "packed")
    run([bertpre, "prep", "--tokenizer", spm, "--output", packed, "--format", "lines", "--seq-length", S,
         "--max-predictions", P, "--packing", "full-sentences", "--eval-fraction", 0.1, "--dupe-factor", 1,
         "--no-progress", corpus])
    pairs = os.path.join(tmp, "pairs")
    run([bertpre, "prep", "--tokenizer", spm, "--output", pairs, "--format", "lines", "--seq-length", S,
         "--max-predictions", P, "--eval-fraction", 0.1, "--dupe-factor", 1, "--no-progress", corpus])
    cfg = os.path.join(tmp, "run.json")
    with open(cfg, "w") as f:
        json.dump({"model": {"vocab_size": 512, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                             "intermediate_size": 64, "max_position_embeddings": S},
                   "train": {"data": os.path.join(packed, "train-*.hdf5"), "eval_data": os.path.join(packed, "eval-00000.hdf5"),
                             "tokenizer": spm, "micro_batch_size": 8, "seq_length": S, "max_predictions_per_seq": P,
                             "steps": 2, "log_every": 1, "eval_batches": 2}}, f)
    for what, sets, shard in (("train.data packed", [], os.path.join(packed, "train-00000.hdf5")),
                              ("train.eval_data packed", [f"train.data={os.path.join(pairs, 'train-*.hdf5')}"],
                               os.path.join(packed, "eval-00000.hdf5"))):
        p = run([bertpre, "train", cfg, *sum((["--set", s] for s in sets), [])], check=False)
        expect(f"mlm+nsp with {what}: exit 1 naming the shard, its packing and train.objective, before any step",
               p.returncode == 1 and shard in p.stderr and "--packing full-sentences" in p.stderr and
               "train.objective" in p.stderr and not re.search(r"^step ", p.stdout, re.M), p.stderr)
    # The attribute as h5py writes a str (variable length), and a value that is no packing.
    for value, words in (("doc-sentences", ["--packing doc-sentences", "train.objective"]),
                         ("bogus", ["attribute 'packing'", "full-sentences"])):
        odd = os.path.join(tmp, f"odd-{value}.hdf5")
        with h5py.File(os.path.join(packed, "train-00000.hdf5"), "r") as src, h5py.File(odd, "w") as dst:
            for k in src.keys():
                dst.create_dataset(k, data=src[k][:])
            dst.attrs["packing"] = value
        p = run([bertpre, "train", cfg, "--set", f"train.data={odd}"], check=False)
        expect(f"a shard whose 'packing' h5py wrote as a str '{value}': exit 1 naming the file and {words[0]}",
               p.returncode == 1 and odd in p.stderr and all(w in p.stderr for w in words), p.stderr)
    root = os.path.join(tmp, "ckpt")
    p = run([bertpre, "train", cfg, "--set", "train.objective=mlm", "--set", f"train.checkpoint_dir={root}"],
            check=False)
    expect("train.objective mlm on packed shards: trains and evaluates (no NSP number)",
           p.returncode == 0 and "step     2/2" in p.stdout and "eval | 16 sequences" in p.stdout and
           not any("nsp" in line for line in p.stdout.splitlines() if line.startswith(("step ", "eval | "))),
           p.stdout[-1500:] + p.stderr[-1500:])
    # Rows of separate documents (document_starts) train and evaluate the same way.
    separate = os.path.join(tmp, "packed-separate")
    run([bertpre, "prep", "--tokenizer", spm, "--output", separate, "--format", "lines", "--seq-length", S,
         "--max-predictions", P, "--packing", "contiguous", "--separate-documents", "--eval-fraction", 0.1,
         "--dupe-factor", 1, "--no-progress", corpus])
    p = run([bertpre, "train", cfg, "--set", "train.objective=mlm", "--set",
             f"train.data={os.path.join(separate, 'train-*.hdf5')}", "--set",
             f"train.eval_data={os.path.join(separate, 'eval-00000.hdf5')}", "--set",
             f"train.checkpoint_dir={os.path.join(tmp, 'ckpt-separate')}"], check=False)
    expect("train.objective mlm on shards of separate documents (document_starts): trains and evaluates",
           p.returncode == 0 and "step     2/2" in p.stdout and "eval | 16 sequences" in p.stdout,
           p.stdout[-1500:] + p.stderr[-1500:])
    nsp_root = os.path.join(tmp, "ckpt-nsp")
    run([bertpre, "train", cfg, "--set", f"train.data={os.path.join(pairs, 'train-*.hdf5')}",
         "--set", f"train.eval_data={os.path.join(pairs, 'eval-00000.hdf5')}", "--set",
         f"train.checkpoint_dir={nsp_root}"])
    result = os.path.join(tmp, "eval.json")
    p = run([bertpre, "eval", nsp_root, "--data", os.path.join(packed, "eval-00000.hdf5"), "--json", result])
    with open(result) as f:
        got = json.load(f)
    eval_line = [line for line in p.stdout.splitlines() if line.startswith("eval | ")]
    expect("eval of an mlm+nsp checkpoint on packed rows: MLM numbers alone (line and JSON), objective mlm+nsp",
           eval_line and "nsp" not in eval_line[0] and "nsp_loss" not in got and got.get("objective") == "mlm+nsp",
           p.stdout + json.dumps(got))

sys.exit(checks.exit_status())
