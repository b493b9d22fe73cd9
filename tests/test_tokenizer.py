"""The SentencePiece C API (tokenizer/) against Python's sentencepiece package (its own
bundled C++ build) for the same model, on more than 1 MB of real English text (the
linux-doc reStructuredText sources): identical ids for every line, identical pieces and
special ids, the .vocab file's pieces and scores, decode(encode(x)) == x, and errors
reported as statuses, not crashes. Training's progress lines (BERTPRE_PROGRESS_EVERY=0: at
every chance) rise and fall as they should and leave the model unchanged, byte for byte.
usage: test_tokenizer.py BERTPRE"""
import os
import re
import subprocess
import sys
import tempfile

import checks
from data_fixtures import Checks, real_lines, require, run

bertpre = sys.argv[1]
require(bertpre, "sentencepiece")
with checks.needs("Python sentencepiece", hint="tools/requirements.txt pins it"):
    import sentencepiece as spm

c = Checks()
lines = real_lines(1_200_000)
text = "\n".join(lines) + "\n"
with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"corpus: {len(lines)} lines, {len(text.encode()) / 1e6:.2f} MB of linux-doc text")
    model = os.path.join(tmp, "spm")
    run([bertpre, "tokenizer", "train", "--format", "lines", "--model-prefix", model, "--vocab-size", 4000,
         "--input-sentence-size", 200000, corpus])
    # Progress: with BERTPRE_PROGRESS_EVERY=0 a line at every chance (a thousand sentences read,
    # a round of pruning), and the same model as without them (the trainer's log taken aside
    # changes nothing it computes).
    again = os.path.join(tmp, "again")
    p = subprocess.run([bertpre, "tokenizer", "train", "--format", "lines", "--model-prefix", again,
                        "--vocab-size", "4000", "--input-sentence-size", "200000", corpus], capture_output=True,
                       text=True, env=dict(os.environ, BERTPRE_PROGRESS_EVERY="0"))
    reading = [int(m) for m in re.findall(r"^tokenizer: reading: (\d+) sentences, [\d.]+ MB of text, \d+% of the "
                                          r"input", p.stderr, re.M)]
    pieces = [(int(a), int(b)) for a, b in re.findall(r"^tokenizer: training: (\d+) pieces \(from \d+ candidates\), "
                                                      r"pruning to 4000: (\d+) rounds? done", p.stderr, re.M)]
    c.expect(f"progress on stderr: {len(reading)} reading lines with the sentences rising, {len(pieces)} pruning "
             "lines with the pieces falling toward 4000 (above 4000) round after round",
             p.returncode == 0 and len(reading) >= 2 and reading == sorted(set(reading)) and len(pieces) >= 2
             and [n for n, _ in pieces] == sorted({n for n, _ in pieces}, reverse=True) and pieces[-1][0] > 4000
             and [r for _, r in pieces] == list(range(1, len(pieces) + 1)), p.stderr[-1500:])
    c.expect("the model trained with progress lines is the same, byte for byte",
             p.returncode == 0 and open(again + ".model", "rb").read() == open(model + ".model", "rb").read())
    model += ".model"
    ref = spm.SentencePieceProcessor(model_file=model)

    info = dict(l.split() for l in run([bertpre, "tokenizer", "info", "--model", model]).stdout.splitlines())
    c.expect("vocabulary size equals Python's", int(info["vocab_size"]) == ref.get_piece_size() == 4000,
             f"{info['vocab_size']} vs {ref.get_piece_size()}")
    want = {"pad": ("<pad>", 0), "unk": ("<unk>", 1), "cls": ("[CLS]", 2), "sep": ("[SEP]", 3), "mask": ("[MASK]", 4)}
    c.expect("special ids follow ALBERT: <pad>=0 <unk>=1 [CLS]=2 [SEP]=3 [MASK]=4, as Python reads them",
             all(int(info[k]) == ref.piece_to_id(p) == i for k, (p, i) in want.items()), str(info))
    c.expect("[CLS] [SEP] [MASK] are control symbols in the model",
             all(ref.is_control(i) for i in (2, 3, 4)))
    # PREFIX.vocab (written by bertpre from the trained model): a piece and its score per id,
    # as Python reads them from PREFIX.model; scores printed to 6 digits (%g), so within 1e-5.
    with open(model[:-len(".model")] + ".vocab", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f]
    c.expect("PREFIX.vocab: one line per id, its piece and its score (within 1e-5 relative) as Python reads them",
             len(rows) == ref.get_piece_size() and all(
                 r[0] == ref.id_to_piece(i) and
                 abs(float(r[1]) - ref.get_score(i)) <= 1e-5 * max(1, abs(ref.get_score(i)))
                 for i, r in enumerate(rows)), str(rows[:6]))

    ours = run([bertpre, "tokenizer", "encode", "--model", model, corpus]).stdout.splitlines()
    theirs = ref.encode(lines)
    mismatch = [i for i, (a, b) in enumerate(zip(ours, theirs)) if [int(t) for t in a.split()] != b]
    c.expect(f"ids equal Python sentencepiece's on all {len(lines)} lines", len(ours) == len(lines) and not mismatch,
             f"first differing line {mismatch[:1]}")
    pieces = run([bertpre, "tokenizer", "encode", "--pieces", "--model", model, corpus]).stdout.splitlines()
    ref_pieces = [[ref.id_to_piece(i) for i in ids] for ids in theirs[:2000]]
    c.expect("pieces of the ids equal Python's id_to_piece (first 2,000 lines)",
             all(a.split(" ") == b for a, b in zip(pieces[:2000], ref_pieces)))

    ids_file = os.path.join(tmp, "ids.txt")
    with open(ids_file, "w") as f:
        f.write("\n".join(ours) + "\n")
    decoded = run([bertpre, "tokenizer", "decode", "--model", model, ids_file]).stdout.split("\n")[:len(lines)]
    ref_decoded = ref.decode(theirs)
    c.expect("decode equals Python's decode on every line", decoded == ref_decoded)
    # Exact round trip where normalization is the identity: printable ASCII, single spaces,
    # and no piece outside the vocabulary.
    plain = [i for i, l in enumerate(lines)
             if l.isascii() and l.isprintable() and "  " not in l and 1 not in theirs[i]]
    exact = sum(decoded[i] == lines[i] for i in plain)
    c.expect(f"decode(encode(x)) == x on all {len(plain)} plain-ASCII lines without <unk>", exact == len(plain),
             f"{exact} exact")

    bad = run([bertpre, "tokenizer", "info", "--model", os.path.join(tmp, "missing.model")], check=False)
    c.expect("a missing model file: non-zero exit and an error naming it",
             bad.returncode != 0 and "missing.model" in bad.stderr, bad.stderr.strip())
    garbage = os.path.join(tmp, "garbage.model")
    with open(garbage, "wb") as f:
        f.write(os.urandom(1000))
    bad = run([bertpre, "tokenizer", "encode", "--model", garbage, corpus], check=False)
    c.expect("a corrupt model file: an error status (exit 1), not a crash",
             bad.returncode == 1 and "garbage.model" in bad.stderr, bad.stderr.strip())
    p = subprocess.run([bertpre, "tokenizer", "decode", "--model", model], input="5 99999\n",
                                     capture_output=True, text=True)
    c.expect("decoding an id outside the vocabulary: an error naming the id",
             p.returncode == 1 and "99999" in p.stderr, p.stderr.strip())
c.finish()
